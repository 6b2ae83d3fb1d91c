"""pbo_tf: projected Bellman operators (AAAI 2024) in TensorFlow / tf_keras with TF-Agents integration.

Install with `bash scripts/setup.sh` (see BUILD.md): tf-agents and gym must go in with --no-deps, which a
plain `pip install .` cannot express, so the pins live in requirements/*.txt.
"""

from setuptools import find_packages, setup

setup(
    name="pbo_tf",
    version="0.1.0",
    description="Parameterized projected Bellman operators (ProFQI, ProDQN) in TensorFlow",
    packages=find_packages(include=["pbo_tf", "pbo_tf.*"]),
    package_data={"pbo_tf.envs": ["data/*.npz"]},  # the exact car-on-hill optimum (V*, Q*)
    python_requires=">=3.10",
    install_requires=[
        "tensorflow==2.21.0",
        "tf-keras==2.21.0",
        "tensorflow-probability==0.25.0",
        "gymnasium==1.4.0",
        "gin-config==0.5.0",
        "absl-py",
        "numpy",
        "scipy",
        "matplotlib",
    ],
)
