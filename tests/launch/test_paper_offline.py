"""`scripts/paper_offline.sh` at toy size: its sweep layout, the gin files it picks (``ALGOS``), its seeds
(``SEEDS``, in one graph) and ``EXTRA_BINDINGS``; the exact operator's curve against value iteration."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pbo_tf.envs import chain_walk

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = "REFRESHES=1 PASSES_PER_REFRESH=1 MAX_EPOCHS=2 PATIENCE=1 EXTRA_ITERATIONS=3"


def test_paper_offline_runs_the_chosen_gin_files_and_seeds_and_the_oracle_is_value_iteration(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, KS="2", SEEDS="3-4", ALGOS="oracle")
    env.update(EXTRA_BINDINGS=TINY, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    script = os.path.join(REPO_ROOT, "scripts", "paper_offline.sh")
    proc = subprocess.run(
        ["bash", script, str(tmp_path), "chain_walk"], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    root = tmp_path / "chain_walk" / "k2" / "chain_walk"
    assert os.listdir(root) == ["oracle"]  # ALGOS: only the gin files named
    oracle = json.loads((root / "oracle" / "seeds_3-4" / "metrics.json").read_text())
    assert (oracle["K"], oracle["seeds"]) == (2, [3, 4])  # KS, and SEEDS in one run folder
    assert [e["k"] for e in oracle["curve"]] == list(range(6))  # EXTRA_ITERATIONS=3: k = 0..K + 3
    P, R = chain_walk.transition_model()
    q_star = chain_walk.optimal_q().reshape(-1)
    q = np.zeros(40)
    for entry in oracle["curve"]:
        assert entry["q_error_rms"] == pytest.approx(np.sqrt(np.mean((q - q_star) ** 2)), rel=1e-5)
        q = R + 0.9 * P @ q.reshape(20, 2).max(1)
