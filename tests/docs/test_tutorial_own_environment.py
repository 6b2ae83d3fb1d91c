"""docs/tutorials/own_environment.py --toy, run as a user runs it: the package it writes is installed with
its entry point, FQI's curve is value iteration's distance to Q* (worked out here), the applied curve
extends the ProFQI run's own, and the played policy earns what the greedy policy of the run's Λ^K(ω_0)
earns by hand."""

import json
import os
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N, GAMMA, K, HORIZON = 6, 0.7, 5, 12  # the tutorial's walk and gin files


def bellman(q):
    next_state = np.clip(np.arange(N)[:, None] + np.array([-1, 1]), 0, N - 1)
    return (next_state == N - 1) + GAMMA * q.max(axis=1)[next_state]


def test_the_tutorial_installs_its_package_trains_applies_and_plays(tmp_path):
    work = tmp_path / "work"
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "docs", "tutorials", "own_environment.py"), f"--work_dir={work}",
         "--toy"],
        capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    for step in ("pip install --target", "pbo-train", "pbo-apply", "pbo-play"):
        assert f"$ {step}" in out.stdout
    entry_points = next((work / "site").glob("my_walk_env-*.dist-info")) / "entry_points.txt"
    assert entry_points.read_text().split() == ["[pbo_tf.envs]", "my_walk", "=", "my_walk_env.registration"]
    summary = json.loads((work / "summary.json").read_text())

    iterates, q_star = [np.zeros((N, 2))], np.zeros((N, 2))
    for _ in range(K):
        iterates.append(bellman(iterates[-1]))
    for _ in range(400):
        q_star = bellman(q_star)
    want = [np.sqrt(np.mean((q - q_star) ** 2)) for q in iterates]
    np.testing.assert_allclose(summary["fqi"][: K + 1], want, atol=1e-3)
    assert summary["fqi"][K + 1 :] == [None] * (len(summary["fqi"]) - K - 1)  # FQI has no iterate beyond K

    metrics = json.loads((work / "runs" / "profqi" / "metrics.json").read_text())
    assert (metrics["env"], metrics["algorithm"], metrics["K"]) == ("my_walk", "profqi", K)
    assert summary["applied"][: len(summary["profqi"])] == summary["profqi"]
    assert len(summary["applied"]) == len(summary["profqi"]) + 6  # k = 0 .. k_max = (K + extra + 1) + 5

    omega_k = np.load(work / "runs" / "profqi" / "iterates.npz")["iterates"][K].reshape(N, 2)
    state, total = 0, 0.0
    for _ in range(HORIZON):
        state = int(np.clip(state + 2 * int(np.argmax(omega_k[state])) - 1, 0, N - 1))
        total += float(state == N - 1)
    assert summary["played"]["mean_return"] == total
    assert summary["played"]["env"] == "my_walk_env/MyWalk-v0" and summary["played"]["pbo_tf_modules"] == []
