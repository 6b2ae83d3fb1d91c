"""docs/tutorials/tf_agents_loop.py runs at toy size: both agents train in a plain TF-Agents loop, their
PolicySaver exports reload and pick the agent's greedy actions, and the summary holds finite returns."""

import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_tf_agents_loop_tutorial_runs_at_toy_size(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "docs", "tutorials", "tf_agents_loop.py"), "--toy",
         f"--work_dir={out}"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for kind in ("prodqn", "dqn"):
        assert f"{kind}: reloaded policy at" in done.stdout and "greedy action: True" in done.stdout
        assert (out / kind / "policy" / "saved_model.pb").exists()
        # CartPole pays 1 per step and an episode lasts at least a few steps
        assert all(
            math.isfinite(summary[kind][key]) and summary[kind][key] >= 5
            for key in ("greedy_return_before", "greedy_return_after")
        ), summary[kind]
    assert summary["train_steps"] == 300
