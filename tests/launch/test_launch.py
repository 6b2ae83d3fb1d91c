"""Smoke tests of the launch binaries as a user runs them (subprocesses)."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = [
    "--gin_bindings=REFRESHES=1",
    "--gin_bindings=PASSES_PER_REFRESH=1",
    "--gin_bindings=MAX_EPOCHS=2",
    "--gin_bindings=PATIENCE=1",
    "--gin_bindings=K=2",
    "--gin_bindings=EXTRA_ITERATIONS=2",
]


def _launch(script, *args):
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "launch", script), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )


def test_sweep_runs_train_for_each_seed_then_skips_finished_runs_and_plot_draws_them(tmp_path):
    args = [
        f"--root_dir={tmp_path}",
        "--gin_file=gin_configs/lqr/fqi.gin",
        "--seeds=0,1",
        "--parallel=2",
        "--intra_op_threads=1",  # passed on to train.py
        *TINY,
    ]
    out = _launch("sweep.py", *args)
    assert out.returncode == 0, out.stdout + out.stderr
    for seed in (0, 1):  # (one gin file: each extra run costs a TensorFlow import, ~25 s on CI)
        metrics = json.loads((tmp_path / "lqr" / "fqi" / f"seed_{seed}" / "metrics.json").read_text())
        assert (metrics["algorithm"], metrics["seed"], metrics["K"]) == ("fqi", seed, 2)
    again = _launch("sweep.py", *args)
    assert again.returncode == 0 and again.stdout.count("skip (complete)") == 2
    plot = _launch("plot.py", f"--root_dir={tmp_path}", f"--output={tmp_path / 'lqr.png'}")
    assert plot.returncode == 0, plot.stderr
    assert os.path.getsize(tmp_path / "lqr.png") > 10_000


def test_train_reports_a_bad_binding_and_exits_non_zero(tmp_path):
    out = _launch(
        "train.py",
        f"--root_dir={tmp_path}",
        "--gin_file=gin_configs/chain_walk/fqi.gin",
        "--gin_bindings=FQITrainer.fitting_stepz=3",
    )
    assert out.returncode != 0
    assert "bad gin binding 'FQITrainer.fitting_stepz=3'" in out.stderr
    assert not os.path.exists(tmp_path / "metrics.json")


def test_sweep_batch_seeds_trains_all_seeds_in_one_run_folder(tmp_path):
    args = [
        f"--root_dir={tmp_path}",
        "--gin_file=gin_configs/lqr/profqi_lqr.gin",
        "--seeds=3,4,5",
        "--batch_seeds",
        *TINY,
    ]
    out = _launch("sweep.py", *args)
    assert out.returncode == 0, out.stdout + out.stderr
    folder = tmp_path / "lqr" / "profqi_lqr" / "seeds_3-5"
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["seeds"] == [3, 4, 5] and [p["seed"] for p in metrics["per_seed"]] == [3, 4, 5]
    assert all((folder / f"seed_{s}" / "operator").is_dir() for s in (3, 4, 5))
    again = _launch("sweep.py", *args)
    assert again.returncode == 0 and again.stdout.count("skip (complete)") == 1
    bad = _launch(
        "sweep.py",
        f"--root_dir={tmp_path}",
        "--gin_file=gin_configs/lqr/fqi.gin",
        "--seeds=0,2",
        "--batch_seeds",
    )
    assert bad.returncode != 0 and "consecutive seeds" in bad.stderr
