"""`scripts/quickstart.sh` as it runs, at toy size: its sweep and plot commands are read from the script
(so the test follows the script), run with the same flags plus bindings that shrink the experiment, and
their results are checked against values derived apart."""

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from pbo_tf.experiments.plotting import format_cell
from tests.experiments import ground_truth

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "quickstart.sh")
#: Appended to the script's sweep: later bindings win. One refresh / FQI epoch, 1000 transitions, |W| = 4;
#: K, the seeds and the extra iterations stay the script's.
TOY = [
    "REFRESHES=1",
    "PASSES_PER_REFRESH=1",
    "MAX_EPOCHS=1",
    "PATIENCE=1",
    "CarOnHillProblem.n_random=900",
    "CarOnHillProblem.n_oriented=100",
    "Experiment.w_size=4",
    "ProFQITrainer.w_batch_size=2",
]


def script_commands(out: str) -> dict[str, list[str]]:
    """The script's ``launch/*.py`` commands (continuation lines joined, ``$OUT`` replaced by ``out``),
    by launcher name."""
    text = pathlib.Path(SCRIPT).read_text().replace("\\\n", " ")
    commands = {}
    for line in text.splitlines():
        if line.startswith(".venv/bin/python launch/"):
            argv = shlex.split(line.replace('"$OUT', f'"{out}'))
            commands[os.path.basename(argv[1])] = [sys.executable, os.path.join(REPO, argv[1]), *argv[2:]]
    return commands


def test_the_quickstart_sweep_and_plot_run_as_the_script_runs_them(tmp_path):
    commands = script_commands(str(tmp_path))
    assert sorted(commands) == ["plot.py", "sweep.py"]
    sweep = commands["sweep.py"]
    assert "--batch_seeds" in sweep and "--seeds=0,1,2,3,4" in sweep and "--gin_bindings=K=9" in sweep
    gin_files = sorted(a.split("=", 1)[1] for a in sweep if a.startswith("--gin_file="))
    assert gin_files == ["gin_configs/car_on_hill/fqi.gin", "gin_configs/car_on_hill/profqi_alive.gin"]
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.run(
        [*sweep, "--intra_op_threads=1", *(f"--gin_bindings={b}" for b in TOY)],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    # Each gin file ran once, its 5 seeds in one folder, K = 9 and k = 0..39 (EXTRA_ITERATIONS=30).
    runs = {}
    for algorithm in ("fqi", "profqi_alive"):
        folder = tmp_path / "runs" / "car_on_hill" / algorithm / "seeds_0-4"
        runs[algorithm] = json.loads((folder / "metrics.json").read_text())
        metrics = runs[algorithm]
        assert (metrics["K"], metrics["seeds"]) == (9, [0, 1, 2, 3, 4])
        assert [c["k"] for c in metrics["curve"]] == list(range(40))
        for seed, per_seed in zip(range(5), metrics["per_seed"], strict=True):
            # k = 0 is ω_0, Q ≡ 0: action 0 everywhere, whose J follows from NumPy rollouts and the
            # seed's own dataset counts.
            with np.load(folder / f"seed_{seed}" / "dataset.npz") as data:
                want = ground_truth.car_on_hill_constant_action_j(data["state"])
            assert per_seed["curve"][0]["J"] == pytest.approx(want["J"], rel=1e-6), (algorithm, seed)
        # The run's curve is the mean over its seeds.
        for k in (0, 9, 19, 39):
            values = [s["curve"][k]["J"] for s in metrics["per_seed"]]
            if None not in values:
                assert metrics["curve"][k]["J"] == pytest.approx(np.mean(values), rel=1e-9)

    plot = subprocess.run(commands["plot.py"], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert plot.returncode == 0, plot.stderr
    assert (tmp_path / "car_on_hill_k9.png").exists() and (tmp_path / "car_on_hill_k9_policies.png").exists()
    # The printed table holds, at the script's --table_ks, each algorithm's mean over the 5 seeds and its
    # 95% Student-t half width.
    rows = {line.split()[1]: line for line in plot.stdout.splitlines() if line.startswith("car_on_hill ")}
    assert sorted(rows) == ["fqi", "profqi_alive"]
    for algorithm, row in rows.items():
        cells = re.split(r"\s{2,}", row)[4:]  # env, algorithm, K, seeds, then k = 1, 5, 9, 19, 39
        assert len(cells) == 5, row
        for k, cell in zip((1, 5, 9, 19, 39), cells, strict=True):
            values = np.array([s["curve"][k]["J"] for s in runs[algorithm]["per_seed"]], dtype=float)
            if algorithm == "fqi" and k > 9:  # FQI has no iterate beyond K
                assert np.isnan(values).all() and cell == "n/a"
                continue
            half = stats.t.ppf(0.975, 4) * values.std(ddof=1) / np.sqrt(5)
            assert cell == format_cell(values.mean(), half, 5), (algorithm, k, row)
