"""Evaluation during training (`Experiment.eval_every`, `OnlineExperiment.eval_interval`): ``progress.csv``
holds a row per evaluation at the hand-counted steps, its last row is the curve's entry at k = K (the same
parameters, evaluated by the same protocol), TensorBoard gets ``eval/<metric>``, and training is the same
with the evaluation as without it."""

import csv
import glob
import os

import gin
import ground_truth  # tests/experiments/ is on sys.path (pytest prepends it)
import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.experiments.config import parse_config
from pbo_tf.experiments.runner import Experiment
from pbo_tf.progress_log import ProgressCSV, eta_text, metrics_text


def _rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _tags(folder) -> set[str]:
    tags = set()
    for path in glob.glob(os.path.join(folder, "tensorboard", "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


def _offline(root, gin_file, bindings):
    parse_config([gin_file], bindings)
    try:
        return Experiment(root_dir=str(root), log=None).run()
    finally:
        gin.clear_config()


@pytest.mark.parametrize("algorithm", ["profqi", "fqi"])
def test_offline_rows_at_every_nth_round_end_at_the_curve_s_k_and_training_is_unchanged(tmp_path, algorithm):
    """Chain-walk, K = 3: ProFQI's 5 refreshes evaluated every 2 (rows 2, 4 and the last, 5) at Λ^K(ω₀),
    row 4 checked by hand on refresh 4's checkpointed linear operator against Q* by value iteration, and
    rows 4 and 5's gradient steps those the checkpoints counted; FQI's 3 iterations every 2 (rows 2 and 3)
    at its last iterate ω_k, which is the curve's entry at k."""
    gin_file = f"chain_walk/{algorithm}.gin"
    bindings = ["K=3", "REFRESHES=5", "MAX_EPOCHS=3", "PATIENCE=1"]
    plain = _offline(tmp_path / "plain", gin_file, [*bindings, "EVAL_EVERY=0"])
    # (a checkpoint after every refresh, the last two kept, is not training: the curves must agree)
    keep = ["ProFQIConfig.checkpoint_every_s = 0"] if algorithm == "profqi" else []
    evaluated = _offline(tmp_path / "eval", gin_file, [*bindings, "EVAL_EVERY=2", *keep])
    assert evaluated["curve"] == plain["curve"]  # the same training
    assert not os.path.exists(tmp_path / "plain" / "progress.csv")
    rows = _rows(tmp_path / "eval" / "progress.csv")
    rounds = [2, 4, 5] if algorithm == "profqi" else [2, 3]
    assert [int(r["round"]) for r in rows] == rounds
    assert list(rows[0])[:3] == ["round", "gradient_steps", "wall_time_s"]
    for row in rows:
        # (FQI: round k is iterate k; ProFQI: every row is Λ^K(ω₀) of that refresh's operator)
        k = int(row["round"]) if algorithm == "fqi" else 3
        if algorithm == "fqi" or int(row["round"]) == 5:
            at_k = next(e for e in evaluated["curve"] if e["k"] == k)
            assert float(row["q_error_rms"]) == pytest.approx(at_k["q_error_rms"], rel=1e-6)
    steps = [int(r["gradient_steps"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] > 0
    if algorithm == "profqi":  # Λ^3(ω₀) of refresh 4's operator in float64: ω ↦ ω kernel + bias
        with np.load(tmp_path / "eval" / "iterates.npz") as data:
            omega = data["iterates"][0].astype(np.float64)
        for n, row in ((4, rows[1]), (5, rows[2])):
            ckpt = tf.train.load_checkpoint(str(tmp_path / "eval" / "checkpoints" / f"ckpt-{n}"))
            kernel, bias, adam = (
                ckpt.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE").astype(np.float64)
                for name in ("pbo/dense/kernel", "pbo/dense/bias", "optimizer/_iterations")
            )
            assert int(row["gradient_steps"]) == int(adam), n
            if n == 4:
                at_k = omega
                for _ in range(3):
                    at_k = at_k @ kernel + bias
                want = np.sqrt(np.mean((at_k - ground_truth.chain_walk_q_star().reshape(-1)) ** 2))
                assert float(row["q_error_rms"]) == pytest.approx(want, rel=1e-5)
    assert "eval/q_error_rms" in _tags(tmp_path / "eval")


def test_online_rows_at_every_nth_training_step_end_at_the_curve_s_k_and_training_is_unchanged(tmp_path):
    """CartPole DQN, K = 3 target updates × 4 training steps: evaluated every 5 training steps (rows 5, 10 and
    the last, 12); the last row is ω_K's greedy return over the same seeded episodes as the curve's. Both runs
    with deterministic ops (`pbo-train --deterministic`): without, two runs of the same online config may
    differ."""
    import json
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bindings = [
        "K=3", "DQN_TRAIN_STEPS_PER_REFRESH=4", "INITIAL_COLLECT_STEPS=20", "BATCH_SIZE=8",
        "GymOnlineEnv.hidden=[8]", "OnlineExperiment.n_eval_episodes=3", "DQNConfig.jit_compile=False",
    ]  # fmt: skip
    results = {}
    for name, extra in (
        ("plain", ["EVAL_INTERVAL=0"]),
        ("eval", ["EVAL_INTERVAL=5", "OnlineExperiment.eval_episodes=3"]),
    ):
        args = [sys.executable, os.path.join(repo, "launch", "train.py"), "--deterministic",
                "--gin_file=gym/dqn.gin", f"--root_dir={tmp_path / name}"]  # fmt: skip
        args += [f"--gin_bindings={b}" for b in [*bindings, *extra]]
        out = subprocess.run(args, capture_output=True, text=True, cwd=repo, check=False)
        assert out.returncode == 0, out.stderr[-2000:]
        results[name] = json.loads((tmp_path / name / "metrics.json").read_text())
    assert results["eval"]["curve"] == results["plain"]["curve"]  # the same training and evaluation
    rows = _rows(tmp_path / "eval" / "progress.csv")
    assert [int(r["train_step"]) for r in rows] == [5, 10, 12]
    assert [int(r["env_steps"]) for r in rows] == [20 + 2 * s for s in (5, 10, 12)]  # 2 env steps each
    last = results["eval"]["curve"][3]
    assert float(rows[-1]["return"]) == pytest.approx(last["return"], rel=1e-9)
    tags = _tags(tmp_path / "eval")
    assert "eval/return" in tags and "eval_by_env_steps/return" in tags


def test_a_resumed_run_drops_the_rows_past_its_checkpoint_and_appends(tmp_path):
    log = ProgressCSV(str(tmp_path), "round")
    for r in (1, 2, 3):
        log.append({"round": r, "gradient_steps": 10 * r, "J": 0.5 * r})
    resumed = ProgressCSV(str(tmp_path), "round")  # restored at round 2: round 3 runs again
    resumed.rewind(3)
    resumed.append({"round": 3, "gradient_steps": 30, "J": 9.0, "not_in_header": 1})
    rows = _rows(tmp_path / "progress.csv")
    assert [(r["round"], r["J"]) for r in rows] == [("1", "0.5"), ("2", "1.0"), ("3", "9.0")]
    assert list(rows[0]) == ["round", "gradient_steps", "J"]


@pytest.mark.parametrize(
    "remaining, rate, want",
    [
        (100, 10.0, "ETA 10s"),
        (1000, 10.0, "ETA 1m40s"),
        (36_000, 10.0, "ETA 1h00m"),
        (5, None, ""),
        (5, 0.0, ""),
    ],
)
def test_eta_text(remaining, rate, want):
    assert eta_text(remaining, rate) == want


def test_metrics_text_keeps_numbers_in_order():
    assert metrics_text({"return": 153.25, "name": "x", "J": np.float64(2.0)}) == "return 153.2, J 2"
