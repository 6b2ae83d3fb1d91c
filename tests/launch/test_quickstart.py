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

from pbo_tf.analysis.report import format_cell
from tests.experiments import ground_truth

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "quickstart.sh")
#: Appended to the script's sweep: later flags and bindings win. Two of the script's seeds (still all trained
#: in one graph, each checked against its own dataset, their mean and Student-t interval against the table;
#: every further seed adds its loops to the traced graph), one refresh / FQI epoch, 1000 transitions,
#: |W| = 4, no XLA rounds (compiling them would be most of the test's time; tests/trainers covers them), the
#: fixed-point term's estimate Λ̄^N(ω₀) at N = 3 applications of the target operator, not 30 (each one is
#: traced; tests/trainers checks the term by hand); K and the extra iterations stay the script's.
TOY_SEEDS = 2
TOY = [
    "FQIConfig.jit_compile=False",
    "ProFQIConfig.jit_compile=False",
    "FixedPointTerm.iterations=3",
    "REFRESHES=1",
    "PASSES_PER_REFRESH=1",
    "MAX_EPOCHS=1",
    "PATIENCE=1",
    "CarOnHillProblem.n_random=900",
    "CarOnHillProblem.n_oriented=100",
    "ProFQIConfig.w_size=4",
    "ProFQIConfig.w_batch_size=2",
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


def flag(argv: list[str], name: str) -> list[str]:
    """The values of every ``--name=value`` in ``argv``."""
    return [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]


def test_the_quickstart_sweep_and_plot_run_as_the_script_runs_them(tmp_path):
    commands = script_commands(str(tmp_path))
    assert sorted(commands) == ["plot.py", "sweep.py"]
    sweep, plot_argv = commands["sweep.py"], commands["plot.py"]
    # What the script runs: both car-on-hill gin files (FQI and a ProFQI), all seeds in one graph.
    gin_files = flag(sweep, "gin_file")
    assert len(gin_files) == 2 and all(f.startswith("gin_configs/car_on_hill/") for f in gin_files)
    assert "gin_configs/car_on_hill/fqi.gin" in gin_files
    assert "--batch_seeds" in sweep
    script_seeds = [int(s) for s in flag(sweep, "seeds")[-1].split(",")]
    assert len(script_seeds) > TOY_SEEDS
    seeds = script_seeds[:TOY_SEEDS]
    bindings = dict(b.split("=", 1) for b in flag(sweep, "gin_bindings"))
    K = int(bindings["K"])
    n_points = K + int(bindings.get("EXTRA_ITERATIONS", 10)) + 1  # k = 0 .. K + the extra iterations
    table_ks = [int(k) for k in flag(plot_argv, "table_ks")[-1].split(",")]
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.run(
        [*sweep, f"--seeds={','.join(map(str, seeds))}", "--intra_op_threads=1",
         *(f"--gin_bindings={b}" for b in TOY)],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    # Each gin file ran once, its seeds in one folder, with the script's K and curve length.
    runs = {}
    first, last = seeds[0], seeds[-1]
    for gin_file in gin_files:
        name = os.path.splitext(os.path.basename(gin_file))[0]
        folder = tmp_path / "runs" / "car_on_hill" / name / f"seeds_{first}-{last}"
        metrics = json.loads((folder / "metrics.json").read_text())
        runs[metrics["algorithm"]] = metrics
        assert (metrics["K"], metrics["seeds"]) == (K, seeds)
        assert [c["k"] for c in metrics["curve"]] == list(range(n_points))
        for seed, per_seed in zip(seeds, metrics["per_seed"], strict=True):
            # k = 0 is ω_0, Q ≡ 0: action 0 everywhere, whose J follows from NumPy rollouts and the
            # seed's own dataset counts.
            with np.load(folder / f"seed_{seed}" / "dataset.npz") as data:
                want = ground_truth.car_on_hill_constant_action_j(data["state"])
            assert per_seed["curve"][0]["J"] == pytest.approx(want["J"], rel=1e-6), (name, seed)
        # The run's curve is the mean over its seeds.
        for k in range(n_points):
            values = [s["curve"][k]["J"] for s in metrics["per_seed"]]
            if None not in values:
                assert metrics["curve"][k]["J"] == pytest.approx(np.mean(values), rel=1e-9), (name, k)
    assert len(runs) == 2

    plot = subprocess.run(plot_argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert plot.returncode == 0, plot.stderr
    for output in (*flag(plot_argv, "output"), *flag(plot_argv, "policy_maps")):
        assert os.path.exists(output), output
    # The printed table holds, at the script's --table_ks, each algorithm's mean over the seeds and its
    # 95% Student-t half width (FQI has no iterate beyond K: n/a there).
    rows = {line.split()[1]: line for line in plot.stdout.splitlines() if line.startswith("car_on_hill ")}
    assert sorted(rows) == sorted(runs)
    n = len(seeds)
    for algorithm, row in rows.items():
        cells = re.split(r"\s{2,}", row)[4:]  # env, algorithm, K, seeds, then the table's ks
        assert len(cells) == len(table_ks), row
        for k, cell in zip(table_ks, cells, strict=True):
            values = np.array([s["curve"][k]["J"] for s in runs[algorithm]["per_seed"]], dtype=float)
            if algorithm == "fqi" and k > K:
                assert np.isnan(values).all() and cell == "n/a"
                continue
            half = stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / np.sqrt(n)
            assert cell == format_cell(values.mean(), half, n), (algorithm, k, row)
