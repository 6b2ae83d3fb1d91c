r"""Writes a reproduction report of a sweep: the paper's figures and tables from its run folders.

Usage::

    pbo-report --root_dir=runs/paper --output_dir=reports/paper [--readme=README.md]

(or ``python launch/report.py ...`` in a checkout). Every folder under the ``--root_dir`` folders (a
comma-separated list) holding a ``metrics.json`` is a run (a batched run gives one run per seed). For each
environment and each K it writes the curve of the environment's main metric against k, every algorithm with
its 95% Student-t band (car-on-hill J with the optimal J of the seeds' datasets as a line), the greedy
policy maps where the runs saved them, and a table of mean ± 95% half width at k = 1, K and K + 10 (and at
the fixed point when a run has one), each row with its seed count, share of the paper's gradient steps
and training wall time per seed.
``R/report.md`` links them all and opens with a summary: one row per environment, K and algorithm.

``--readme=FILE`` also writes that summary into ``FILE`` between the lines ``<!-- pbo-report:summary -->``
and ``<!-- /pbo-report:summary -->`` (everything else in the file is kept): the README's results table is
made this way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from absl import flags

from pbo_tf.cli import common as cli
from pbo_tf.experiments import results
from pbo_tf.io import write_text_atomic

FLAGS = flags.FlagValues()
_ROOT_DIR = flags.DEFINE_list(
    "root_dir", None, "Folders searched recursively for runs (comma-separated).", flag_values=FLAGS
)
_OUTPUT_DIR = flags.DEFINE_string(
    "output_dir", None, "Folder that receives report.md and its figures.", flag_values=FLAGS
)
_README = flags.DEFINE_string(
    "readme",
    None,
    "A markdown file whose summary block (between '<!-- pbo-report:summary -->' and "
    "'<!-- /pbo-report:summary -->') is replaced by the report's summary table.",
    flag_values=FLAGS,
)
cli.define_common_flags(FLAGS)
flags.mark_flags_as_required(["root_dir", "output_dir"], flag_values=FLAGS)

#: The per-seed reference drawn as a line on an environment's main metric (``(env, metric) -> key``).
REFERENCE_KEYS = {("car_on_hill", "J"): "optimal_J"}

#: Whether a larger value of an environment's main metric is better (the summary's metric column).
HIGHER_IS_BETTER = {
    "J": True,
    "balancing_time_s": True,
    "discounted_return": True,
    "q_error_rms": False,
    "param_error_l2": False,
}

SUMMARY_BEGIN = "<!-- pbo-report:summary -->"
SUMMARY_END = "<!-- /pbo-report:summary -->"


class ReportError(ValueError):
    """The root folder holds no runs, or the output folder cannot be written."""


def table_ks(K: int, groups: Sequence[Mapping[str, Any]] = ()) -> list[int]:
    """The ks a table shows: 1, K and K + 10, and K + 30 when a run of ``groups`` (`results.group_curves`
    values) evaluated it (in that order, without repeats)."""
    far = [K + 30] if any(K + 30 in [int(k) for k in g["ks"]] for g in groups) else []
    return list(dict.fromkeys([1, K, K + 10, *far]))


def activity_rows(groups: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One row per group whose runs measured their operator (`operator_activity`): the operator's options,
    active units per hidden layer on W and on fresh vectors (median over seeds), the relative spread of Λ
    on each (mean over seeds), the constant-map seeds and the wall time per refresh."""
    rows = []
    for g in groups:
        members = [r for r in runs if r["algorithm"] == g["algorithm"]]
        measured = [r for r in members if isinstance(r.get("operator_activity"), Mapping)]
        measured = [r for r in measured if "W" in r["operator_activity"]]
        if not measured:
            continue
        cells = []
        for name in ("W", "fresh"):
            units = np.median([r["operator_activity"][name]["active_units"] for r in measured], axis=0)
            spreads = [r["operator_activity"][name].get("relative_spread") or 0.0 for r in measured]
            cells += [str([int(u) for u in units]), f"{np.mean(spreads):.3g}"]
        per_refresh = [
            r["wall_time_s"] / r["budget"]["refreshes_done"]
            for r in members
            if isinstance(r.get("budget"), Mapping) and r["budget"].get("refreshes_done")
        ]
        options = measured[0].get("operator") or {}
        shown = {k: v for k, v in options.items() if k not in ("kind", "d", "hidden_units", "compute_dtype")}
        rows.append(
            [
                g["algorithm"],
                ", ".join(f"{k}={v}" for k, v in shown.items()) or "—",
                *cells,
                operator_text(members) or "—",
                f"{np.mean(per_refresh):.2f} s" if per_refresh else "—",
            ]
        )
    return rows


def cell(values: np.ndarray) -> str:
    """``mean ± 95% half width (n)`` of the finite entries of ``values``; ``—`` when there are none."""
    from pbo_tf.evaluation.stats import mean_and_ci
    from pbo_tf.experiments.plotting import format_cell

    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    mean, half_width = mean_and_ci(finite) if finite.size else (np.nan, np.nan)
    return format_cell(mean, half_width, finite.size, missing="—")


def budget_text(fractions: Sequence[float | None]) -> str:
    """The share of the paper's gradient steps of a group's runs (``paper's`` at 100%)."""
    known = sorted({round(f, 4) for f in fractions if f is not None})
    if not known:
        return "—"
    parts = ["paper's" if math.isclose(f, 1.0) else f"{f:.1%}" for f in known]
    return ", ".join(parts)


def group_rows(group: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], ks: Sequence[int]) -> list[str]:
    """One table row of a ``(env, algorithm, K)`` group: algorithm, seeds, budget, wall time, the ks, ∞."""
    columns = {int(k): j for j, k in enumerate(group["ks"])}
    cells = [
        cell(group["values"][:, columns[k]]) if k in columns else "—"  # FQI has no k beyond K
        for k in ks
    ]
    times = [float(r["wall_time_s"]) for r in runs if isinstance(r.get("wall_time_s"), (int, float))]
    wall = f"{np.mean(times):.1f} s" if times else "—"
    return [
        group["algorithm"],
        str(len(group["seeds"])),
        budget_text(group["budget_fractions"]),
        wall,
        *cells,
        cell(group["inf"]),
    ]


def section(run: Mapping[str, Any]) -> str:
    """The report section of a run: its environment, with ``_online`` for an online run (its
    ``metrics.json`` says ``"setting": "online"``), so offline and online bicycle runs stay apart."""
    return run["env"] + ("_online" if run.get("setting") == "online" else "")


def section_metric(name: str, runs: Sequence[Mapping[str, Any]]) -> str | None:
    """The metric a section shows: the section's own default (`results.DEFAULT_METRICS`), else its
    environment's."""
    return results.default_metric(name if name in results.DEFAULT_METRICS else runs[0]["env"], runs)


def operator_text(runs: Sequence[Mapping[str, Any]]) -> str:
    """Whether the seeds' trained operators are functions, constant maps or (residual operators) translations
    ``ω + c`` (`operator_activity`); empty when no seed's operator was measured (FQI, linear and exact
    operators)."""
    verdicts = [
        r["operator_activity"].get("constant")
        for r in runs
        if isinstance(r.get("operator_activity"), Mapping)
    ]
    verdicts = [v for v in verdicts if v is not None]
    if not verdicts:
        return ""
    constant = sum(1 for v in verdicts if v)
    translations = sum(1 for r in runs if is_translation(r))
    if translations:
        return f"**a translation ω + c in {translations}/{len(verdicts)} seeds**"
    if constant == 0:
        return f"a function in {len(verdicts)}/{len(verdicts)} seeds"
    return f"**a constant map in {constant}/{len(verdicts)} seeds**"


def is_translation(run: Mapping[str, Any]) -> bool:
    """Whether a run's residual operator is a translation ``ω + c``: its ``operator_activity`` says so, or
    (runs recorded before that field) a hidden layer of its ReLU ``f`` has no active unit on W."""
    activity = run.get("operator_activity")
    if not isinstance(activity, Mapping):
        return False
    if "translation" in activity:
        return bool(activity["translation"])
    options = run.get("operator") or {}
    dead = min(activity.get("W", {}).get("active_units") or [1]) == 0
    return bool(options.get("residual") and options.get("activation", "relu") == "relu" and dead)


def section_groups(runs: Sequence[Mapping[str, Any]]) -> list[tuple[str, list, str, dict]]:
    """``(section, its runs, its metric, results.group_curves of them)`` for each section of ``runs``
    (`section`), sorted by name."""
    out = []
    for name in sorted({section(r) for r in runs}):
        members = [r for r in runs if section(r) == name]
        metric = section_metric(name, members)
        out.append((name, members, metric, results.group_curves(members, metric)))
    return out


def summary_table(runs: Sequence[Mapping[str, Any]], sections: list | None = None) -> list[str]:
    """One markdown row per ``(env, K, algorithm)`` of ``runs``: seeds, budget, the env's main metric at
    k = 1, K, K + 10 (K + 30 when some run evaluated it) and at the fixed point, and whether the operator
    is a function (`operator_text`).
    ``sections``: `section_groups` of ``runs`` when the caller has it."""
    sections = section_groups(runs) if sections is None else sections
    far = any(len(table_ks(g["K"], [g])) == 4 for _, _, _, groups in sections for g in groups.values())
    header = ["env", "K", "algorithm", "seeds", "budget", "metric", "k = 1", "k = K", "k = K + 10"]
    header += ["k = K + 30"] * far + ["k = ∞", "operator"]
    rows = []
    for env, env_runs, metric, groups in sections:
        arrow = {True: " (↑)", False: " (↓)"}.get(HIGHER_IS_BETTER.get(metric), "")
        for group in sorted(groups.values(), key=lambda g: (g["K"], g["algorithm"])):
            K = group["K"]
            members = [r for r in env_runs if int(r["K"]) == K and r["algorithm"] == group["algorithm"]]
            ks = table_ks(K, [group])
            algorithm, seeds, budget, _, *cells = group_rows(group, members, ks)
            if far and len(ks) < 4:  # this group stops before K + 30
                cells = [*cells[:3], "—", cells[3]]
            rows.append(
                [env, str(K), algorithm, seeds, budget, f"`{metric}`{arrow}", *cells, operator_text(members)]
            )
    return markdown_table(header, rows)


def summary_block(path: str) -> tuple[list[str], int, int]:
    """The lines of the file ``path`` and the indices of its `SUMMARY_BEGIN` and `SUMMARY_END` lines.

    Raises:
      ReportError: the file is missing or lacks exactly one begin line followed by one end line.
    """
    if not os.path.isfile(path):
        raise ReportError(f"--readme {path!r} does not exist")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    begins = [i for i, line in enumerate(lines) if line.strip() == SUMMARY_BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == SUMMARY_END]
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise ReportError(
            f"--readme {path!r} needs one line {SUMMARY_BEGIN!r} and, after it, one line {SUMMARY_END!r} "
            f"(found {len(begins)} and {len(ends)})"
        )
    return lines, begins[0], ends[0]


def replace_summary(path: str, table: Sequence[str]) -> None:
    """Replaces the lines between `SUMMARY_BEGIN` and `SUMMARY_END` in the file ``path`` by ``table``,
    atomically; raises `ReportError` (from `summary_block`) and leaves the file as it was without them."""
    lines, begin, end = summary_block(path)
    write_text_atomic(path, "\n".join(lines[: begin + 1] + list(table) + lines[end:]))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def make_report(root_dirs: str | Sequence[str], output_dir: str, readme: str | None = None) -> str:
    """Writes ``output_dir/report.md`` and its figures from the runs under ``root_dirs``; returns its path.
    With ``readme``, also writes the summary table into that file (`replace_summary`).

    Raises:
      ReportError: a root folder is missing or none holds a run, ``output_dir`` is a file, or ``readme``
        has no summary block (checked before anything is written).
      ValueError: a ``metrics.json`` is corrupt, or a seed appears twice for one env, algorithm and K (the
        message names the folders).
    """
    root_dirs = [root_dirs] if isinstance(root_dirs, str) else list(root_dirs)
    for root_dir in root_dirs:
        if not os.path.isdir(root_dir):
            raise ReportError(f"--root_dir {root_dir!r} does not exist or is not a folder")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ReportError(f"--output_dir {output_dir!r} is a file")
    runs = results.load_runs(root_dirs)
    if not runs:
        raise ReportError(f"no runs (folders with {results.METRICS_FILENAME}) under {', '.join(root_dirs)}")
    sections = section_groups(runs)
    summary = summary_table(runs, sections)
    if readme is not None:
        summary_block(readme)  # a missing block fails here, before any file is written
    from pbo_tf.cli.plot import PlotError, make_policy_maps
    from pbo_tf.experiments import plotting  # matplotlib: imported only when there is something to draw

    os.makedirs(output_dir, exist_ok=True)
    lines = [
        "# Reproduction report",
        "",
        f"Runs under {', '.join(f'`{d}`' for d in root_dirs)}: mean ± 95% Student-t half width over the "
        "seeds (n = seeds with a value); budget = share of the paper's gradient steps; wall time = training "
        "time per seed.",
        "",
        "## Summary",
        "",
        *summary,
    ]
    for env, env_runs, metric, groups in sections:
        lines += ["", f"## {env}", "", f"Metric: `{metric}`."]
        for K in sorted({g["K"] for g in groups.values()}):
            k_groups = {key: g for key, g in groups.items() if g["K"] == K}
            k_runs = [r for r in env_runs if int(r["K"]) == K]
            reference, label = None, "reference"
            key = REFERENCE_KEYS.get((env, metric))
            if key is not None:
                reference = results.reference_value(k_runs, key)
                label = plotting.reference_line_label(
                    key, reference, len(results.reference_by_seed(k_runs, key))
                )
            figure = f"{env}_k{K}.png"
            plotting.plot_curves(
                k_groups,
                metric,
                os.path.join(output_dir, figure),
                title=f"{env}, K = {K}: {metric}",
                reference=reference,
                reference_label=label,
            )
            ks = table_ks(K, list(k_groups.values()))
            header = ["algorithm", "seeds", "budget", "wall time / seed", *[f"k = {k}" for k in ks], "k = ∞"]
            rows = [
                group_rows(g, [r for r in k_runs if r["algorithm"] == g["algorithm"]], ks)
                for g in k_groups.values()
            ]
            lines += ["", f"### K = {K}", "", f"![{env}, K = {K}]({figure})", ""]
            lines += markdown_table(header, rows)
            if reference is not None:
                lines += ["", f"{label}: {reference:.4g}."]
            activity = activity_rows(list(k_groups.values()), k_runs)
            if activity:
                header = ["algorithm", "options", "active units on W", "spread on W", "active units, fresh"]
                header += ["spread, fresh", "operator", "wall time / refresh"]
                lines += [
                    "",
                    "Operator activity at the end of training (active units: median over seeds "
                    "per hidden layer; spread: Λ's relative spread, mean over seeds; wall time per "
                    "refresh: per seed, all seeds of a run sharing the cores):",
                    "",
                ]
                lines += markdown_table(header, activity)
            try:
                maps = f"{env}_k{K}_policies.png"
                dirs = sorted({os.path.dirname(r["run_dir"]) for r in k_runs})
                make_policy_maps(dirs, os.path.join(output_dir, maps))
                lines += ["", f"![{env}, K = {K}: greedy policies at k = K]({maps})"]
            except PlotError:
                pass  # no run of this K saved policy maps
    path = os.path.join(output_dir, "report.md")
    write_text_atomic(path, "\n".join(lines) + "\n")
    if readme is not None:
        replace_summary(readme, summary)
    return path


def run(argv: list[str]) -> int:
    """Writes the report. Errors (`ReportError`, a corrupt metrics.json, bad flags) are raised and reported
    in one line by `pbo_tf.cli.common` (exit code 2)."""
    if len(argv) > 1:
        raise ReportError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    print(f"Wrote {make_report(_ROOT_DIR.value, _OUTPUT_DIR.value, _README.value)}")
    if _README.value:
        print(f"Wrote the summary table into {_README.value}")
    return 0


def main(argv: list[str] | None = None) -> None:
    """The ``pbo-report`` console script: parses ``argv`` (default ``sys.argv``), runs, exits."""
    cli.run_main(run, FLAGS, argv, tensorflow=False)


if __name__ == "__main__":
    main()
