"""Tests of pbo_tf.analysis.results, pbo_tf.analysis.plotting and launch/plot.py."""

import json
import logging
import math
import os
import re
import subprocess
import sys

import matplotlib.image
import numpy as np
import pytest

from pbo_tf.analysis import plotting, results

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K = 3
EXTRA = 10
SEEDS = (0, 1, 2)
T_975_DF2 = 4.302652729911275


def fqi_value(seed: int, k: int) -> float:
    return (seed + 1) / (k + 1)


def profqi_value(seed: int, k: int) -> float:
    return 0.5 * (seed + 1) / (k + 1)


def write_runs(root) -> None:
    """3 seeds x {fqi, profqi} of chain_walk with K = 3 and known values.

    * fqi: q_error_rms = (seed + 1) / (k + 1) for k <= K, null beyond, no fixed point;
    * profqi: 0.5 (seed + 1) / (k + 1) for k in 0..K+EXTRA (seed 2 lacks k = 5), fixed point 0.1 (seed + 1).
    """
    for seed in SEEDS:
        fqi_curve = [
            {"k": k, "q_error_rms": fqi_value(seed, k) if k <= K else None} for k in range(K + EXTRA + 1)
        ]
        profqi_curve = [
            {"k": k, "q_error_rms": profqi_value(seed, k)}
            for k in range(K + EXTRA + 1)
            if not (seed == 2 and k == 5)
        ]
        profqi_curve.append({"k": "inf", "q_error_rms": 0.1 * (seed + 1)})
        for algorithm, curve in (("fqi", fqi_curve), ("profqi", profqi_curve)):
            run_dir = root / algorithm / f"seed_{seed}"
            run_dir.mkdir(parents=True)
            metrics = {
                "env": "chain_walk",
                "algorithm": algorithm,
                "K": K,
                "seed": seed,
                "curve": curve,
                "reference": {"optimal_q_rms": 4.2},
            }
            (run_dir / "metrics.json").write_text(json.dumps(metrics))
            (run_dir / "checkpoints").mkdir()  # Sub-folders of a complete run are not warned about.
    unfinished = root / "profqi" / "seed_3"
    unfinished.mkdir()
    (unfinished / "config.gin").write_text("# unfinished run\n")


@pytest.fixture()
def runs_root(tmp_path):
    root = tmp_path / "runs"
    write_runs(root)
    return root


@pytest.fixture()
def groups(runs_root):
    runs = results.load_runs(str(runs_root))
    return results.group_curves(runs, "q_error_rms")


def test_find_runs_ignores_folders_without_metrics(runs_root, caplog):
    with caplog.at_level(logging.WARNING):
        run_dirs = results.find_runs(str(runs_root))
    expected = sorted(
        str(runs_root / algorithm / f"seed_{seed}") for algorithm in ("fqi", "profqi") for seed in SEEDS
    )
    assert run_dirs == expected
    warned = [record.getMessage() for record in caplog.records]
    assert len(warned) == 1 and str(runs_root / "profqi" / "seed_3") in warned[0]


def test_find_runs_includes_root_itself(runs_root):
    run_dir = str(runs_root / "fqi" / "seed_0")
    assert results.find_runs(run_dir) == [run_dir]


def test_group_curves_shapes_and_values(groups):
    assert list(groups) == [("chain_walk", "fqi", K), ("chain_walk", "profqi", K)]
    fqi = groups[("chain_walk", "fqi", K)]
    profqi = groups[("chain_walk", "profqi", K)]
    assert fqi["seeds"] == list(SEEDS) and profqi["seeds"] == list(SEEDS)
    np.testing.assert_array_equal(fqi["ks"], np.arange(K + 1))  # nulls beyond K are dropped.
    np.testing.assert_array_equal(profqi["ks"], np.arange(K + EXTRA + 1))
    assert fqi["values"].shape == (3, K + 1)
    assert profqi["values"].shape == (3, K + EXTRA + 1)
    np.testing.assert_allclose(fqi["values"], [[fqi_value(s, k) for k in range(K + 1)] for s in SEEDS])
    assert np.isnan(profqi["values"][2, 5])
    assert np.sum(np.isnan(profqi["values"])) == 1
    assert profqi["values"][1, 4] == pytest.approx(profqi_value(1, 4))
    assert np.all(np.isnan(fqi["inf"]))
    np.testing.assert_allclose(profqi["inf"], [0.1, 0.2, 0.3])


def test_group_curves_unknown_metric(runs_root):
    runs = results.load_runs(str(runs_root))
    with pytest.raises(ValueError, match="q_error_rms"):
        results.group_curves(runs, "J")
    assert results.metric_keys(runs) == ["q_error_rms"]
    assert results.default_metric("chain_walk") == "q_error_rms"
    assert results.default_metric("new_env", runs) == "q_error_rms"
    assert results.reference_value(runs, "optimal_q_rms") == pytest.approx(4.2)


def test_load_metrics_corrupt_json(tmp_path):
    run_dir = tmp_path / "bad_run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text('{"env": "chain_walk", "curve": [')
    with pytest.raises(ValueError, match="bad_run"):
        results.load_metrics(str(run_dir))


def test_load_metrics_missing_keys(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"env": "lqr", "algorithm": "fqi", "curve": []}))
    with pytest.raises(ValueError, match=r"metrics\.json.*K.*seed"):
        results.load_metrics(str(tmp_path))


def test_a_seed_folder_name_reads_back_as_its_seed_and_no_other_name_does():
    for seed in (0, 7, 12):
        assert results.seed_folder_name(seed) == f"seed_{seed}"
        assert results.seed_of_folder_name(results.seed_folder_name(seed)) == seed
    others = ("seeds_0-4", "seed_", "seed_x", "seed_-1", "seed_1.old", "xseed_1", "1", "seed_²", "seed_٣")
    for name in others:
        assert results.seed_of_folder_name(name) is None, name


def test_duplicate_seed_is_an_error(runs_root, tmp_path):
    runs = results.load_runs(str(runs_root))
    duplicate = dict(runs[0], run_dir=str(tmp_path / "elsewhere"))
    with pytest.raises(ValueError, match="twice"):
        results.group_curves(runs + [duplicate], "q_error_rms")


def test_one_configuration_at_two_budgets_is_two_groups(runs_root, tmp_path):
    """The same seeds of one (env, algorithm, K) at 5% and 20% of the paper's budget (a grid over REFRESHES)
    are two groups named by their budget, each with its own values; at one budget a repeated seed is still
    an error."""
    runs = [r for r in results.load_runs(str(runs_root)) if r["algorithm"] == "profqi"]
    short = [dict(r, budget={"fraction": 0.05}) for r in runs]
    longer = [
        dict(r, budget={"fraction": 0.2}, run_dir=str(tmp_path / "long"),
             curve=[dict(e, q_error_rms=e["q_error_rms"] / 2) for e in r["curve"]])
        for r in runs
    ]  # fmt: skip
    groups = results.group_curves(short + longer, "q_error_rms")
    names = sorted(g["algorithm"] for g in groups.values())
    assert names == ["profqi @ 20%", "profqi @ 5%"]
    by_name = {g["algorithm"]: g for g in groups.values()}
    assert (
        by_name["profqi @ 5%"]["seeds"] == by_name["profqi @ 20%"]["seeds"] == sorted(r["seed"] for r in runs)
    )
    np.testing.assert_allclose(by_name["profqi @ 20%"]["values"], by_name["profqi @ 5%"]["values"] / 2)
    with pytest.raises(ValueError, match="twice"):
        results.group_curves(short + [dict(short[0], run_dir=str(tmp_path / "again"))], "q_error_rms")


def test_plot_curves_writes_png(groups, tmp_path):
    output = tmp_path / "figures" / "nested" / "chain_walk.png"
    returned = plotting.plot_curves(
        groups, "q_error_rms", str(output), title="Chain walk", reference=0.05, figsize=(6.0, 4.0), dpi=50
    )
    assert returned == str(output)
    assert output.stat().st_size > 0
    image = matplotlib.image.imread(str(output))
    assert image.shape[:2] == (200, 300)
    assert sorted(os.listdir(output.parent)) == ["chain_walk.png"]


def test_a_long_legend_makes_the_figure_taller_by_a_line_each(groups, tmp_path):
    """Past `LEGEND_LINES_IN_FIGSIZE` legend entries, each adds `LEGEND_LINE_INCHES` to the height: 12
    groups, the reference line, the band and the K line are 15 entries, 7 past 8, so 7 · 0.16 in · 50 dpi =
    56 pixels."""
    (key, group), *_ = groups.items()
    many = {(key[0], f"variant_{i}", key[2]): group for i in range(12)}
    output = tmp_path / "many.png"
    plotting.plot_curves(many, "q_error_rms", str(output), reference=0.05, figsize=(6.0, 4.0), dpi=50)
    assert plotting.LEGEND_LINES_IN_FIGSIZE == 8 and plotting.LEGEND_LINE_INCHES == 0.16
    assert matplotlib.image.imread(str(output)).shape[:2] == (200 + 56, 300)


def test_auto_log_y(groups):
    assert plotting.auto_log_y(groups, "q_error_rms")
    assert not plotting.auto_log_y(groups, "J")
    assert not plotting.auto_log_y(groups, "q_error_rms", reference=-1.0)


def test_summary_table(groups):
    table = plotting.summary_table(groups, "q_error_rms", [0, K, 20])
    lines = table.splitlines()
    assert len(lines) == 4  # Title, header, one line per group.
    assert "k=0" in lines[1] and "k=inf" in lines[1]
    fqi_line = next(line for line in lines if " fqi " in line)
    profqi_line = next(line for line in lines if " profqi " in line)
    # fqi at k=0: [1, 2, 3] -> 2 +- 4.3027 / sqrt(3) = 2.48.
    assert f"2 ± {T_975_DF2 / math.sqrt(3):.2g}" in fqi_line
    assert "0.5 ± " in fqi_line  # k = K.
    assert fqi_line.count("n/a") == 2  # k=20 and inf.
    assert "1 ± 1.2" in profqi_line and "0.2 ± 0.25" in profqi_line


def run_plot_script(*args):
    return subprocess.run(
        [sys.executable, os.path.join("launch", "plot.py"), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )


def test_load_metrics_checks_each_seed_of_a_batched_run(tmp_path):
    """A batched run's ``per_seed`` entries are read as runs of their own: each malformed one is named, with
    the file, instead of a KeyError later."""
    good = {"seed": 0, "curve": [{"k": 0, "m": 1.0}]}
    base = {"env": "lqr", "algorithm": "fqi", "K": 2, "seed": 0, "curve": [{"k": 0, "m": 1.0}]}
    for per_seed, pattern in (
        ({"seed": 0}, r"'per_seed' must be a list, got dict"),
        ([good, {"seed": 1}], r"per_seed\[1\] must be an object with 'seed' and 'curve' \(it has \['seed'\]"),
        ([good, 3], r"per_seed\[1\] must be an object with 'seed' and 'curve' \(it has int"),
        ([good, {"seed": "one", "curve": []}], r"per_seed\[1\]\['seed'\] must be an integer, got 'one'"),
        ([good, {"seed": 1, "curve": [{"k": -1}]}], r"per_seed\[1\]\['curve'\]\[0\]\['k'\] must be an int"),
    ):  # fmt: skip
        (tmp_path / "metrics.json").write_text(json.dumps({**base, "per_seed": per_seed}))
        with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path))}/metrics.json: {pattern}"):
            results.load_metrics(str(tmp_path))
    (tmp_path / "metrics.json").write_text(json.dumps({**base, "per_seed": [good, {**good, "seed": 1}]}))
    assert [r["seed"] for r in results.expand_seeds(results.load_metrics(str(tmp_path)))] == [0, 1]


def test_plot_script_smoke(runs_root, tmp_path):
    output = tmp_path / "plots" / "chain_walk.png"
    process = run_plot_script(f"--root_dir={runs_root}", f"--output={output}")
    assert process.returncode == 0, process.stderr
    assert output.stat().st_size > 0
    assert matplotlib.image.imread(str(output)).ndim == 3
    stdout = process.stdout
    assert "k=0" in stdout and f"k={K}" in stdout and f"k={K + EXTRA}" in stdout and "k=inf" in stdout
    assert f"2 ± {T_975_DF2 / math.sqrt(3):.2g}" in stdout  # fqi, k=0.
    assert "1 ± 1.2" in stdout  # profqi, k=0.
    assert "0.2 ± 0.25" in stdout  # profqi fixed point.
    assert str(output) in stdout


def test_plot_script_no_runs(tmp_path):
    empty = tmp_path / "empty_runs"
    empty.mkdir()
    process = run_plot_script(f"--root_dir={empty}", f"--output={tmp_path / 'x.png'}")
    assert process.returncode != 0
    assert str(empty) in process.stderr
    assert not (tmp_path / "x.png").exists()


def test_plot_script_unknown_metric(runs_root, tmp_path):
    process = run_plot_script(f"--root_dir={runs_root}", f"--output={tmp_path / 'x.png'}", "--metric=J")
    assert process.returncode != 0
    assert "q_error_rms" in process.stderr


def write_batched_car_on_hill(root, per_seed_reference=True):
    """A batched car-on-hill ProFQI folder (seeds 0, 1: optimal J 8 and 9, ProFQI J = seed + 1 at each k,
    1% of the paper's budget) and a single-seed FQI folder (seed 0, J = 0.5 k)."""
    per_seed = [
        {
            "seed": seed,
            "curve": [{"k": k, "J": seed + 1.0} for k in range(4)],
            "reference": {"optimal_J": 8.0 + seed},
            "budget": {"gradient_steps_done": 1100, "gradient_steps_paper": 110_000, "fraction": 0.01},
        }
        for seed in (0, 1)
    ]
    if not per_seed_reference:  # the layout written before each seed kept its reference: seed 0's at the top
        del per_seed[0]["reference"]
    batched = {
        "env": "car_on_hill",
        "algorithm": "profqi",
        "K": 2,
        "seed": 0,
        "seeds": [0, 1],
        "curve": [{"k": k, "J": 1.5} for k in range(4)],
        "reference": {"optimal_J": 8.5 if per_seed_reference else 8.0},
        "per_seed": per_seed,
    }
    single = {
        "env": "car_on_hill",
        "algorithm": "fqi",
        "K": 2,
        "seed": 0,
        "curve": [{"k": k, "J": 0.5 * k} for k in range(3)],
        "reference": {"optimal_J": 8.0},
        "budget": {"gradient_steps_done": 50, "gradient_steps_paper": 26_400, "fraction": 1.0},
    }
    for name, metrics in (("profqi", batched), ("fqi", single)):
        (root / name).mkdir(parents=True)
        (root / name / "metrics.json").write_text(json.dumps(metrics))


@pytest.mark.parametrize("per_seed_reference", [True, False], ids=["per_seed", "older_layout"])
def test_the_reference_line_is_the_mean_over_seeds_of_their_own_references(tmp_path, per_seed_reference):
    write_batched_car_on_hill(tmp_path, per_seed_reference)
    runs = results.load_runs(str(tmp_path))
    profqi = sorted((r for r in runs if r["algorithm"] == "profqi"), key=lambda r: r["seed"])
    assert [r["reference"]["optimal_J"] for r in profqi] == [8.0, 9.0]
    # FQI's seed 0 shares ProFQI's seed-0 dataset: seed 0 counts once.
    assert results.reference_by_seed(runs, "optimal_J") == {0: 8.0, 1: 9.0}
    assert results.reference_value(runs, "optimal_J") == pytest.approx(8.5)
    groups = results.group_curves(runs, "J")
    assert groups[("car_on_hill", "profqi", 2)]["budget_fractions"] == [0.01, 0.01]
    assert groups[("car_on_hill", "fqi", 2)]["budget_fractions"] == [1.0]


def _legend_texts(figure):
    return [text.get_text() for legend in figure.legends for text in legend.get_texts()]


def test_the_curve_figure_explains_itself(tmp_path):
    write_batched_car_on_hill(tmp_path)
    groups = results.group_curves(results.load_runs(str(tmp_path)), "J")
    label = plotting.reference_line_label("optimal_J", 8.5, n_seeds=2)
    assert label == "optimal policy (exact): J = 8.5 (mean over the 2 seeds' datasets)"
    assert plotting.reference_line_label("optimal_J", 8.14) == "optimal policy (exact): J = 8.14"
    figure = plotting.curves_figure(groups, "J", reference=8.5, reference_label=label)
    axes = figure.axes[0]
    assert axes.get_ylabel().replace("\n", " ") == (
        "J: count-weighted discounted return of the greedy policy of Q_k"
    )
    assert "count(s)" in axes.get_title()  # the definition of J under the title
    texts = _legend_texts(figure)
    assert "FQI, K=2 (1 seed; the paper's gradient steps)" in texts  # one seed: no "± 0", no band
    assert "ProFQI, K=2 (2 seeds; 1% of the paper's gradient steps)" in texts
    assert label in texts
    assert any("95% Student-t confidence interval" in text for text in texts)
    assert len(axes.collections) == 1  # the one band: ProFQI's (FQI has a single seed)
    assert plotting.budget_text([None]) is None
    assert plotting.budget_text([0.000036, 0.000036]) == "0.0036% of the paper's gradient steps"
    assert plotting.budget_text([0.5, 0.25]) == "25%–50% of the paper's gradient steps"

    # A single-seed plot has no band, so its legend does not mention one.
    single = {key: group for key, group in groups.items() if key[1] == "fqi"}
    figure = plotting.curves_figure(single, "J")
    assert not figure.axes[0].collections
    assert not any("Student-t" in text for text in _legend_texts(figure))


def test_the_table_shows_seed_counts_and_no_interval_for_one_seed(tmp_path):
    write_batched_car_on_hill(tmp_path)
    groups = results.group_curves(results.load_runs(str(tmp_path)), "J")
    lines = plotting.summary_table(groups, "J", [0, 2]).splitlines()
    fqi = next(line for line in lines if " fqi " in line)
    profqi = next(line for line in lines if " profqi " in line)
    assert "±" not in fqi and "0 (n=1)" in fqi and "1 (n=1)" in fqi
    # ProFQI: J = 1 and 2 -> 1.5 ± t(0.975, 1) · 0.5 = 6.4.
    assert "1.5 ± 6.4 (n=2)" in profqi


def test_policy_map_tick_labels_do_not_overlap():
    p, v = np.linspace(-1, 1, 101), np.linspace(-3, 3, 101)
    actions = (p[:, None] + 0.1 * v[None, :] > 0).astype(int)
    figure = plotting.policy_maps_figure([("FQI, k=9 (seed 0)", actions, p, v), ("ProFQI", actions, p, v)])
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    for axes in figure.axes:
        for axis, low, high in ((axes.xaxis, "x0", "x1"), (axes.yaxis, "y0", "y1")):
            labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            assert 3 <= len(labels) <= 5
            boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: getattr(b, low))
            gaps = [getattr(b, low) - getattr(a, high) for a, b in zip(boxes, boxes[1:], strict=False)]
            assert min(gaps) >= 5, gaps  # pixels of space between neighbouring labels (the old map: 1.4)
    assert [t.get_text() for t in figure.legends[0].get_texts()] == [
        "u = −4 (push left)",
        "u = +4 (push right)",
    ]


def test_a_band_of_a_metric_that_cannot_be_negative_stops_at_zero():
    """Balancing times 0.5, 1 and 300 s: the Student-t band of the mean reaches far below 0; it is drawn
    from 0 up, its upper edge unchanged."""
    runs = [
        {"env": "bicycle", "algorithm": "fqi", "K": 1, "seed": s, "curve": [{"k": 0, "balancing_time_s": v}]}
        for s, v in enumerate((0.5, 1.0, 300.0))
    ]
    groups = results.group_curves(runs, "balancing_time_s")
    figure = plotting.curves_figure(groups, "balancing_time_s")
    (band,) = figure.axes[0].collections
    y = np.concatenate([path.vertices[:, 1] for path in band.get_paths()])
    mean = np.mean([0.5, 1.0, 300.0])
    half_width = 4.302652729911275 * np.std([0.5, 1.0, 300.0], ddof=1) / np.sqrt(3)
    assert mean - half_width < 0 and y.min() == 0.0
    np.testing.assert_allclose(y.max(), mean + half_width)
