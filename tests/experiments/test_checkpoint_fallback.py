"""A run keeps its last two checkpoints: when the newest one's data file is damaged, a rerun says so in one
line, resumes from the one before it and ends with the metrics and iterates of an uninterrupted run of the
same config (the ground truth), bit for bit."""

import json
import os

import numpy as np

from pbo_tf.experiments.config import parse_config
from pbo_tf.experiments.runner import Experiment
from pbo_tf.trainers import train_seeds

GIN = "gin_configs/chain_walk/profqi.gin"
#: 5 refreshes, a checkpoint after each one.
BINDINGS = [
    "K=2", "REFRESHES=5", "PASSES_PER_REFRESH=1", "EXTRA_ITERATIONS=1",
    "ProFQIConfig.checkpoint_every_s=0", "ProFQIConfig.jit_compile=False",
]  # fmt: skip


def _results(root):
    metrics = json.loads((root / "metrics.json").read_text())
    curve = [{k: v for k, v in point.items()} for point in metrics["curve"]]
    return curve, np.load(root / "iterates.npz")["iterates"]


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    parse_config([GIN], BINDINGS)
    Experiment(root_dir=str(tmp_path / "straight"), log=None).run()
    want_curve, want_iterates = _results(tmp_path / "straight")

    root = tmp_path / "resumed"
    experiment = Experiment(root_dir=str(root), log=None)
    trainer = experiment.build_seed(0)["trainer"]
    train_seeds([trainer], log=None, max_rounds=4)  # stopped after refresh 4: ckpt-3 and ckpt-4 kept
    checkpoints = root / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("ckpt-*.index")) == ["ckpt-3.index", "ckpt-4.index"]
    ledger = json.loads((checkpoints / "train_time.json").read_text())  # each kept checkpoint's time
    assert sorted(ledger["checkpoints"]) == ["ckpt-3", "ckpt-4"]
    assert ledger["train_seconds"] == ledger["checkpoints"]["ckpt-4"]["train_seconds"]
    assert 0 < ledger["checkpoints"]["ckpt-3"]["train_seconds"] < ledger["train_seconds"]
    (data,) = checkpoints.glob("ckpt-4.data-*")
    damaged = bytearray(data.read_bytes())
    damaged[len(damaged) // 2 :] = b"\xff" * (len(damaged) - len(damaged) // 2)
    data.write_bytes(bytes(damaged))

    # resumed from ckpt-3 with ckpt-3's training time: refresh 4's, redone, is not counted twice
    rebuilt = Experiment(root_dir=str(root), log=None).build_seed(0)["trainer"]
    assert rebuilt.train_seconds == ledger["checkpoints"]["ckpt-3"]["train_seconds"]
    lines = []
    Experiment(root_dir=str(root), log=lines.append).run()
    newest, previous = os.path.join(checkpoints, "ckpt-4"), os.path.join(checkpoints, "ckpt-3")
    (said,) = [line for line in lines if "is corrupt" in line]
    assert said.startswith(f"checkpoint {newest} is corrupt (")
    assert said.endswith(f"): resumed from the previous one, {previous}")
    assert f"restored checkpoint {previous}" in lines
    got_curve, got_iterates = _results(root)
    assert got_curve == want_curve
    np.testing.assert_array_equal(got_iterates, want_iterates)
