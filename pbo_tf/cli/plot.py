r"""Plots the learning curves of finished runs and prints a summary table.

Usage::

    pbo-plot --root_dir=runs/chain_walk --output=figures/chain_walk.png
    pbo-plot --root_dir=runs/lqr_fqi --root_dir=runs/lqr_profqi \
        --output=figures/lqr.png --metric=p_error --table_ks=0,5,15

(or ``python launch/plot.py ...`` in a checkout).

Every folder under the ``--root_dir``\ s holding a ``metrics.json`` is a run; runs are grouped by
(env, algorithm, K) and averaged over seeds with a 95% Student-t band (none for a single seed). All runs
must come from one env. The legend gives each group's number of seeds and, when the runs record it, its
share of the paper's gradient steps; ``--reference_key`` draws the mean over seeds of each seed's own
reference value (e.g. ``optimal_J``, which depends on the seed's dataset).
"""

from __future__ import annotations

import os

from absl import flags

# `import pbo_tf` is light (TensorFlow loads only with the modules that need it), so plotting stays fast.
from pbo_tf.analysis import results
from pbo_tf.cli import common as cli
from pbo_tf.experiments.reader import read_records

FLAGS = flags.FlagValues()

_ROOT_DIRS = flags.DEFINE_multi_string(
    "root_dir",
    None,
    "Folder(s) searched recursively for run folders (with metrics.json). Repeatable.",
    flag_values=FLAGS,
)
_OUTPUT = flags.DEFINE_string("output", None, "Path of the PNG to write.", flag_values=FLAGS)
_METRIC = flags.DEFINE_string(
    "metric",
    None,
    "Metric to plot; default per env (chain_walk: q_error_rms, lqr: param_error_l2, ...).",
    flag_values=FLAGS,
)
_TITLE = flags.DEFINE_string("title", None, "Figure title (default: '<env>: <metric>').", flag_values=FLAGS)
_TABLE_KS = flags.DEFINE_list(
    "table_ks",
    None,
    "ks of the printed table (default: 0, K and K+10 of the first group, those that some group has).",
    flag_values=FLAGS,
)
_REFERENCE = flags.DEFINE_float(
    "reference", None, "Value drawn as a horizontal reference line.", flag_values=FLAGS
)
_REFERENCE_KEY = flags.DEFINE_string(
    "reference_key",
    None,
    "Key of the runs' 'reference' object drawn as a horizontal line (mean over runs), e.g. 'optimal_J'.",
    flag_values=FLAGS,
)
_POLICY_MAPS = flags.DEFINE_string(
    "policy_maps",
    None,
    "Also write the greedy policy maps (runs with policy_maps.npz, e.g. car-on-hill) of each algorithm's "
    "first seed at k = --policy_k to this PNG (paper Fig. 6).",
    flag_values=FLAGS,
)
_POLICY_K = flags.DEFINE_string(
    "policy_k", None, "k of the policy maps (default: each run's K).", flag_values=FLAGS
)
_LOG_Y = flags.DEFINE_enum(
    "log_y", "auto", ["auto", "true", "false"], "Log-scale y axis (auto: by metric).", flag_values=FLAGS
)

cli.define_common_flags(FLAGS)
flags.mark_flags_as_required(["root_dir", "output"], flag_values=FLAGS)


class PlotError(ValueError):
    """A user-facing error (no runs, several envs, unknown metric, ...)."""


def make_plot(
    root_dirs: list[str],
    output: str,
    metric: str | None = None,
    title: str | None = None,
    table_ks: list[int] | None = None,
    reference: float | None = None,
    reference_key: str | None = None,
    log_y: bool | None = None,
) -> tuple[str, str]:
    """Loads the runs, writes the figure and builds the summary table.

    Args:
        root_dirs: Folders searched recursively for run folders.
        output: PNG path.
        metric: Metric to plot; None for the env's default.
        title: Figure title; None for the default.
        table_ks: ks of the table; None for 0, K and K+10 of the first group's K (those that some group has).
        reference: Value of a horizontal reference line.
        reference_key: Key of the runs' ``reference`` object to draw instead: the mean over seeds of each
            seed's value (`pbo_tf.analysis.results.reference_by_seed`).
        log_y: Log-scale y axis; None chooses automatically.

    Returns:
        ``(output path, table text)``.

    Raises:
        PlotError: On a missing root dir, no runs, runs of several envs, or an unknown metric / reference.
        ValueError: On a corrupt ``metrics.json`` (the message names the file).
    """
    missing = [root_dir for root_dir in root_dirs if not os.path.isdir(root_dir)]
    if missing:
        raise PlotError(f"--root_dir does not exist or is not a directory: {', '.join(missing)}")
    runs = read_records(root_dirs)
    if not runs:
        raise PlotError(
            f"No runs (folders with {results.METRICS_FILENAME}) found under: {', '.join(root_dirs)}"
        )
    envs = sorted({results.env_label(run) for run in runs})
    if len(envs) > 1 or len({results.data_digest(run) for run in runs}) > 1:
        what = (
            ", ".join(envs) if len(envs) > 1 else f"datasets of one name, {envs[0]}, with other transitions"
        )
        raise PlotError(f"The runs mix several envs ({what}); plot one env at a time")
    keys = results.metric_keys(runs)
    if metric is None:
        metric = results.default_metric(envs[0], runs)
    if metric is None or metric not in keys:
        raise PlotError(f"Unknown metric {metric!r} for env {envs[0]}; metrics found in the runs: {keys}")
    groups = results.group_curves(runs, metric)
    n_reference_seeds = 1
    if reference_key is not None:
        by_seed = results.reference_by_seed(runs, reference_key)
        if not by_seed:
            found = sorted({key for run in runs for key in (run.get("reference") or {})})
            raise PlotError(f"No run has reference {reference_key!r}; reference keys found: {found}")
        reference, n_reference_seeds = results.reference_value(runs, reference_key), len(by_seed)
    if table_ks is None:
        first = next(iter(groups.values()))
        present = {int(k) for group in groups.values() for k in group["ks"]}
        table_ks = [k for k in dict.fromkeys([0, first["K"], first["K"] + 10]) if k in present]
    from pbo_tf.analysis import plotting  # Imported late: matplotlib / SciPy are slow to import.

    label = (
        plotting.reference_line_label(reference_key, reference, n_reference_seeds)
        if reference is not None
        else ""
    )
    path = plotting.plot_curves(
        groups, metric, output, title=title, reference=reference, log_y=log_y, reference_label=label
    )
    table = plotting.summary_table(groups, metric, table_ks)
    return path, table


def make_policy_maps(root_dirs: list[str], output: str, k: str | None = None) -> str:
    """Greedy policy maps of the first seed of each (algorithm, K) at ``k`` (default K), side by side."""
    import numpy as np

    from pbo_tf.analysis import plotting

    panels, seen = [], set()
    for run in sorted(read_records(root_dirs), key=lambda r: (r["algorithm"], r["K"], r["seed"])):
        key = (run["algorithm"], run["K"])
        path = os.path.join(run["seed_dir"], "policy_maps.npz")
        if key in seen or not os.path.exists(path):
            continue
        seen.add(key)
        with np.load(path, allow_pickle=False) as data:
            ks = [str(x) for x in data["k"]]
            want = str(run["K"]) if k is None else str(k)
            if want not in ks:
                raise PlotError(f"{path} has no policy map at k={want} (it has k in {ks})")
            actions, p, v = data["actions"][ks.index(want)], data["p"], data["v"]
        label = f"{plotting.algorithm_label(run['algorithm'])}, k={want} (seed {run['seed']})"
        panels.append((label, actions, p, v))
    if not panels:
        raise PlotError(f"No run with policy_maps.npz under: {', '.join(root_dirs)}")
    return plotting.plot_policy_maps(panels, output)


def check_writable(output: str, flag: str = "--output") -> None:
    """Raises `PlotError` when ``output`` cannot be written: not a .png path (the figures are PNG; a run's
    metrics.json would be overwritten), a folder, or under a file."""
    if not output.lower().endswith(".png"):
        raise PlotError(f"{flag} {output!r} must be a .png path (pbo-plot writes PNG figures)")
    folder = os.path.dirname(os.path.abspath(output))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise PlotError(f"cannot write {output!r}: {folder!r} is a file, not a folder")
    if os.path.isdir(output):
        raise PlotError(f"cannot write {output!r}: it is a folder (give a .png path)")


def run(argv: list[str]) -> int:
    """Writes the figures and prints the table. Errors (`PlotError`, a corrupt metrics.json, bad flags) are
    raised and reported in one line by `pbo_tf.cli.common` (exit code 2)."""
    if len(argv) > 1:
        raise PlotError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    try:
        table_ks = None if _TABLE_KS.value is None else [int(k) for k in _TABLE_KS.value]
    except ValueError as error:
        raise PlotError(f"--table_ks must be a comma-separated list of ints: {error}") from error
    log_y = {"auto": None, "true": True, "false": False}[_LOG_Y.value]
    check_writable(_OUTPUT.value)
    if _POLICY_MAPS.value:
        check_writable(_POLICY_MAPS.value, "--policy_maps")
        if os.path.abspath(_POLICY_MAPS.value) == os.path.abspath(_OUTPUT.value):
            raise PlotError(f"--policy_maps and --output are the same file {_OUTPUT.value!r}: give two paths")
    path, table = make_plot(
        _ROOT_DIRS.value,
        _OUTPUT.value,
        metric=_METRIC.value,
        title=_TITLE.value,
        table_ks=table_ks,
        reference=_REFERENCE.value,
        reference_key=_REFERENCE_KEY.value,
        log_y=log_y,
    )
    print(table)
    print(f"Wrote {path}")
    if _POLICY_MAPS.value:
        print(f"Wrote {make_policy_maps(_ROOT_DIRS.value, _POLICY_MAPS.value, _POLICY_K.value)}")
    return 0


def main(argv: list[str] | None = None) -> None:
    """The ``pbo-plot`` console script: parses ``argv`` (default ``sys.argv``), runs, exits."""
    cli.run_main(run, FLAGS, argv, tensorflow=False)


if __name__ == "__main__":
    main()
