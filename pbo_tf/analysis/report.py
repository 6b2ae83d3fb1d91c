"""The tables of a reproduction report (`pbo_tf.cli.report`, ``pbo-report``), from loaded runs
(`pbo_tf.analysis.results`): cells of mean ± 95% Student-t half width over seeds, one row per
``(env, algorithm, K)`` group, the operators' verdicts (function, constant map, translation), the summary
table and the README block it is written into. No TensorFlow, no matplotlib.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pbo_tf.analysis import results
from pbo_tf.io import write_text_atomic

#: The per-seed reference drawn as a line on an environment's main metric (``(env, metric) -> key``).
REFERENCE_KEYS = {("car_on_hill", "J"): "optimal_J"}

#: Whether a larger value of an environment's main metric is better (the summary's metric column).
HIGHER_IS_BETTER = {
    "J": True,
    "balancing_time_s": True,
    "discounted_return": True,
    "return": True,
    "q_error_rms": False,
    "param_error_l2": False,
    "bellman_residual": False,
    "bellman_residual_rms": False,
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
    on each (mean over seeds), the constant-map seeds, the alignment of the K-th iterate's hidden units
    (`pbo_tf.evaluation.unit_alignment`, per hidden layer, mean over seeds; MLP Q families) and the wall time
    per refresh."""
    rows = []
    for g in groups:
        members = results.group_members(g, runs)
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
        aligned = [
            r["operator_activity"]["unit_alignment"][r["K"]]
            for r in measured
            if len(r["operator_activity"].get("unit_alignment") or []) > r["K"]
            and r["operator_activity"]["unit_alignment"][r["K"]] is not None
        ]
        options = measured[0].get("operator") or {}
        shown = {k: v for k, v in options.items() if k not in ("kind", "d", "hidden_units", "compute_dtype")}
        rows.append(
            [
                g["algorithm"],
                ", ".join(f"{k}={v}" for k, v in shown.items()) or "—",
                *cells,
                operator_text(members) or "—",
                str([round(float(v), 2) for v in np.mean(aligned, axis=0)]) if aligned else "—",
                f"{np.mean(per_refresh):.2f} s" if per_refresh else "—",
            ]
        )
    return rows


def cell(values: np.ndarray) -> str:
    """``mean ± 95% half width (n)`` of the finite entries of ``values``; ``—`` when there are none."""
    from pbo_tf.evaluation.stats import mean_and_ci  # SciPy: imported only when a cell is computed

    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    mean, half_width = mean_and_ci(finite) if finite.size else (np.nan, np.nan)
    return format_cell(mean, half_width, finite.size, missing="—")


def format_cell(mean: float, half_width: float, count: int, missing: str = "n/a") -> str:
    """One table cell: ``mean ± half width (n=count)``, or ``mean (n=1)``, or ``missing``."""
    if not np.isfinite(mean) or count < 1:
        return missing
    if count == 1 or not np.isfinite(half_width):
        return f"{mean:.4g} (n={count})"
    return f"{mean:.4g} ± {half_width:.2g} (n={count})"


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
    """The report section of a run: its environment as `results.env_label` names it (a user's dataset by
    its file and gym id), with ``_online`` for an online run (its ``metrics.json`` says
    ``"setting": "online"``), so offline and online bicycle runs stay apart."""
    return results.env_label(run) + ("_online" if run.get("setting") == "online" else "")


def file_stem(name: str) -> str:
    """A section's name as the start of its figures' file names: each run of characters outside
    ``[A-Za-z0-9_.-]`` (spaces, brackets) as one ``_`` (``dataset acrobot_20k.npz (Acrobot-v1)`` →
    ``dataset_acrobot_20k.npz_Acrobot-v1``); the registered environments' names are their own."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "env"


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


def failed_text(failures: Sequence[Mapping[str, Any]], section_name: str, algorithm: str, K: int) -> str:
    """What a seeds cell adds for the failed seeds of a group (`pbo_tf.analysis.results.load_failures`):
    ``" (+2 diverged)"`` (``failed`` when some failure is not a divergence), or ``""`` when none failed."""
    mine = [
        f
        for f in failures
        if section_name in (section(f), data_section(section(f), results.data_digest(f)))
        and f["algorithm"] == algorithm
        and int(f["K"]) == int(K)
    ]
    count = sum(len(f["seeds"]) for f in mine)
    if not count:
        return ""
    word = "diverged" if all(f.get("status") == "diverged" for f in mine) else "failed"
    return f" (+{count} {word})"


def section_groups(runs: Sequence[Mapping[str, Any]]) -> list[tuple[str, list, str, dict]]:
    """``(section, its runs, its metric, results.group_curves of them)`` for each section of ``runs``
    (`section`), sorted by name. Runs on two datasets of one name (files of the same name in two folders,
    told apart by `results.data_digest`) make two sections, each name followed by ``[data <digest>]``."""

    def key(run):
        return section(run), results.data_digest(run) or ""

    keys = sorted({key(r) for r in runs})
    names = [name for name, _ in keys]
    out = []
    for name, digest in keys:
        members = [r for r in runs if key(r) == (name, digest)]
        metric = section_metric(name, members)
        shown = data_section(name, digest) if names.count(name) > 1 else name
        out.append((shown, members, metric, results.group_curves(members, metric)))
    return out


def data_section(name: str, digest: str | None) -> str:
    """The section ``name`` of the runs on the dataset of ``digest`` where another dataset has its name."""
    return f"{name} [data {digest[:8]}]" if digest else name


def summary_table(
    runs: Sequence[Mapping[str, Any]],
    sections: list | None = None,
    failures: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    """One markdown row per ``(env, K, algorithm)`` of ``runs``: seeds, budget, the env's main metric at
    k = 1, K, K + 10 (K + 30 when some run evaluated it) and at the fixed point, and whether the operator
    is a function (`operator_text`).
    ``sections``: `section_groups` of ``runs`` when the caller has it. ``failures``: the failed runs
    (`pbo_tf.analysis.results.load_failures`): their seeds are counted beside the finished ones
    (`failed_text`), and a group whose every seed failed gets a row of its own."""
    sections = section_groups(runs) if sections is None else sections
    far = any(len(table_ks(g["K"], [g])) == 4 for _, _, _, groups in sections for g in groups.values())
    header = ["env", "K", "algorithm", "seeds", "budget", "metric", "k = 1", "k = K", "k = K + 10"]
    header += ["k = K + 30"] * far + ["k = ∞", "operator"]
    rows = []
    for env, env_runs, metric, groups in sections:
        arrow = {True: " (↑)", False: " (↓)"}.get(HIGHER_IS_BETTER.get(metric), "")
        for group in sorted(groups.values(), key=lambda g: (g["K"], g["algorithm"])):
            K = group["K"]
            members = results.group_members(group, env_runs)
            ks = table_ks(K, [group])
            algorithm, seeds, budget, _, *cells = group_rows(group, members, ks)
            if far and len(ks) < 4:  # this group stops before K + 30
                cells = [*cells[:3], "—", cells[3]]
            seeds += failed_text(failures, env, algorithm, K)
            rows.append(
                [env, str(K), algorithm, seeds, budget, f"`{metric}`{arrow}", *cells, operator_text(members)]
            )
    finished = {(row[0], row[1], row[2]) for row in rows}
    for env, K, algorithm in sorted({(section(f), int(f["K"]), f["algorithm"]) for f in failures}):
        if (env, str(K), algorithm) not in finished:
            seeds = "0" + failed_text(failures, env, algorithm, K)
            rows.append([env, str(K), algorithm, seeds, *["—"] * (len(header) - 4)])
    rows.sort(key=lambda row: (row[0], int(row[1]), row[2]))
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
