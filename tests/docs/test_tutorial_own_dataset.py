"""docs/tutorials/own_dataset.py --toy as a user runs it: the dataset it writes, both runs' metrics and the
figure, the curves' k = 0 value against a plain gymnasium rollout of the policy that ω_0 plays."""

import json
import os
import subprocess
import sys

import gymnasium
import matplotlib.image
import numpy as np
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO_ROOT, "docs", "tutorials", "own_dataset.py")


def constant_action_return(n_episodes=2, max_steps=100, gamma=0.99, eval_seed=0, action=0):
    """Mean discounted return in CartPole-v1 of the policy playing ``action`` always (``Q ≡ 0``'s greedy
    policy: first action on ties), episode j reset with the evaluation's seed ``eval_seed·1_000_003 + j``."""
    env = gymnasium.make("CartPole-v1", max_episode_steps=max_steps)
    returns = []
    for j in range(n_episodes):
        env.reset(seed=eval_seed * 1_000_003 + j)
        total = 0.0
        for t in range(max_steps):
            _, reward, terminated, truncated, _ = env.step(action)
            total += gamma**t * reward
            if terminated or truncated:
                break
        returns.append(total)
    return float(np.mean(returns))


def test_the_toy_tutorial_writes_the_dataset_runs_and_figure(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, SCRIPT, "--toy", f"--work_dir={tmp_path / 'work'}"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "$ pbo-train --gin_file=dataset/fqi.gin" in done.stdout and "$ pbo-plot" in done.stdout
    work = tmp_path / "work"
    with np.load(work / "cartpole_random.npz") as data:
        assert data["observations"].shape == data["next_observations"].shape == (600, 4)
        assert set(np.unique(data["actions"])) == {0, 1}
        # CartPole pays 1 per step; an episode ends (terminal) when the pole falls.
        assert np.all(data["rewards"] == 1.0) and 0 < data["terminals"].sum() < 600
    want = constant_action_return()
    for algorithm in ("fqi", "profqi"):
        metrics = json.loads((work / "runs" / algorithm / "metrics.json").read_text())
        assert (metrics["env"], metrics["algorithm"], metrics["K"]) == ("dataset", algorithm, 2)
        assert metrics["main_metric"] == "return"  # what pbo-plot shows (docs/own_dataset.md)
        values = [c["discounted_return"] for c in metrics["curve"] if c["discounted_return"] is not None]
        assert len(values) == (3 if algorithm == "fqi" else 5) and np.all(np.isfinite(values))
        assert metrics["curve"][0]["discounted_return"] == pytest.approx(want, rel=1e-9)
    image = matplotlib.image.imread(work / "figure.png")
    assert image.ndim == 3 and min(image.shape[:2]) > 100 and np.ptp(image[..., :3]) > 0
