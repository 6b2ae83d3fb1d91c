r"""Writes a reproduction report of a sweep: the paper's figures and tables from its run folders.

Usage::

    pbo-report --root_dir=runs/paper --output_dir=reports/paper [--readme=README.md]

(or ``python launch/report.py ...`` in a checkout). Every folder under the ``--root_dir`` folders (a
comma-separated list) holding a ``metrics.json`` is a run (a batched run gives one run per seed). For each
environment and each K it writes the curve of the environment's main metric against k, every algorithm with
its 95% Student-t band (car-on-hill J with the optimal J of the seeds' datasets as a line), the greedy
policy maps where the runs saved them, and a table of mean ± 95% half width at k = 1, K and K + 10 (and at
the fixed point when a run has one), each row with its seed count (and, from their ``failure.json``, the
seeds whose run diverged), share of the paper's gradient steps and training wall time per seed.
``R/report.md`` links them all and opens with a summary: one row per environment, K and algorithm, then
rliable-style statistics at k = K (`pbo_tf.analysis.robust`): the interquartile mean over the seeds with its
95% stratified bootstrap interval and, with ``--paired_baseline``, the probability of being ahead of the
baseline (paired by seed where both ran a seed); each K also gets a performance profile at k = K (the
fraction of runs above τ, with bootstrap bands), ``<env>_k<K>_profile.png``. A run on a user's own
dataset is titled by its file and gym id (``dataset acrobot_20k.npz (Acrobot-v1)``; its figures
``dataset_acrobot_20k.npz_Acrobot-v1_k<K>.png``), and the runs of two files stay in two sections.

``--readme=FILE`` also writes that summary into ``FILE`` between the lines ``<!-- pbo-report:summary -->``
and ``<!-- /pbo-report:summary -->`` (everything else in the file is kept): the README's results table is
made this way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from absl import flags

from pbo_tf.analysis import paired, results, robust
from pbo_tf.analysis.report import (
    HIGHER_IS_BETTER,
    REFERENCE_KEYS,
    ReportError,
    activity_rows,
    failed_text,
    file_stem,
    group_rows,
    markdown_table,
    replace_summary,
    section_groups,
    summary_block,
    summary_table,
    table_ks,
)
from pbo_tf.cli import common as cli
from pbo_tf.experiments.reader import read_records
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
_PAIRED = flags.DEFINE_string(
    "paired_baseline",
    None,
    "An algorithm (e.g. fqi): each section also gets a table of every algorithm against it paired by seed "
    "(the seeds ahead at each k, the mean difference, the paired t-test).",
    flag_values=FLAGS,
)
_PAIRED_KS = flags.DEFINE_list(
    "paired_ks",
    None,
    "The k of the paired tables (default: the section's, 1, K and K + 10).",
    flag_values=FLAGS,
)
_BOOTSTRAP_REPS = flags.DEFINE_integer(
    "bootstrap_reps",
    robust.DEFAULT_REPS,
    "Resamples of the bootstrap intervals and bands (IQM, probability of improvement, performance "
    "profiles; seeded, so a report is the same on every run).",
    lower_bound=1,
    flag_values=FLAGS,
)
cli.define_common_flags(FLAGS)
flags.mark_flags_as_required(["root_dir", "output_dir"], flag_values=FLAGS)


def make_report(
    root_dirs: str | Sequence[str],
    output_dir: str,
    readme: str | None = None,
    paired_baseline: str | None = None,
    paired_ks: Sequence[int] | None = None,
    bootstrap_reps: int = robust.DEFAULT_REPS,
) -> str:
    """Writes ``output_dir/report.md`` and its figures from the runs under ``root_dirs``; returns its path.
    With ``readme``, also writes the summary table into that file
    (`pbo_tf.analysis.report.replace_summary`); the tables are `pbo_tf.analysis.report`'s. With
    ``paired_baseline``, each section where that algorithm ran also gets `pbo_tf.analysis.paired`'s table of
    every other algorithm against it, paired by seed, at ``paired_ks`` (default the section's ks), and the
    summary's robust table (`pbo_tf.analysis.robust.robust_table`, ``bootstrap_reps`` resamples) the
    probability of being ahead of it.

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
    runs = read_records(root_dirs)
    if not runs:
        raise ReportError(f"no runs (folders with {results.METRICS_FILENAME}) under {', '.join(root_dirs)}")
    failures = results.load_failures(root_dirs)
    sections = section_groups(runs)
    if paired_ks and paired_baseline is None:
        raise ReportError("--paired_ks needs --paired_baseline (the algorithm the others are paired with)")
    if paired_baseline is not None:
        algorithms = sorted({g["algorithm"] for *_, groups in sections for g in groups.values()})
        if paired_baseline not in algorithms:
            raise ReportError(
                f"--paired_baseline {paired_baseline!r} ran in none of the sections; the algorithms: "
                f"{', '.join(algorithms)}"
            )
    summary = summary_table(runs, sections, failures)
    if readme is not None:
        summary_block(readme)  # a missing block fails here, before any file is written
    from pbo_tf.analysis import plotting  # matplotlib: imported only when there is something to draw
    from pbo_tf.cli.plot import PlotError, make_policy_maps

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
        "",
        robust.robust_caption(bootstrap_reps, paired_baseline),
        "",
        *robust.robust_table(sections, paired_baseline, HIGHER_IS_BETTER, reps=bootstrap_reps),
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
            figure = f"{file_stem(env)}_k{K}.png"
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
            rows = [group_rows(g, results.group_members(g, k_runs), ks) for g in k_groups.values()]
            for row, g in zip(rows, k_groups.values(), strict=True):  # the seeds that failed, beside them
                row[1] += failed_text(failures, env, g["algorithm"], K)
            lines += ["", f"### K = {K}", "", f"![{env}, K = {K}]({figure})", ""]
            lines += markdown_table(header, rows)
            at_K = robust.k_scores(k_groups, env_runs, metric, K, K, paired_baseline)
            if at_K:
                profile = f"{file_stem(env)}_k{K}_profile.png"
                plotting.plot_performance_profile(
                    {name: list(v.values()) for name, v in at_K.items()},
                    os.path.join(output_dir, profile),
                    metric,
                    title=f"{env}, K = {K}: performance profile at k = K",
                    higher_is_better=HIGHER_IS_BETTER.get(metric, metric not in paired.LOWER_IS_BETTER),
                    reps=bootstrap_reps,
                )
                lines += ["", f"![{env}, K = {K}: performance profile at k = K]({profile})"]
            if reference is not None:
                lines += ["", f"{label}: {reference:.4g}."]
            methods = [g["algorithm"] for g in k_groups.values()]
            if paired_baseline is not None and paired_baseline in methods and len(methods) > 1:
                lines += [
                    "",
                    f"Paired by seed against `{paired_baseline}` (a seed: the same dataset and ω_0):",
                    "",
                ]
                run_env = k_runs[0]["env"]  # (a section can be named apart from its runs' env)
                at = list(paired_ks) if paired_ks else ks
                lines += paired.paired_table(env_runs, run_env, metric, methods, paired_baseline, at, K=K)
            activity = activity_rows(list(k_groups.values()), k_runs)
            if activity:
                header = ["algorithm", "options", "active units on W", "spread on W", "active units, fresh"]
                header += ["spread, fresh", "operator", "unit alignment at K", "wall time / refresh"]
                lines += [
                    "",
                    "Operator activity at the end of training (active units: median over seeds "
                    "per hidden layer; spread: Λ's relative spread, mean over seeds; unit alignment: "
                    "the mean pairwise cosine of the K-th iterate's hidden units, per layer, mean over "
                    "seeds, 1 when they are copies; wall time per refresh: per seed, all seeds of a run "
                    "sharing the cores):",
                    "",
                ]
                lines += markdown_table(header, activity)
            try:
                maps = f"{file_stem(env)}_k{K}_policies.png"
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
    try:
        paired_ks = [int(k) for k in _PAIRED_KS.value] if _PAIRED_KS.value else None
    except ValueError as e:
        raise ReportError(f"--paired_ks must be integers, got {_PAIRED_KS.value}") from e
    path = make_report(
        _ROOT_DIR.value, _OUTPUT_DIR.value, _README.value, _PAIRED.value, paired_ks, _BOOTSTRAP_REPS.value
    )
    print(f"Wrote {path}")
    if _README.value:
        print(f"Wrote the summary table into {_README.value}")
    return 0


def main(argv: list[str] | None = None) -> None:
    """The ``pbo-report`` console script: parses ``argv`` (default ``sys.argv``), runs, exits."""
    cli.run_main(run, FLAGS, argv, tensorflow=False)


if __name__ == "__main__":
    main()
