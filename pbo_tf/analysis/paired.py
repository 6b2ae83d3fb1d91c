"""Methods compared paired by seed: the same seed means the same dataset and the same ω_0, so the fair
comparison of two methods is per seed (no TensorFlow).

`paired_table` gives, for every method and every k asked for, the mean ± 95% Student-t half width over its
seeds, and against a baseline at the same k on the seeds both have: the seeds where the method is ahead
(the metric's direction), the mean difference and the two-sided paired t-test's p-value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pbo_tf.analysis import results
from pbo_tf.analysis.report import format_cell, markdown_table

#: Metrics where lower is better (errors); every other metric is a return, a time or J.
LOWER_IS_BETTER = ("q_error_rms", "param_error_l2", "p_error", "q_error", "v_error", "bellman_residual")


def seed_curves(
    runs: Sequence[dict[str, Any]], env: str, algorithm: str, metric: str, K: int | None = None, min_K=None
) -> dict[int, dict]:
    """``{seed: {k: value}}`` of ``algorithm``'s runs on ``env`` with ``K`` (None: every K) or with a K of at
    least ``min_K``; a seed run with several K keeps each k from the run with the largest K, whose curve
    reaches furthest (right for FQI, whose iterate k does not depend on its K)."""
    out: dict[int, dict] = {}
    chosen = sorted(
        (
            r
            for r in runs
            if r["env"] == env
            and r["algorithm"] == algorithm
            and (K is None or int(r["K"]) == K)
            and (min_K is None or int(r["K"]) >= min_K)
        ),
        key=lambda r: int(r["K"]),
    )
    for run in chosen:
        curve = out.setdefault(int(run["seed"]), {})
        for point in run["curve"]:
            value = point.get(metric)
            if point["k"] != results.INF_K and value is not None and np.isfinite(value):
                curve[int(point["k"])] = float(value)
    return out


def paired_t_p(differences: np.ndarray) -> float:
    """The two-sided p-value of the paired t-test of ``differences`` (NaN below two pairs, 0 or 1 when they
    are all equal)."""
    from scipy import special

    d = np.asarray(differences, np.float64)
    if d.size < 2:
        return float("nan")
    sd = d.std(ddof=1)
    if sd == 0:
        return 0.0 if d.mean() != 0 else 1.0
    t = d.mean() / (sd / np.sqrt(d.size))
    return float(2 * special.stdtr(d.size - 1, -abs(t)))


def compare(method: dict[int, dict], baseline: dict[int, dict], k: int, higher_is_better: bool) -> dict:
    """At ``k``, on the seeds both have: ``n``, ``wins`` (seeds where the method is strictly ahead),
    ``mean_difference`` (method − baseline) and ``p`` (paired t-test)."""
    seeds = sorted(s for s in method if k in method[s] and s in baseline and k in baseline[s])
    d = np.array([method[s][k] - baseline[s][k] for s in seeds])
    ahead = d > 0 if higher_is_better else d < 0
    return {
        "n": len(seeds),
        "wins": int(np.sum(ahead)),
        "mean_difference": float(d.mean()) if d.size else float("nan"),
        "p": paired_t_p(d),
    }


def paired_table(
    runs: Sequence[dict[str, Any]],
    env: str,
    metric: str,
    methods: Sequence[str],
    baseline: str,
    ks: Sequence[int],
    K: int | None = None,
) -> list[str]:
    """A markdown table: per method a row of ``mean ± CI (n)`` at each k, and per method but the baseline a
    row of wins against the baseline at the same k (``wins/n, Δ mean, p``; ``—`` where no seed has both).

    Args:
      runs: `pbo_tf.analysis.results.load_runs` records.
      env: the environment.
      metric: the metric compared (`LOWER_IS_BETTER` says its direction).
      methods: the algorithms (run labels), the baseline among them or not.
      baseline: the algorithm compared against.
      ks: the k of the columns.
      K: the methods' runs of this K only, and the baseline's of this K or more (None: every K).

    Raises:
      ValueError: a method or the baseline has no run on ``env``.
    """
    higher = metric not in LOWER_IS_BETTER
    curves = {}
    for name in dict.fromkeys([baseline, *methods]):
        if name == baseline:
            curves[name] = seed_curves(runs, env, name, metric, min_K=K)
        else:
            curves[name] = seed_curves(runs, env, name, metric, K=K)
        if not curves[name]:
            raise ValueError(f"no finished {name!r} run of {env!r} with {metric!r} to compare")
    header = ["method", "seeds", *[f"k = {k}" for k in ks]]
    rows = []
    for name in dict.fromkeys([baseline, *methods]):
        cells = []
        for k in ks:
            values = np.array([c[k] for c in curves[name].values() if k in c])
            cells.append(results_cell(values))
        seeds = sorted(curves[name])
        rows.append([f"`{name}`", _seed_text(seeds), *cells])
    for name in methods:
        if name == baseline:
            continue
        cells = []
        for k in ks:
            got = compare(curves[name], curves[baseline], k, higher)
            cells.append(
                "—"
                if got["n"] == 0
                else f"{got['wins']}/{got['n']}, Δ {got['mean_difference']:+.3g}, p {got['p']:.2g}"
            )
        rows.append([f"`{name}` ahead of `{baseline}`", "", *cells])
    return markdown_table(header, rows)


def results_cell(values: np.ndarray) -> str:
    """``mean ± 95% half width (n=...)`` of ``values``; ``—`` when empty."""
    from pbo_tf.evaluation.stats import mean_and_ci

    if values.size == 0:
        return "—"
    mean, half = mean_and_ci(values)
    return format_cell(float(mean), float(half), values.size, missing="—")


def _seed_text(seeds: Sequence[int]) -> str:
    """``0–9``, ``0–9, 12`` ...: the seeds as runs of consecutive numbers."""
    parts, start = [], None
    for i, s in enumerate(seeds):
        if start is None:
            start = s
        if i + 1 == len(seeds) or seeds[i + 1] != s + 1:
            parts.append(str(start) if start == s else f"{start}–{s}")
            start = None
    return ", ".join(parts)
