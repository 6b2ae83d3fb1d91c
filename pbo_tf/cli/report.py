r"""Writes a reproduction report of a sweep: the paper's figures and tables from its run folders.

Usage::

    pbo-report --root_dir=runs/paper --output_dir=reports/paper

(or ``python launch/report.py ...`` in a checkout). Every folder under ``--root_dir`` holding a
``metrics.json`` is a run (a batched run gives one run per seed). For each environment and each K it writes
the curve of the environment's main metric against k, every algorithm with its 95% Student-t band (car-on-hill
J with the optimal J of the seeds' datasets as a line), the greedy policy maps where the runs saved them,
and a table of mean ± 95% half width at k = 1, K and K + 10 (and at the fixed point when a run has one), each
row with its seed count, share of the paper's gradient steps and training wall time per seed.
``R/report.md`` links them all.
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
_ROOT_DIR = flags.DEFINE_string("root_dir", None, "Folder searched recursively for runs.", flag_values=FLAGS)
_OUTPUT_DIR = flags.DEFINE_string(
    "output_dir", None, "Folder that receives report.md and its figures.", flag_values=FLAGS
)
cli.define_common_flags(FLAGS)
flags.mark_flags_as_required(["root_dir", "output_dir"], flag_values=FLAGS)

#: The per-seed reference drawn as a line on an environment's main metric (``(env, metric) -> key``).
REFERENCE_KEYS = {("car_on_hill", "J"): "optimal_J"}


class ReportError(ValueError):
    """The root folder holds no runs, or the output folder cannot be written."""


def table_ks(K: int) -> list[int]:
    """The ks a table shows: 1, K and K + 10 (in that order, without repeats)."""
    return list(dict.fromkeys([1, K, K + 10]))


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


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def make_report(root_dir: str, output_dir: str) -> str:
    """Writes ``output_dir/report.md`` and its figures from the runs under ``root_dir``; returns its path.

    Raises:
      ReportError: ``root_dir`` is missing or holds no runs, or ``output_dir`` is a file.
      ValueError: a ``metrics.json`` is corrupt (the message names it).
    """
    if not os.path.isdir(root_dir):
        raise ReportError(f"--root_dir {root_dir!r} does not exist or is not a folder")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ReportError(f"--output_dir {output_dir!r} is a file")
    runs = results.load_runs(root_dir)
    if not runs:
        raise ReportError(f"no runs (folders with {results.METRICS_FILENAME}) under {root_dir!r}")
    from pbo_tf.cli.plot import PlotError, make_policy_maps
    from pbo_tf.experiments import plotting  # matplotlib: imported only when there is something to draw

    os.makedirs(output_dir, exist_ok=True)
    lines = [
        "# Reproduction report",
        "",
        f"Runs under `{root_dir}`: mean ± 95% Student-t half width over the seeds (n = seeds with a value); "
        "budget = share of the paper's gradient steps; wall time = training time per seed.",
    ]
    for env in sorted({r["env"] for r in runs}):
        env_runs = [r for r in runs if r["env"] == env]
        metric = results.default_metric(env, env_runs)
        groups = results.group_curves(env_runs, metric)
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
            ks = table_ks(K)
            header = ["algorithm", "seeds", "budget", "wall time / seed", *[f"k = {k}" for k in ks], "k = ∞"]
            rows = [
                group_rows(g, [r for r in k_runs if r["algorithm"] == g["algorithm"]], ks)
                for g in k_groups.values()
            ]
            lines += ["", f"### K = {K}", "", f"![{env}, K = {K}]({figure})", ""]
            lines += markdown_table(header, rows)
            if reference is not None:
                lines += ["", f"{label}: {reference:.4g}."]
            try:
                maps = f"{env}_k{K}_policies.png"
                dirs = sorted({os.path.dirname(r["run_dir"]) for r in k_runs})
                make_policy_maps(dirs, os.path.join(output_dir, maps))
                lines += ["", f"![{env}, K = {K}: greedy policies at k = K]({maps})"]
            except PlotError:
                pass  # no run of this K saved policy maps
    path = os.path.join(output_dir, "report.md")
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def run(argv: list[str]) -> int:
    """Writes the report. Errors (`ReportError`, a corrupt metrics.json, bad flags) are raised and reported
    in one line by `pbo_tf.cli.common` (exit code 2)."""
    if len(argv) > 1:
        raise ReportError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    print(f"Wrote {make_report(_ROOT_DIR.value, _OUTPUT_DIR.value)}")
    return 0


def main(argv: list[str] | None = None) -> None:
    """The ``pbo-report`` console script: parses ``argv`` (default ``sys.argv``), runs, exits."""
    cli.run_main(run, FLAGS, argv, tensorflow=False)


if __name__ == "__main__":
    main()
