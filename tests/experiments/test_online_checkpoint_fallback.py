"""An online run keeps its last two checkpoints: when the newest one's data file is cut short, a rerun says
so in one line, resumes from the one before and loses only the training steps since it: it ends with the
metrics and the ``progress.csv`` of the same run stopped at that earlier checkpoint and resumed from it.

(An online resume starts a new episode, so it is a continuation, not a replay of an uninterrupted run: the
run it must equal is the one that resumed from the same checkpoint. Every process runs with
``--deterministic``: without, two runs of one online config may differ.)"""

import csv
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: CartPole DQN, K = 3 target updates × 4 training steps, a checkpoint every 4 and an evaluation every 2.
BINDINGS = [
    "K=3", "DQN_TRAIN_STEPS_PER_REFRESH=4", "INITIAL_COLLECT_STEPS=20", "BATCH_SIZE=8",
    "GymOnlineEnv.hidden=[8]", "OnlineExperiment.n_eval_episodes=3", "DQNConfig.jit_compile=False",
    "EVAL_INTERVAL=2", "OnlineExperiment.eval_episodes=2", "OnlineExperiment.checkpoint_interval=4",
]  # fmt: skip
#: What differs between two runs of the same training: the clocks.
TIMINGS = ("wall_time_s", "eval_time_s", "env_steps_per_s", "grad_steps_per_s", "train_steps_per_s")
TIMINGS += ("loop_steps_per_s", "hardware")


def _train(root, *bindings) -> list[str]:
    """``pbo-train --deterministic`` on gym/dqn.gin at the toy size; its output lines."""
    args = [sys.executable, os.path.join(REPO, "launch", "train.py"), "--deterministic",
            "--gin_file=gym/dqn.gin", f"--root_dir={root}"]  # fmt: skip
    args += [f"--gin_bindings={b}" for b in [*BINDINGS, *bindings]]
    out = subprocess.run(args, capture_output=True, text=True, cwd=REPO, check=False, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return (out.stdout + out.stderr).splitlines()


def _finished(root) -> tuple[dict, list[dict]]:
    metrics = json.loads((root / "metrics.json").read_text())
    with open(root / "progress.csv", newline="") as f:
        rows = [{k: v for k, v in row.items() if k != "wall_time_s"} for row in csv.DictReader(f)]
    return {k: v for k, v in metrics.items() if k not in TIMINGS}, rows


def test_a_damaged_newest_online_checkpoint_falls_back_to_the_previous_one(tmp_path):
    damaged, resumed = tmp_path / "damaged", tmp_path / "resumed"
    _train(damaged, "OnlineExperiment.max_train_steps_this_call=8")  # stopped after training step 8
    checkpoints = damaged / "checkpoints"
    # ckpt-0 (after the initial collect), ckpt-4, ckpt-8: the last two kept
    assert sorted(p.name for p in checkpoints.glob("ckpt-*.index")) == ["ckpt-4.index", "ckpt-8.index"]
    (data,) = checkpoints.glob("ckpt-8.data-*")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    lines = _train(damaged)

    newest, previous = os.path.join(checkpoints, "ckpt-8"), os.path.join(checkpoints, "ckpt-4")
    (said,) = [line for line in lines if "is corrupt" in line]
    assert said.startswith(f"checkpoint {newest} is corrupt (")
    assert said.endswith(f"): resumed from the previous one, {previous}")
    assert f"restored checkpoint {previous} (training step 4)" in lines
    assert any(
        line.startswith("gym_CartPole-v1 / dqn: ") and "train steps 4 -> 12 of 12" in line for line in lines
    )

    # The same run stopped at training step 4 (its ckpt-4) and resumed from there, nothing damaged.
    _train(resumed, "OnlineExperiment.max_train_steps_this_call=4")
    _train(resumed)
    got, got_rows = _finished(damaged)
    want, want_rows = _finished(resumed)
    assert got == want  # the curve, the counters (env, training and Adam steps), the budget
    assert got["train_steps"] == 12 and got["env_steps"] == 20 + 2 * 12
    # progress.csv: the rows of steps 6 and 8 after ckpt-4 were dropped and evaluated again.
    assert [row["train_step"] for row in got_rows] == ["2", "4", "6", "8", "10", "12"]
    assert got_rows == want_rows
