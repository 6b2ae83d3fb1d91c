"""pbo_tf: projected Bellman operators (AAAI 2024) in TensorFlow / tf_keras with TF-Agents integration.

``pip install .`` installs the package, its gin configs (``gin_configs/`` becomes the package data
``pbo_tf.gin_configs``), the console scripts ``pbo-train``, ``pbo-sweep``, ``pbo-plot``, ``pbo-play``,
``pbo-apply`` and ``pbo-report``, and the pinned runtime requirements of ``requirements/base.txt``; the
extras are the other requirement files (``pip install .[dev]``), except ``nodeps.txt``; ``ray.txt`` is the
extra ``sweep``.

TF-Agents 0.19.0 and gym 0.23.0 cannot be requirements: their metadata pins (gym <= 0.23, older numpy and
cloudpickle) conflict with TensorFlow 2.21 and gymnasium 1.4, although their code runs on this stack. Install
them apart with ``pip install --no-deps tf-agents==0.19.0 gym==0.23.0`` (``requirements/nodeps.txt``;
``scripts/setup.sh`` does it all, see BUILD.md). Without them the offline experiments and plotting work,
and the agents and online experiments fail at import with one line naming that command (`pbo_tf.deps`).

Lunar Lander's Box2D and pygame are pinned as ``box2d`` and ``pygame`` rather than through
``gymnasium[box2d]``, whose extra requires ``pygame-ce``: a second distribution of the same ``pygame``
module, which would overwrite the pinned one.
"""

import glob
import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def requirements(name: str) -> list[str]:
    """The requirement lines of ``requirements/<name>.txt`` (comments and blank lines dropped)."""
    with open(os.path.join(HERE, "requirements", f"{name}.txt"), encoding="utf-8") as f:
        lines = (line.split("#", 1)[0].strip() for line in f)
        return [line for line in lines if line]


NAMES = sorted(os.path.basename(path)[: -len(".txt")] for path in glob.glob(f"{HERE}/requirements/*.txt"))
INSTALL_REQUIRES = requirements("base")
#: Extras named otherwise than their requirement file: ``.[sweep]`` is Ray (``pbo-sweep --engine=ray``).
EXTRA_NAMES = {"ray": "sweep"}
# TF-Agents and gym (nodeps) cannot be requirements (see the docstring).
EXTRAS = {EXTRA_NAMES.get(name, name): requirements(name) for name in NAMES if name not in ("base", "nodeps")}

setup(
    name="pbo_tf",
    version="0.1.0",
    description="Parameterized projected Bellman operators (ProFQI, ProDQN) in TensorFlow",
    packages=[*find_packages(include=["pbo_tf", "pbo_tf.*"]), "pbo_tf.gin_configs"],
    package_dir={"pbo_tf.gin_configs": "gin_configs"},
    package_data={
        "pbo_tf.envs.car_on_hill": ["data/*.npz"],  # the exact car-on-hill optimum (V*, Q*)
        "pbo_tf.gin_configs": ["*.gin", "*/*.gin"],
    },
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": [
            "pbo-train = pbo_tf.cli.train:main",
            "pbo-sweep = pbo_tf.cli.sweep:main",
            "pbo-plot = pbo_tf.cli.plot:main",
            "pbo-play = pbo_tf.cli.play:main",
            "pbo-apply = pbo_tf.cli.apply:main",
            "pbo-report = pbo_tf.cli.report:main",
            "pbo-configs = pbo_tf.cli.configs:main",
        ]
    },
)
