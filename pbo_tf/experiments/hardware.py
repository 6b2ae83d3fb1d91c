"""What a run trained on: the device and the precision of its float32 matmuls, as ``metrics.json`` records
them under ``hardware`` (docs/run_folder.md).

``{"device": "CPU" | "<GPU name>", "platform": "cpu" | "gpu", "framework": "tensorflow <version>",
"matmul_precision": "default" | "highest", "tf32": bool}``: ``matmul_precision`` is what the float32
matmuls ask for (``default`` while TensorFlow's TensorFloat-32 execution is enabled, its default;
``highest`` when `tf.config.experimental.enable_tensor_float_32_execution` turned it off), ``tf32`` whether
they ran in TF32: ``default`` precision on a GPU that has TF32 (compute capability 8.0 or higher). A CPU
computes float32 matmuls in float32 whatever the precision asked. The record is no part of the fingerprint
(`pbo_tf.experiments.run_folder`): a folder resumed on other hardware keeps its experiment.
"""

from __future__ import annotations

import tensorflow as tf

#: the first compute capability with TensorFloat-32 (NVIDIA Ampere)
TF32_COMPUTE_CAPABILITY = (8, 0)


def training_hardware() -> dict:
    """The ``hardware`` record of a run trained by this process with TensorFlow: its first GPU, or the CPU
    when it sees none."""
    precision = "default" if tf.config.experimental.tensor_float_32_execution_enabled() else "highest"
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return _record("CPU", "cpu", precision, tf32=False)
    details = tf.config.experimental.get_device_details(gpus[0])
    capability = details.get("compute_capability")
    has_tf32 = capability is None or tuple(capability) >= TF32_COMPUTE_CAPABILITY
    name = details.get("device_name", gpus[0].name)
    return _record(name, "gpu", precision, tf32=precision == "default" and has_tf32)


def _record(device: str, platform: str, precision: str, tf32: bool) -> dict:
    return {
        "device": device,
        "platform": platform,
        "framework": f"tensorflow {tf.__version__}",
        "matmul_precision": precision,
        "tf32": bool(tf32),
    }
