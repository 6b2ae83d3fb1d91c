"""Reading run folders and aggregating their learning curves (no TensorFlow).

A *run folder* is complete once it holds ``metrics.json``::

    {"env": "chain_walk", "algorithm": "profqi", "K": 5, "seed": 0,
     "curve": [{"k": 0, "q_error_rms": 1.3}, ..., {"k": "inf", "q_error_rms": 0.2}],
     "reference": {"optimal_q_rms": 4.2}}

``k`` is the number of Bellman iterations (FQI) or PBO applications (ProFQI); the optional ``"inf"`` entry
is the value at the fixed point of the learned operator. Metric values may be ``null`` (no iterate, or a
diverged value); they are treated as missing, like non-finite values. The runner also writes each seed's
``budget`` (its share of the paper's gradient steps) and ``operator_activity``, and a batched run each seed's
entries in ``per_seed`` (`pbo_tf.experiments.runner` describes them); `expand_seeds` gives every seed its
own ``reference`` and ``budget``. A run on a user's dataset names it (``env_label``, ``dataset``): runs are
grouped and titled by `env_label`, so the runs of two files stay apart.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

METRICS_FILENAME = "metrics.json"
#: The gin settings a run writes beside its metrics (gin's operative config).
CONFIG_FILENAME = "config.gin"
FAILURE_FILENAME = "failure.json"
FAILURE_KEYS = ("env", "algorithm", "K", "seeds")
REQUIRED_KEYS = ("env", "algorithm", "K", "seed", "curve")
INF_K = "inf"

#: Metric plotted by default for each environment (or `pbo_tf.cli.report` section: online bicycle shows
#: the discounted return, as the paper's online figure does).
DEFAULT_METRICS = {
    "chain_walk": "q_error_rms",
    "lqr": "param_error_l2",
    "car_on_hill": "J",
    "bicycle": "balancing_time_s",
    "lunar_lander": "discounted_return",
    "bicycle_online": "discounted_return",
}

GroupKey = tuple[str, str, int]

#: Settings that differ between the seeds of one configuration: the seed, how many seeds ran in one
#: process, where the run wrote; `mixed_settings` does not compare them.
PER_SEED_SETTINGS = ("SEED", "NUM_SEEDS")
PER_SEED_SETTING_SUFFIXES = (".seed", ".num_seeds", ".root_dir")
_STATEMENT = re.compile(r"^([A-Za-z_][\w./]*)\s*=(.*)$")

_logger = logging.getLogger(__name__)


def find_runs(root_dir: str) -> list[str]:
    """Lists the complete run folders under a directory.

    The search is recursive and includes ``root_dir`` itself. Folders without ``metrics.json`` are
    ignored; a warning is logged for each topmost folder whose whole subtree holds no ``metrics.json``
    (typically an unfinished run), except inside a complete run folder (checkpoints, logs, ...).

    Args:
        root_dir: Directory to search.

    Returns:
        Sorted paths of the folders that contain ``metrics.json``.

    Raises:
        FileNotFoundError: If ``root_dir`` is not a directory.
    """
    if not os.path.isdir(root_dir):
        raise FileNotFoundError(f"Run directory {root_dir!r} does not exist or is not a directory")
    runs: list[str] = []
    incomplete: list[str] = []
    if not _scan(root_dir, runs, incomplete):
        incomplete.append(root_dir)
    for path in sorted(incomplete):
        if os.path.isfile(os.path.join(path, FAILURE_FILENAME)):
            _logger.warning("Ignoring %s: the run failed (%s)", path, FAILURE_FILENAME)
        else:
            _logger.warning("Ignoring %s: no %s found in it (unfinished run?)", path, METRICS_FILENAME)
    return sorted(runs)


def _scan(path: str, runs: list[str], incomplete: list[str]) -> bool:
    """Recursive helper of `find_runs`; returns whether the subtree of ``path`` holds a run."""
    is_run = os.path.isfile(os.path.join(path, METRICS_FILENAME))
    if is_run:
        runs.append(path)
    try:
        with os.scandir(path) as entries:
            subdirs = sorted(e.path for e in entries if e.is_dir(follow_symlinks=False))
    except OSError as error:  # Unreadable folder: skip it rather than abort the whole search.
        _logger.warning("Cannot list %s: %s", path, error)
        subdirs = []
    children = {subdir: _scan(subdir, runs, incomplete) for subdir in subdirs}
    has_run = is_run or any(children.values())
    if has_run and not is_run:
        incomplete.extend(subdir for subdir, child_has_run in children.items() if not child_has_run)
    return has_run


def load_metrics(run_dir: str) -> dict[str, Any]:
    """Loads and validates the ``metrics.json`` of a run folder.

    Args:
        run_dir: A run folder (or directly the path of its ``metrics.json``).

    Returns:
        The parsed metrics, with ``K`` and ``seed`` as ints and an added ``"run_dir"`` entry.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: If the file is not valid JSON, lacks one of ``env``, ``algorithm``, ``K``, ``seed``,
            ``curve``, or has a malformed curve. The message names the file.
    """
    if os.path.isdir(run_dir):
        path = os.path.join(run_dir, METRICS_FILENAME)
    else:
        path, run_dir = run_dir, os.path.dirname(run_dir)
    try:
        with open(path, encoding="utf-8") as f:
            metrics = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: corrupt JSON ({error})") from error
    if not isinstance(metrics, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(metrics).__name__}")
    missing = [key for key in REQUIRED_KEYS if key not in metrics]
    if missing:
        raise ValueError(f"{path}: missing required key(s) {missing} (required: {list(REQUIRED_KEYS)})")
    for key in ("env", "algorithm"):
        if not isinstance(metrics[key], str):
            raise ValueError(f"{path}: {key!r} must be a string, got {metrics[key]!r}")
    for key in ("K", "seed"):
        value = _as_int(metrics[key])
        if value is None:
            raise ValueError(f"{path}: {key!r} must be an integer, got {metrics[key]!r}")
        metrics[key] = value
    _check_curve(path, "curve", metrics["curve"])
    per_seed = metrics.get("per_seed")
    if per_seed is not None:  # a batched run: each seed's entry is read as a run of its own
        if not isinstance(per_seed, list):
            raise ValueError(f"{path}: 'per_seed' must be a list, got {type(per_seed).__name__}")
        for index, entry in enumerate(per_seed):
            where = f"per_seed[{index}]"
            if not isinstance(entry, dict) or "seed" not in entry or "curve" not in entry:
                has = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
                raise ValueError(f"{path}: {where} must be an object with 'seed' and 'curve' (it has {has})")
            if _as_int(entry["seed"]) is None:
                raise ValueError(f"{path}: {where}['seed'] must be an integer, got {entry['seed']!r}")
            _check_curve(path, f"{where}['curve']", entry["curve"])
    metrics["run_dir"] = run_dir
    metrics["seed_dir"] = run_dir  # where the seed's files are (a batched run: run_dir/seed_<s>)
    return metrics


def _check_curve(path: str, where: str, curve: Any) -> None:
    """Raises ValueError, naming ``path`` and ``where``, unless ``curve`` is a list of objects with an int
    ``k`` >= 0 (or ``'inf'``); makes each ``k`` an int."""
    if not isinstance(curve, list):
        raise ValueError(f"{path}: {where!r} must be a list, got {type(curve).__name__}")
    for index, entry in enumerate(curve):
        if not isinstance(entry, dict) or "k" not in entry:
            raise ValueError(f"{path}: {where}[{index}] must be an object with a 'k' key, got {entry!r}")
        if entry["k"] != INF_K:
            k = _as_int(entry["k"])
            if k is None or k < 0:
                raise ValueError(
                    f"{path}: {where}[{index}]['k'] must be an int >= 0 or 'inf', got {entry['k']!r}"
                )
            entry["k"] = k


def load_runs(root_dirs: str | Iterable[str]) -> list[dict[str, Any]]:
    """Finds and loads every complete run under one or several root directories.

    Args:
        root_dirs: A directory or an iterable of directories.

    Returns:
        The loaded metrics (see `load_metrics`), in the order of ``root_dirs`` then of the sorted paths. A
        folder reached from two roots is loaded once. A batched run folder (``per_seed`` in its
        metrics.json, written by ``Experiment.num_seeds > 1``) gives one record per seed.
    """
    return [record for run_dir in run_folders(root_dirs) for record in expand_seeds(load_metrics(run_dir))]


def run_folders(root_dirs: str | Iterable[str]) -> list[str]:
    """The complete run folders (`find_runs`) under one or several root directories, in the order of
    ``root_dirs`` then of the sorted paths; a folder reached from two roots is listed once."""
    if isinstance(root_dirs, str):
        root_dirs = [root_dirs]
    seen: set[str] = set()
    out = []
    for root_dir in root_dirs:
        for run_dir in find_runs(root_dir):
            real = os.path.realpath(run_dir)
            if real not in seen:
                seen.add(real)
                out.append(run_dir)
    return out


def load_failures(root_dirs: str | Iterable[str]) -> list[dict[str, Any]]:
    """The failed runs under one or several root directories: every ``failure.json`` (written by a run that
    diverged, in place of ``metrics.json``) that names its run (``env``, ``setting``, ``algorithm``, ``K``,
    ``seeds``), with ``run_dir`` added. A ``failure.json`` without those keys, or unreadable, is skipped with
    a warning naming it.
    """
    if isinstance(root_dirs, str):
        root_dirs = [root_dirs]
    seen: set[str] = set()
    failures = []
    for root_dir in root_dirs:
        for folder, _, files in sorted(os.walk(root_dir)):
            real = os.path.realpath(folder)
            if FAILURE_FILENAME not in files or real in seen:
                continue
            seen.add(real)
            path = os.path.join(folder, FAILURE_FILENAME)
            try:
                with open(path, encoding="utf-8") as f:
                    record = json.load(f)
            except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
                _logger.warning("Ignoring %s: unreadable (%s)", path, error)
                continue
            if not isinstance(record, dict) or any(key not in record for key in FAILURE_KEYS):
                _logger.warning("Ignoring %s: it does not name its run (%s)", path, ", ".join(FAILURE_KEYS))
                continue
            seeds, K = record["seeds"], _as_int(record["K"])
            if K is None or not isinstance(seeds, list) or any(_as_int(s) is None for s in seeds):
                _logger.warning("Ignoring %s: malformed K or seeds", path)
                continue
            failures.append({**record, "K": K, "seeds": [int(s) for s in seeds], "run_dir": folder})
    return failures


def seed_folder_name(seed: int | str) -> str:
    """``seed_<s>``: the folder of seed ``s`` in a batched run, and of each seed in a sweep."""
    return f"seed_{seed}"


def seed_of_folder_name(name: str) -> int | None:
    """``s`` for a folder named `seed_folder_name` (``seed_<s>``), None for any other name."""
    prefix = seed_folder_name("")
    number = name[len(prefix) :]
    return int(number) if name.startswith(prefix) and number.isascii() and number.isdigit() else None


def expand_seeds(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per seed: ``[metrics]`` for a single-seed run, the ``per_seed`` entries of a batched one."""
    per_seed = metrics.get("per_seed")
    if not per_seed:
        return [metrics]
    common = {k: v for k, v in metrics.items() if k not in ("per_seed", "curve", "curve_ci95", "seeds")}
    out = []
    for entry in per_seed:
        record = dict(common)
        record.update(entry)
        record["seed"] = _as_int(entry.get("seed"))
        record["seed_dir"] = os.path.join(metrics["run_dir"], seed_folder_name(record["seed"]))
        for point in record["curve"]:
            if point["k"] != INF_K:
                point["k"] = _as_int(point["k"])
        out.append(record)
    return out


def metric_keys(runs: Sequence[dict[str, Any]]) -> list[str]:
    """Names of the numeric metrics found in the curves, in order of first appearance.

    Args:
        runs: Loaded metrics (see `load_metrics`).

    Returns:
        Every key other than ``k`` that has at least one numeric (non-null, non-boolean) value.
    """
    keys: dict[str, None] = {}
    for run in runs:
        for entry in run["curve"]:
            for key, value in entry.items():
                if key != "k" and _is_number(value):
                    keys.setdefault(key)
    return list(keys)


def default_metric(env: str, runs: Sequence[dict[str, Any]] = ()) -> str | None:
    """Metric plotted by default for an environment.

    Args:
        env: Environment name, e.g. ``"chain_walk"``.
        runs: Loaded metrics, used for environments without a registered default.

    Returns:
        ``DEFAULT_METRICS[env]`` if registered, else the ``main_metric`` the runs record (online runs do)
        when they all record the same one and their curves hold it, else the first numeric metric of
        ``runs`` (None if none).
    """
    if env in DEFAULT_METRICS:
        return DEFAULT_METRICS[env]
    keys = metric_keys(runs)
    recorded = {run.get("main_metric") for run in runs}
    if len(recorded) == 1 and (main := recorded.pop()) in keys:
        return main
    return keys[0] if keys else None


def env_label(run: dict[str, Any]) -> str:
    """The environment of a run as tables and titles name it and as runs are grouped: its ``env_label``
    where ``metrics.json`` records one (a user's dataset: ``"dataset acrobot_20k.npz (Acrobot-v1)"``,
    `pbo_tf.envs.base.Problem.run_fields`), else its ``env``."""
    label = run.get("env_label")
    return label if isinstance(label, str) and label else run["env"]


def data_digest(run: dict[str, Any]) -> str | None:
    """The digest of the transitions of a run on a user's dataset (``metrics.json["dataset"]["sha256"]``),
    None for other runs: two files of the same name in other folders are told apart by it."""
    dataset = run.get("dataset")
    digest = dataset.get("sha256") if isinstance(dataset, dict) else None
    return digest if isinstance(digest, str) else None


def group_members(group: dict[str, Any], runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of ``runs`` that make up ``group`` (a value of `group_curves`): its env, K and (run folder,
    seed) rows; its algorithm name where the runs record no folder."""
    rows = {(d, s) for d, s in zip(group["run_dirs"], group["seeds"], strict=True) if d is not None}
    return [
        r
        for r in runs
        if env_label(r) == group["env"]
        and int(r["K"]) == group["K"]
        and ((r.get("run_dir"), r["seed"]) in rows if rows else r["algorithm"] == group["algorithm"])
    ]


def config_settings(run_dir: str) -> dict[str, str] | None:
    """The settings of a run folder's ``config.gin`` (the operative config the run wrote): ``{name: value}``
    for each macro and binding, the value's text with its whitespace collapsed; None where the folder has
    no readable ``config.gin``."""
    try:
        with open(os.path.join(run_dir, CONFIG_FILENAME), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    settings: dict[str, list[str]] = {}
    current = None
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or line.startswith(("import ", "from ")):
            current = None if not stripped else current
            continue
        match = _STATEMENT.match(line)
        if match and not line[0].isspace():
            current = match.group(1)
            settings[current] = [match.group(2)]
        elif current is not None:  # a value written over several lines
            settings[current].append(line)
    return {name: " ".join(" ".join(parts).replace("\\", " ").split()) for name, parts in settings.items()}


def mixed_settings(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[int]]]:
    """The settings on which runs grouped as seeds of one configuration disagree: ``{setting: {value:
    [seeds]}}`` over the settings every read ``config.gin`` of ``runs`` holds (an option a run's version
    did not have yet is not a difference), less the per-seed ones (`PER_SEED_SETTINGS`,
    `PER_SEED_SETTING_SUFFIXES`). Runs without a ``config.gin`` are left out."""
    read: dict[str, dict[str, str] | None] = {}
    by_run = []
    for run in runs:
        folder = run.get("run_dir")
        if folder is None:
            continue
        if folder not in read:
            read[folder] = config_settings(folder)
        if read[folder] is not None:
            by_run.append((run["seed"], read[folder]))
    if len(by_run) < 2:
        return {}
    shared = set.intersection(*(set(settings) for _, settings in by_run))
    out = {}
    for name in sorted(shared):
        if name in PER_SEED_SETTINGS or name.endswith(PER_SEED_SETTING_SUFFIXES):
            continue
        values: dict[str, list[int]] = {}
        for seed, settings in by_run:
            values.setdefault(settings[name], []).append(seed)
        if len(values) > 1:
            out[name] = {value: sorted(seeds) for value, seeds in values.items()}
    return out


def _warn_mixed_settings(key: GroupKey, members: Sequence[dict[str, Any]], shown: int = 3) -> None:
    """One warning line where the runs grouped under ``key`` ran different settings (`mixed_settings`)."""
    mixed = mixed_settings(members)
    if not mixed:
        return
    described = []
    for name, values in list(mixed.items())[:shown]:
        by_value = (
            f"{value} (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})"
            for value, seeds in values.items()
        )
        described.append(f"{name} = {' / '.join(by_value)}")
    more = f"; and {len(mixed) - shown} more" if len(mixed) > shown else ""
    _logger.warning(
        "The runs of %s, %s, K = %d share a label, so they are grouped as seeds of one configuration, "
        "but differ in their settings: %s%s. Bind the label (Experiment.label, OnlineExperiment.label) "
        "to tell them apart.",
        *key,
        "; ".join(described),
        more,
    )


def _percent(fraction) -> str:
    """A budget fraction as a short percentage (``0.05 → "5%"``; None → ``"unknown budget"``)."""
    return "unknown budget" if fraction is None else f"{100 * fraction:.3g}%"


def group_curves(runs: Sequence[dict[str, Any]], metric: str) -> dict[GroupKey, dict[str, Any]]:
    """Groups runs by ``(env, algorithm, K)`` (the env as `env_label` names it) and stacks one metric over
    seeds.

    Args:
        runs: Loaded metrics (see `load_metrics`).
        metric: Name of the metric to extract from the curve entries.

    Returns:
        A dict sorted by key ``(env, algorithm, K)``. Each value holds:

        * ``env``, ``algorithm``, ``K``: the key fields;
        * ``ks``: sorted int array of the ks where at least one seed has a value;
        * ``seeds``: sorted list of seeds (one row each);
        * ``values``: float array ``[n_seeds, len(ks)]``, NaN where missing or null;
        * ``inf``: float array ``[n_seeds]`` of the fixed-point (``"k": "inf"``) values, NaN where missing;
        * ``run_dirs``: the run folder of each row;
        * ``budget_fractions``: each row's ``budget["fraction"]`` (share of the paper's gradient steps), None
          where the run does not record it.

        Groups without any value of ``metric`` are left out. Runs of one ``(env, algorithm, K)`` at
        different budgets form one group per budget, named ``"<algorithm> @ <budget>%"``.

    Raises:
        ValueError: If no run has ``metric`` (the message lists the metrics that exist), or if a seed
            appears twice in one group.
    """
    by_key: dict[GroupKey, list[dict[str, Any]]] = {}
    for run in runs:
        by_key.setdefault((env_label(run), run["algorithm"], int(run["K"])), []).append(run)
    # One configuration at several budgets (a sweep's --grid over REFRESHES): one group per budget, the
    # budget in its algorithm name ("profqi @ 20%"), instead of a seed that appears twice.
    for key in list(by_key):
        fractions = {_budget_fraction(run) for run in by_key[key]}
        if len(fractions) > 1:
            for run in by_key.pop(key):
                name = f"{key[1]} @ {_percent(_budget_fraction(run))}"
                by_key.setdefault((key[0], name, key[2]), []).append(run)

    groups: dict[GroupKey, dict[str, Any]] = {}
    for key in sorted(by_key):
        members = sorted(by_key[key], key=lambda run: run["seed"])
        for previous, current in zip(members, members[1:], strict=False):
            if previous["seed"] == current["seed"]:
                raise ValueError(
                    f"Seed {current['seed']} appears twice for env={key[0]}, algorithm={key[1]}, K={key[2]}: "
                    f"{previous.get('run_dir')} and {current.get('run_dir')}"
                )
        _warn_mixed_settings(key, members)
        per_seed: list[dict[int, float]] = []
        inf_values = []
        for run in members:
            curve_values: dict[int, float] = {}
            inf_value = math.nan
            for entry in run["curve"]:
                value = entry.get(metric)
                if not _is_number(value):
                    continue
                if entry["k"] == INF_K:
                    inf_value = float(value)
                else:
                    curve_values[int(entry["k"])] = float(value)
            per_seed.append(curve_values)
            inf_values.append(inf_value)
        ks = sorted({k for curve_values in per_seed for k in curve_values})
        inf_array = np.asarray(inf_values, dtype=np.float64)
        if not ks and np.all(np.isnan(inf_array)):
            continue
        values = np.full((len(members), len(ks)), np.nan)
        column = {k: j for j, k in enumerate(ks)}
        for i, curve_values in enumerate(per_seed):
            for k, value in curve_values.items():
                values[i, column[k]] = value
        groups[key] = {
            "env": key[0],
            "algorithm": key[1],
            "K": key[2],
            "ks": np.asarray(ks, dtype=np.int64),
            "seeds": [run["seed"] for run in members],
            "values": values,
            "inf": inf_array,
            "run_dirs": [run.get("run_dir") for run in members],
            "budget_fractions": [_budget_fraction(run) for run in members],
        }
    if runs and not groups:
        raise ValueError(f"Unknown metric {metric!r}; metrics found in the runs: {metric_keys(runs)}")
    return groups


def _budget_fraction(run: dict[str, Any]) -> float | None:
    budget = run.get("budget")
    if isinstance(budget, dict) and _is_number(budget.get("fraction")):
        return float(budget["fraction"])
    return None


def reference_by_seed(runs: Sequence[dict[str, Any]], key: str) -> dict[int, float]:
    """``run["reference"][key]`` (e.g. the optimal J) of each seed, sorted by seed.

    A reference can depend on the seed's dataset (car-on-hill's J weights cells by its counts), so each
    record of `load_runs` carries its own seed's. Runs of several algorithms with the same seed share
    one dataset: their values are averaged, so each seed counts once.
    """
    by_seed: dict[int, list[float]] = {}
    for run in runs:
        reference = run.get("reference")
        if isinstance(reference, dict) and _is_number(reference.get(key)):
            by_seed.setdefault(int(run["seed"]), []).append(float(reference[key]))
    return {seed: float(np.mean(by_seed[seed])) for seed in sorted(by_seed)}


def reference_value(runs: Sequence[dict[str, Any]], key: str) -> float | None:
    """Mean over seeds of the per-seed reference ``key`` (`reference_by_seed`), or None if no run has it."""
    values = list(reference_by_seed(runs, key).values())
    return float(np.mean(values)) if values else None


def _is_number(value: Any) -> bool:
    """Whether ``value`` is a finite real number (booleans, None, NaN and +-inf count as missing)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return False
    return math.isfinite(float(value))


def _as_int(value: Any) -> int | None:
    """``value`` as an int if it is an integer (or an integral float), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
