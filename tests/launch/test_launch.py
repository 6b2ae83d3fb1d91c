"""Smoke tests of the launch binaries as a user runs them (subprocesses); a sweep's rerun, which trains
nothing, runs the same program in this process (`sweep_in_process`)."""

import json
import os
import subprocess
import sys

import numpy as np
from scipy import stats
from sweep_in_process import run_sweep  # tests/launch/ is on sys.path (pytest prepends it)

from tests.figures import capture_figures

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = [
    "--gin_bindings=REFRESHES=1",
    "--gin_bindings=PASSES_PER_REFRESH=1",
    "--gin_bindings=MAX_EPOCHS=2",
    "--gin_bindings=PATIENCE=1",
    "--gin_bindings=K=2",
    "--gin_bindings=EXTRA_ITERATIONS=2",
    # graph mode: compiling the XLA rounds would be a fifth to a quarter of each training process
    "--gin_bindings=FQIConfig.jit_compile=False",
    "--gin_bindings=ProFQIConfig.jit_compile=False",
]


def _launch(script, *args):
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "launch", script), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )


def test_sweep_runs_train_for_each_seed_then_skips_finished_runs_and_plot_draws_them(tmp_path, monkeypatch):
    args = [
        f"--root_dir={tmp_path}",
        f"--gin_file={REPO}/gin_configs/lqr/fqi.gin",
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
    code, _, stdout = run_sweep(["sweep.py", *args])
    assert code == 0 and stdout.count("skip (complete)") == 2
    plot = _launch("plot.py", f"--root_dir={tmp_path}", f"--output={tmp_path / 'lqr.png'}")
    assert plot.returncode == 0, plot.stderr
    # What is drawn, read from the figure plot.py builds (made again here, in this process): at each k the
    # mean over the two seeds' metrics.json, its 95% Student-t band (clipped on the log axis at a tenth of
    # the smallest mean), the dashed line at K = 2; and the PNG plot.py wrote shows that very figure.
    import matplotlib.image

    from pbo_tf.cli.plot import make_plot

    figures = capture_figures(monkeypatch)
    make_plot([str(tmp_path)], str(tmp_path / "again.png"))
    (figure,) = figures
    axes = figure.axes[0]
    curves = np.array(
        [
            [c["param_error_l2"] for c in metrics["curve"] if c["param_error_l2"] is not None]
            for metrics in (
                json.loads((tmp_path / "lqr" / "fqi" / f"seed_{seed}" / "metrics.json").read_text())
                for seed in (0, 1)
            )
        ]
    )
    assert curves.shape == (2, 3) and np.all(curves > 0)  # k = 0, 1, 2 (FQI has no iterate beyond K)
    mean = curves.mean(axis=0)
    (line,) = [line for line in axes.get_lines() if line.get_label().startswith("FQI, K=2 (2 seeds")]
    np.testing.assert_array_equal(line.get_xdata(), [0, 1, 2])
    np.testing.assert_allclose(line.get_ydata(), mean, rtol=1e-12)
    half = stats.t.ppf(0.975, 1) * curves.std(axis=0, ddof=1) / np.sqrt(2)
    (band,) = axes.collections
    vertices = band.get_paths()[0].vertices
    for k in range(3):
        ys = vertices[vertices[:, 0] == k, 1]
        np.testing.assert_allclose(
            [ys.min(), ys.max()], [max(mean[k] - half[k], mean.min() / 10), mean[k] + half[k]], rtol=1e-9
        )
    assert [list(v.get_xdata()) for v in axes.get_lines() if v.get_linestyle() == "--"] == [[2, 2]]
    assert axes.get_yscale() == "log"
    np.testing.assert_array_equal(
        matplotlib.image.imread(tmp_path / "lqr.png"), matplotlib.image.imread(tmp_path / "again.png")
    )


def test_sweep_batch_seeds_trains_all_seeds_in_one_run_folder(tmp_path):
    args = [
        f"--root_dir={tmp_path}",
        f"--gin_file={REPO}/gin_configs/lqr/profqi_lqr.gin",
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
    code, _, stdout = run_sweep(["sweep.py", *args])
    assert code == 0 and stdout.count("skip (complete)") == 1
    code, stderr, _ = run_sweep(
        ["sweep.py", f"--root_dir={tmp_path}", f"--gin_file={REPO}/gin_configs/lqr/fqi.gin", "--seeds=0,2",
         "--batch_seeds"]
    )  # fmt: skip
    assert code == 2 and "consecutive seeds" in stderr and len(stderr.strip().splitlines()) == 1
