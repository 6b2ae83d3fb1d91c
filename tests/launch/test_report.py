"""`pbo-report` (`pbo_tf.cli.report` and the tables of `pbo_tf.analysis.report`) on synthetic run folders
whose means and intervals are known by hand."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from pbo_tf.analysis import results
from pbo_tf.analysis.report import REFERENCE_KEYS, SUMMARY_BEGIN, SUMMARY_END, ReportError
from pbo_tf.cli import report
from tests.figures import capture_figures

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: t_{0.975, 2}: the 95% Student-t quantile with 2 degrees of freedom (3 seeds).
T_975_2 = 4.302652729911275


def write_run(
    root, env, algorithm, K, seed, values, inf=None, fraction=1.0, wall=10.0, reference=None, constant=None,
    setting=None,
):  # fmt: skip
    folder = os.path.join(root, env, f"k{K}", algorithm, f"seed_{seed}")
    os.makedirs(folder)
    curve = [{"k": k, "m": v} for k, v in enumerate(values)]
    if inf is not None:
        curve.append({"k": "inf", "m": inf})
    metrics = {
        "env": env,
        "algorithm": algorithm,
        "K": K,
        "seed": seed,
        "curve": curve,
        "budget": {"fraction": fraction},
        "wall_time_s": wall,
        "reference": reference or {},
    }
    if constant is not None:
        metrics["operator_activity"] = {"constant": constant}
    if setting is not None:
        metrics["setting"] = setting
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(metrics, f)


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    """Env ``toy`` (metric ``m``), K = 2: ProFQI on 3 seeds with values 1, 2, 3 (+ 10·k) at every k = 0..12
    and a fixed point 0, 3, 6 at 5% of the budget; FQI on 1 seed up to k = K."""
    monkeypatch.setitem(results.DEFAULT_METRICS, "toy", "m")
    root = tmp_path / "runs"
    for seed, base in enumerate((1.0, 2.0, 3.0)):
        write_run(
            root, "toy", "profqi", 2, seed, [base + 10 * k for k in range(13)], inf=3.0 * seed,
            fraction=0.05, wall=10.0 * (seed + 1),
        )  # fmt: skip
    write_run(root, "toy", "fqi", 2, 0, [7.0, 8.0, 9.0], wall=4.0)
    return str(root)


def test_report_tables_hold_the_hand_computed_means_and_intervals(sweep, tmp_path):
    out = tmp_path / "report"
    path = report.make_report(sweep, str(out))
    text = pathlib.Path(path).read_text()
    assert os.path.exists(out / "toy_k2.png")
    assert "![toy, K = 2](toy_k2.png)" in text
    assert "| algorithm | seeds | budget | wall time / seed | k = 1 | k = 2 | k = 12 | k = ∞ |" in text
    # 3 seeds with values b + 10 k, b = 1, 2, 3: mean 2 + 10 k, std 1, half width t_{.975,2} / sqrt(3).
    hw = f"{T_975_2 / 3**0.5:.2g}"
    row = f"| profqi | 3 | 5.0% | 20.0 s | 12 ± {hw} (n=3) | 22 ± {hw} (n=3) | 122 ± {hw} (n=3) |"
    # fixed point 0, 3, 6: mean 3, std 3
    assert row + f" 3 ± {3 * T_975_2 / 3**0.5:.2g} (n=3) |" in text
    assert "| fqi | 1 | paper's | 4.0 s | 8 (n=1) | 9 (n=1) | — | — |" in text


def write_failure(root, env, algorithm, K, seeds, status="diverged", **identity):
    folder = os.path.join(root, env, f"k{K}", algorithm, f"seeds_{seeds[0]}-{seeds[-1]}")
    os.makedirs(folder)
    record = {"status": status, "message": "boom", "env": env, "algorithm": algorithm, "K": K, "seeds": seeds}
    with open(os.path.join(folder, "failure.json"), "w") as f:
        json.dump({**record, **identity}, f)


def test_the_seeds_that_diverged_are_counted_beside_the_finished_ones(sweep, tmp_path, caplog):
    """A ``failure.json`` that names its run adds its seeds to its group's seeds cell (summary and K table):
    ProFQI 3 finished + 2 diverged; a group of which every seed failed (``fqi_big``) gets a summary row of its
    own with no values; another setting's failure (online) counts in its own section; a failure.json that
    does not name its run is skipped with a warning naming it."""
    write_failure(sweep, "toy", "profqi", 2, [3, 4])
    write_failure(sweep, "toy", "fqi_big", 2, [0], status="failed")
    write_failure(sweep, "toy", "profqi", 2, [9], setting="online")
    old = os.path.join(sweep, "old")
    os.makedirs(old)
    pathlib.Path(old, "failure.json").write_text(json.dumps({"status": "diverged", "message": "boom"}))
    text = pathlib.Path(report.make_report(sweep, str(tmp_path / "report"))).read_text()
    assert "| toy | 2 | profqi | 3 (+2 diverged) | 5.0% |" in text
    assert "| toy | 2 | fqi | 1 | paper's |" in text  # no failure of its own
    assert "| toy | 2 | fqi_big | 0 (+1 failed) | — | — | — | — | — |" in text
    assert "| toy_online | 2 | profqi | 0 (+1 diverged) |" in text
    assert "| profqi | 3 (+2 diverged) | 5.0% | 20.0 s |" in text  # the K table
    assert any(
        "old/failure.json" in r.getMessage() and "does not name its run" in r.getMessage()
        for r in caplog.records
    )


def test_report_draws_the_reference_line_and_rejects_an_empty_root(sweep, tmp_path, monkeypatch):
    monkeypatch.setitem(REFERENCE_KEYS, ("toy", "m"), "best")
    root = tmp_path / "ref"
    for seed, best in enumerate((4.0, 6.0)):
        write_run(root, "toy", "profqi", 2, seed, [1.0, 2.0, 3.0], reference={"best": best})
    figures = capture_figures(monkeypatch)
    text = pathlib.Path(report.make_report(str(root), str(tmp_path / "out"))).read_text()
    # The reference is the mean over seeds of each seed's own reference, (4 + 6) / 2 = 5: stated under the
    # table, and drawn in the figure as a horizontal line at 5 beside the curve 1, 2, 3 at k = 0, 1, 2.
    assert "\nbest = 5 (mean over the 2 seeds' datasets): 5.\n" in text
    (figure,) = figures
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    reference = lines["best = 5 (mean over the 2 seeds' datasets)"]
    np.testing.assert_array_equal(reference.get_ydata(), [5.0, 5.0])
    assert list(reference.get_xdata()) == [0, 1]  # axhline: across the whole axes (axes coordinates)
    (curve,) = [line for name, line in lines.items() if name.startswith("ProFQI, K=2 (2 seeds")]
    np.testing.assert_array_equal(curve.get_xdata(), [0, 1, 2])
    np.testing.assert_array_equal(curve.get_ydata(), [1.0, 2.0, 3.0])
    with pytest.raises(ReportError, match="no runs"):
        report.make_report(str(tmp_path / "out"), str(tmp_path / "out2"))
    with pytest.raises(ReportError, match="does not exist"):
        report.make_report(str(tmp_path / "missing"), str(tmp_path / "out3"))


def test_the_launcher_writes_the_report_and_fails_in_one_line(tmp_path):
    """The real launcher on real result folders (the committed chain-walk K = 2 runs), and a bad root."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    launcher = os.path.join(REPO, "launch", "report.py")
    runs = os.path.join(REPO, "results", "chain_walk", "k2")
    ok = subprocess.run(
        [sys.executable, launcher, f"--root_dir={runs}", f"--output_dir={tmp_path / 'r'}"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    text = (tmp_path / "r" / "report.md").read_text()
    assert "## chain_walk" in text and "| profqi | 20 | paper's |" in text
    bad = subprocess.run(
        [sys.executable, launcher, f"--root_dir={tmp_path / 'nope'}", f"--output_dir={tmp_path / 's'}"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "does not exist" in bad.stderr


def test_the_summary_table_goes_into_the_readme_block_and_nothing_else_changes(tmp_path, monkeypatch):
    """One row per (env, K, algorithm) with k = 1, K, K + 10, ∞ and the operators' verdicts, written into
    the README between the markers; a README without the block is refused before anything is written."""
    monkeypatch.setitem(results.DEFAULT_METRICS, "toy", "m")
    root = tmp_path / "runs"
    for seed in range(3):  # ProFQI: 1 + k at every k = 0..12 in every seed; seed 2's operator is constant
        write_run(root, "toy", "profqi", 2, seed, [1.0 + k for k in range(13)], constant=seed == 2)
    write_run(root, "toy", "fqi", 2, 0, [7.0, 8.0, 9.0])
    write_run(root, "toy", "profqi", 5, 0, [float(k) for k in range(16)], constant=False, fraction=0.25)
    write_run(root, "toy", "prodqn", 2, 0, [float(k) for k in range(13)], constant=False, setting="online")
    readme = tmp_path / "README.md"
    before, after = "# Title\n\n## Results\n", "\nText after the table.\n"
    readme.write_text(f"{before}{SUMMARY_BEGIN}\nold table\n{SUMMARY_END}{after}")
    report.make_report(str(root), str(tmp_path / "out"), readme=str(readme))
    text = readme.read_text()
    assert text.startswith(before + SUMMARY_BEGIN + "\n| env | K | algorithm |")
    assert text.endswith(SUMMARY_END + after) and "old table" not in text
    rows = [line for line in text.splitlines() if line.startswith("| toy")]
    assert rows == [
        "| toy | 2 | fqi | 1 | paper's | `m` | 8 (n=1) | 9 (n=1) | — | — |  |",
        "| toy | 2 | profqi | 3 | paper's | `m` | 2 ± 0 (n=3) | 3 ± 0 (n=3) | 13 ± 0 (n=3) | — | "
        "**a constant map in 1/3 seeds** |",
        "| toy | 5 | profqi | 1 | 25.0% | `m` | 1 (n=1) | 5 (n=1) | 15 (n=1) | — | a function in 1/1 seeds |",
        "| toy_online | 2 | prodqn | 1 | paper's | `m` | 1 (n=1) | 2 (n=1) | 12 (n=1) | — | "
        "a function in 1/1 seeds |",
    ]  # an online run of the same env has its own section
    assert "## Summary" in (tmp_path / "out" / "report.md").read_text()

    no_block = tmp_path / "NO_BLOCK.md"
    no_block.write_text("# Title\n" + SUMMARY_END + "\n")
    with pytest.raises(ReportError, match="needs one line"):
        report.make_report(str(root), str(tmp_path / "out2"), readme=str(no_block))
    assert no_block.read_text() == "# Title\n" + SUMMARY_END + "\n"
    assert not (tmp_path / "out2").exists()


def test_the_paired_table_compares_every_algorithm_with_the_baseline_seed_by_seed(sweep, tmp_path):
    """With --paired_baseline the section gets the paired table: FQI's seed 0 (8 at k = 1) against ProFQI's
    seed 0 (11 at k = 1): 1 seed ahead of 1, difference +3; at k = 12 FQI has no iterate (—)."""
    for seed in (1, 2):  # FQI on the other two seeds too: 8 + seed at k = 1
        write_run(sweep, "toy", "fqi", 2, seed, [7.0 + seed, 8.0 + seed, 9.0 + seed])
    path = report.make_report(sweep, str(tmp_path / "report"), paired_baseline="fqi", paired_ks=[1, 12])
    text = pathlib.Path(path).read_text()
    assert "Paired by seed against `fqi`" in text
    assert "| method | seeds | k = 1 | k = 12 |" in text
    # ProFQI 1 + 10, 2 + 10, 3 + 10 against FQI 8, 9, 10: +3 on every seed (paired t: p = 0)
    assert "| `profqi` ahead of `fqi` |  | 3/3, Δ +3, p 0 | — |" in text
    assert (
        "Paired by seed" not in pathlib.Path(report.make_report(sweep, str(tmp_path / "plain"))).read_text()
    )
    # a baseline that ran nowhere (a typo) or paired ks without a baseline: one line, nothing written
    with pytest.raises(ReportError, match=r"^--paired_baseline 'fqii' ran in none of the sections; the "
                       r"algorithms: fqi, profqi$"):  # fmt: skip
        report.make_report(sweep, str(tmp_path / "typo"), paired_baseline="fqii")
    with pytest.raises(ReportError, match=r"^--paired_ks needs --paired_baseline"):
        report.make_report(sweep, str(tmp_path / "typo"), paired_ks=[1])
    assert not (tmp_path / "typo").exists()


def test_the_summary_has_the_iqm_and_the_probability_of_improvement_and_each_K_a_profile(
    sweep, tmp_path, monkeypatch
):
    """At k = K = 2: ProFQI's seeds hold 21, 22, 23 (IQM of 3 values: floor(3/4) = 0 dropped, mean 22),
    FQI's 9, 10, 11: ProFQI ahead on 3 of the 3 seeds both ran, so P = 1 and so is every resample. ``other``
    ran seeds 5, 6 only (10, 12): no seed in common, so the Mann–Whitney form over the 2 × 3 pairs: 10 beats
    9, ties 10, loses to 11 (1.5), 12 beats all 3: 4.5 / 6. The profile figure: the share of each
    algorithm's seeds above τ."""
    from pbo_tf.analysis import plotting

    for seed in (1, 2):
        write_run(sweep, "toy", "fqi", 2, seed, [7.0 + seed, 8.0 + seed, 9.0 + seed])
    for seed, value in ((5, 10.0), (6, 12.0)):
        write_run(sweep, "toy", "other", 2, seed, [0.0, 0.0, value])
    saved, save = [], plotting._save_png
    monkeypatch.setattr(
        plotting, "_save_png", lambda fig, path, dpi: saved.append((path, fig)) or save(fig, path, dpi)
    )
    text = pathlib.Path(report.make_report(sweep, str(tmp_path / "r"), paired_baseline="fqi")).read_text()
    assert (
        "| env | K | algorithm | seeds | metric | IQM at k = K [95% CI] | P(ahead of `fqi`) at k = K [95% CI]"
        in text
    )
    rows = {line.split(" | ")[2]: line for line in text.splitlines() if line.startswith("| toy | 2 |")}
    assert rows["fqi"].startswith("| toy | 2 | fqi | 3 | `m` | 10 [")
    assert rows["profqi"].startswith("| toy | 2 | profqi | 3 | `m` | 22 [")
    assert rows["profqi"].endswith("| 1 [1, 1] | paired, 3 seeds |")
    assert rows["other"].startswith("| toy | 2 | other | 2 | `m` | 11 [") and "| 0.75 [" in rows["other"]
    assert rows["other"].endswith("| unpaired, 2 × 3 runs |")
    low, high = (float(v) for v in rows["profqi"].split(" | ")[5].split("[")[1].rstrip("]").split(", "))
    assert 21.0 <= low <= 22.0 <= high <= 23.0  # a mean of 3 draws of 21, 22, 23
    assert "![toy, K = 2: performance profile at k = K](toy_k2_profile.png)" in text
    (profile,) = [fig for path, fig in saved if path.endswith("toy_k2_profile.png")]
    lines = {line.get_label(): line for line in profile.axes[0].get_lines()}
    taus = lines["ProFQI (3 seeds)"].get_xdata()
    middle = np.argmin(np.abs(taus - 15.0))  # above every FQI seed (≤ 11), below every ProFQI seed (≥ 21)
    assert lines["ProFQI (3 seeds)"].get_ydata()[[0, middle, -1]].tolist() == [1.0, 1.0, 0.0]
    assert lines["FQI (3 seeds)"].get_ydata()[[0, middle, -1]].tolist() == [1.0, 0.0, 0.0]
