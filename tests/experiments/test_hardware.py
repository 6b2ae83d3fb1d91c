"""The hardware a run trained on, in ``metrics.json`` (`pbo_tf.experiments.hardware`): its value on this
host, and a folder written without it (a run finished or interrupted before the record existed) read back or
resumed as before, its fingerprint unchanged."""

import json
import os

import tensorflow as tf
from runner_sizes import run_tiny  # tests/experiments/ is on sys.path (pytest prepends it)

from pbo_tf.analysis import results
from pbo_tf.experiments import run_folder
from pbo_tf.experiments.config import GIN_CONFIGS_DIR
from pbo_tf.experiments.hardware import training_hardware

PROFQI = os.path.join(GIN_CONFIGS_DIR, "chain_walk", "profqi.gin")


def test_the_record_names_this_hosts_device_and_its_matmul_precision():
    framework = f"tensorflow {tf.__version__}"
    gpus = tf.config.list_physical_devices("GPU")
    enabled = tf.config.experimental.tensor_float_32_execution_enabled()
    assert enabled  # TensorFlow's default: float32 matmuls may run in TF32 where the hardware has it
    try:
        record = training_hardware()
        tf.config.experimental.enable_tensor_float_32_execution(False)
        full = training_hardware()
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(enabled)
    if not gpus:  # a CPU host (CI's): float32 whatever the precision asked
        assert record == {
            "device": "CPU", "platform": "cpu", "framework": framework, "matmul_precision": "default",
            "tf32": False,
        }  # fmt: skip
    else:
        name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", gpus[0].name)
        assert record["device"] == name and record["platform"] == "gpu"
    assert full == dict(record, matmul_precision="highest", tf32=False)  # TF32 off: float32 on any device
    assert json.loads(json.dumps(record)) == record


def test_a_folder_without_the_record_is_read_back_or_resumed_with_its_fingerprint(tmp_path):
    root = tmp_path / "run"
    metrics = run_tiny(PROFQI, root)
    assert metrics["hardware"] == training_hardware()
    on_disk = json.loads((root / "metrics.json").read_text())
    assert on_disk["hardware"] == metrics["hardware"]
    fingerprint = (root / "fingerprint.json").read_text()
    assert "hardware" not in fingerprint and "tf32" not in fingerprint  # not part of the experiment

    # Finished without it: complete, read back as it is (not rerun, not rewritten), and readers take it.
    del on_disk["hardware"]
    (root / "metrics.json").write_text(json.dumps(on_disk))
    read_back = run_tiny(PROFQI, root)  # (`load_metrics`: with the folder's paths added)
    assert {k: v for k, v in read_back.items() if k not in ("run_dir", "seed_dir")} == on_disk
    assert "hardware" not in json.loads((root / "metrics.json").read_text())
    (record,) = results.load_runs(str(tmp_path))
    assert record["curve"] == on_disk["curve"]

    # Interrupted before its metrics.json: the same fingerprint resumes, and the finish records it.
    os.remove(root / "metrics.json")
    assert run_folder.check(str(root)) == "resume"
    resumed = run_tiny(PROFQI, root)
    assert resumed["hardware"] == training_hardware()
    assert resumed["curve"] == on_disk["curve"]
    assert (root / "fingerprint.json").read_text() == fingerprint


def test_a_gpu_records_its_name_and_tf32_where_it_has_tf32(monkeypatch):
    """The GPU branch, with TensorFlow's device queries answered as a GPU machine answers them."""
    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    details = {"device_name": "NVIDIA H200", "compute_capability": (9, 0)}
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [gpu] if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "get_device_details", lambda device: details)
    framework = f"tensorflow {tf.__version__}"
    assert training_hardware() == {
        "device": "NVIDIA H200", "platform": "gpu", "framework": framework, "matmul_precision": "default",
        "tf32": True,
    }  # fmt: skip
    details["compute_capability"] = (7, 0)  # a V100: no TF32
    assert training_hardware()["tf32"] is False
    details["compute_capability"] = (8, 0)  # an A100: the first with TF32
    assert training_hardware()["tf32"] is True
    monkeypatch.setattr(tf.config.experimental, "tensor_float_32_execution_enabled", lambda: False)
    assert training_hardware() == {
        "device": "NVIDIA H200", "platform": "gpu", "framework": framework, "matmul_precision": "highest",
        "tf32": False,
    }  # fmt: skip
