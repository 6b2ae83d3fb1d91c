"""scripts/gym_online.sh at toy size, as a user runs it: DQN and ProDQN on CartPole (gin_configs/gym/) and
Acrobot (gin_configs/acrobot/) through pbo-sweep at a budget fraction, then pbo-report. Each run's schedule
(training steps, Acrobot's budget against the reference's) is the one the script's ``max(1, round(fraction
× full))`` gives, its k = 0 value is the constant-action rollout of the script's N_EVAL_EPISODES episodes,
and the report's rows hold the numbers of the runs' metrics.json."""

import json
import os
import re
import subprocess

import pytest

from tests.experiments import ground_truth
from tests.experiments.runner_sizes import ONLINE_EXTRA, ONLINE_K, ONLINE_TINY

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_ONLINE_TINY = dict(binding.split("=", 1) for binding in ONLINE_TINY)
K, EXTRA, EVAL_EPISODES, EVAL_MAX_STEPS = ONLINE_K, ONLINE_EXTRA, 2, int(_ONLINE_TINY["EVAL_MAX_STEPS"])
#: The script's EXTRA_BINDINGS at toy size: the online test sizes (runner_sizes.ONLINE_TINY) less the bindings
#: the script sets itself (REFRESHES, N_EVAL_EPISODES) and TRAIN_STEPS_PER_REFRESH, which stays the gin files'
#: (32, 25), so that ProDQN's training steps are the budget's share of the full schedule; a Q network of 8
#: units, the training step in graph mode (no XLA compilation).
TOY = [
    f"{name}={value}"
    for name, value in _ONLINE_TINY.items()
    if name not in ("REFRESHES", "N_EVAL_EPISODES", "TRAIN_STEPS_PER_REFRESH")
] + ["GymOnlineEnv.hidden=[8]", "DQNConfig.jit_compile=False", "ProDQNConfig.jit_compile=False"]
#: folder: (gym id, budget fraction, the full REFRESHES and DQN_TRAIN_STEPS_PER_REFRESH, the file's
#: TRAIN_STEPS_PER_REFRESH)
ENVS = {
    "gym": ("CartPole-v1", 0.002, 780, 128, 32),
    "acrobot": ("Acrobot-v1", 0.001, 3000, 6000, 25),
}
#: The script's steps() by hand: CartPole 0.002 x 780 = 1.56 -> 2 refreshes (rounded, not truncated),
#: 0.002 x 128 = 0.256 -> 0 -> 1 DQN training step per target update (the floor of 1); Acrobot 0.001 x 3000
#: = 3, 0.001 x 6000 = 6.
SCHEDULE = {"gym": (2, 1), "acrobot": (3, 6)}


def _rows(lines, *first_cells):
    """The cells of the markdown rows of ``lines`` that start with ``first_cells``, in order."""
    start = "| " + " | ".join(first_cells) + " |"
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if line.startswith(start)]


def _value(cell):
    """A report cell of one seed, ``mean (n=1)``: the mean."""
    number, count = re.fullmatch(r"(\S+) \(n=(\d+)\)", cell).groups()
    assert count == "1"
    return float(number)


def test_gym_online_script_at_toy_size(tmp_path):
    out, report_dir = tmp_path / "runs", tmp_path / "report"
    env = dict(
        os.environ,
        OUT_DIR=str(out),
        REPORT_DIR=str(report_dir),
        SEEDS="0",
        PARALLEL="2",
        ALGOS="dqn prodqn",
        N_EVAL_EPISODES=str(EVAL_EPISODES),
        CARTPOLE_BUDGET=str(ENVS["gym"][1]),
        ACROBOT_BUDGET=str(ENVS["acrobot"][1]),
        EXTRA_BINDINGS=" ".join(TOY),
    )
    env.pop("BUDGET", None)
    done = subprocess.run(
        ["bash", "scripts/gym_online.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (report_dir / "report.md").read_text().splitlines()
    summary = report[: next(i for i, line in enumerate(report) if line.startswith("## gym_"))]
    for folder, (gym_id, fraction, full_refreshes, full_dqn_steps, steps_per_refresh) in ENVS.items():
        refreshes, dqn_steps = SCHEDULE[folder]
        assert (refreshes, dqn_steps) == (
            max(1, round(fraction * full_refreshes)),
            max(1, round(fraction * full_dqn_steps)),
        )
        section = f"gym_{gym_id}_online"
        own = report[report.index(f"## {section}") :]
        own = own[: next((i for i, line in enumerate(own[1:], 1) if line.startswith("## ")), len(own))]
        # k = 0 is Q ≡ 0: action 0 throughout, N_EVAL_EPISODES episodes of at most EVAL_MAX_STEPS steps
        k0 = ground_truth.constant_action_metrics(gym_id, EVAL_EPISODES, EVAL_MAX_STEPS, 0.99, seed=0)
        for algorithm in ("dqn", "prodqn"):
            metrics = json.loads((out / folder / algorithm / "seed_0" / "metrics.json").read_text())
            assert (metrics["gym_id"], metrics["algorithm"], metrics["K"], metrics["seed"]) == (
                gym_id,
                algorithm,
                K,
                0,
            )
            curve = {c["k"]: c["return"] for c in metrics["curve"]}
            assert sorted(curve) == list(range(K + 1 + (EXTRA if algorithm == "prodqn" else 0)))
            assert metrics["curve"][0] == pytest.approx({"k": 0, **k0}, rel=1e-9, abs=1e-9)
            # the schedule: DQN K target updates x DQN_TRAIN_STEPS_PER_REFRESH, ProDQN REFRESHES x the
            # file's TRAIN_STEPS_PER_REFRESH (|W| = 4 in batches of 2: two Adam steps per training step)
            if algorithm == "dqn":
                steps, paper, adam = K * dqn_steps, K * full_dqn_steps, K * dqn_steps
            else:
                steps = refreshes * steps_per_refresh
                paper, adam = full_refreshes * steps_per_refresh, 2 * steps
            assert (metrics["train_steps"], metrics["adam_steps"]) == (steps, adam)
            if folder == "acrobot":  # against the reference's schedule: the script's fraction
                assert metrics["budget"] == {
                    "train_steps_done": steps,
                    "train_steps_scheduled": steps,
                    "train_steps_paper": paper,
                    "fraction": pytest.approx(fraction, rel=1e-12),
                    "refreshes_done": K if algorithm == "dqn" else refreshes,  # DQN's K target updates
                }
                budget = f"{fraction:.1%}"
            else:  # CartPole has no published schedule
                assert "budget" not in metrics
                budget = "—"
            # the summary's two tables: env, K, algorithm, seeds, budget, metric, k = 1, k = K, k = K + 10,
            # k = ∞, operator; env, K, algorithm, seeds, metric, IQM at k = K [95% CI] (one seed: its value)
            cells, robust = _rows(summary, section, str(K), algorithm)
            at_k = float(f"{curve[K]:.4g}")
            assert robust[3:5] == ["1", "`return`"]
            assert [float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", robust[5]).groups()] == [
                at_k
            ] * 3
            assert cells[3:6] == ["1", budget, "`return` (↑)"]
            assert [_value(c) for c in cells[6:8]] == [float(f"{curve[k]:.4g}") for k in (1, K)]
            assert cells[8:10] == ["—", "—"]  # the curve stops at K + EXTRA, no fixed point
            constant = metrics.get("operator_activity", {}).get("constant")
            if algorithm == "dqn":
                assert cells[10] == ""
            else:
                verdict = "**a constant map in 1/1 seeds**" if constant else "a function in 1/1 seeds"
                assert cells[10] == verdict
            # the environment's table: algorithm, seeds, budget, wall time / seed, k = 1, K, K + 10, ∞
            cells, *activity = _rows(own, algorithm)
            assert cells[1:4] == ["1", budget, f"{metrics['wall_time_s']:.1f} s"]
            assert [_value(c) for c in cells[4:6]] == [float(f"{curve[k]:.4g}") for k in (1, K)]
            # ProDQN's operator activity: active units per hidden layer on W and on fresh vectors (one seed)
            if algorithm == "dqn":
                assert activity == []
            else:
                (cells,) = activity
                units = [str(metrics["operator_activity"][on]["active_units"]) for on in ("W", "fresh")]
                assert [cells[2], cells[4]] == units
        assert f"![{section}, K = {K}]({section}_k{K}.png)" in own
        assert (report_dir / f"{section}_k{K}.png").stat().st_size > 0
