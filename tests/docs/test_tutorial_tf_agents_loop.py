"""docs/tutorials/tf_agents_loop.py runs at toy size: both agents train in a plain TF-Agents loop (every
trainable variable moves), their PolicySaver exports reload and pick the agent's greedy actions on 256
states on which the agent takes both actions, and the summary holds finite returns. (The round trip against
the Q values by hand: tests/agents/test_dqn.py and test_prodqn.py.)"""

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
        got = summary[kind]
        assert f"{kind}: reloaded policy at" in done.stdout
        assert (out / kind / "policy" / "saved_model.pb").exists()
        assert got["probe_agreement"] == got["probe_states"] == 256
        assert 0 < got["probe_action_1"] < 256  # the agreement covers both actions
        assert got["trainable_variables_changed"] == got["trainable_variables"] > 0
        assert all(math.isfinite(got[key]) for key in ("greedy_return_before", "greedy_return_after")), got
    assert summary["train_steps"] == 300
