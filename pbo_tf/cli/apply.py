r"""Applies a finished run's trained operator for more iterations, without new samples.

Usage::

    pbo-apply --run_dir=runs/cw/profqi --k_max=50
    pbo-apply --run_dir=runs/cw/profqi --seed=3 --k_max=50 --omega0=starts.npz --output=applied.json
    pbo-apply --run_dir=runs/cw/profqi --k_max=20 --export=exported/cw --export_k=20

(or ``python launch/apply.py ...`` in a checkout).

A trained PBO ``Λ`` maps Q parameters to Q parameters, so once trained it applies any number of times. This
program reads the folder of a ProFQI, ProDQN or oracle run (`pbo_tf.experiments.reader.RunReader`: its
seeds, operator, dataset and config) of any registered environment, pbo_tf's own or another package's
(`pbo_tf.envs.registry`; ``--import=module`` for a package without an entry point), computes ``Λ^k(ω_0)``
for k = 0..``--k_max`` from the run's own ω_0 (or from the vectors of ``--omega0``, an ``.npz`` whose
``params`` is ``[n, d]`` or ``[d]``) and evaluates every ``Q_{Λ^k(ω_0)}`` with the environment's protocol:
an offline run's on its saved dataset (`Experiment.evaluate_curve`), an online (ProDQN) run's by greedy
episodes in its environment from the evaluation seed of its own curve; it is the code that wrote the run's
curve, so up to the run's K + extra iterations the numbers are the run's own. It writes the curve, entries
k = 0..k_max with the keys of the run's curve, to ``--output`` (default ``<seed dir>/applied_k<N>.json``,
``applied_k<N>_<npz name>.json`` with ``--omega0``) and prints a table of the env's main metric. With
several ``--omega0`` vectors ``curve`` is their mean, ``curve_ci95`` its 95% Student-t half width and
``per_omega0`` holds each vector's curve.

``--export=DIR`` also writes (`pbo_tf.experiments.export`), loadable with TensorFlow alone (no pbo_tf):

* ``DIR/operator``: a SavedModel with ``apply(omega [n, d], k) -> Λ^k(omega)``,
  ``iterate(omega, k) -> [k + 1, n, d]`` (int32 ``k``) and the variable ``omega0`` (the run's ω_0);
* ``DIR/policy``: the greedy policy of ``Q_{Λ^k(ω_0)}`` at ``k = --export_k`` (default the run's K; from
  the first ``--omega0`` vector), a TF-Agents `PolicySaver` SavedModel (``pbo-play --env=<its id>`` plays
  it), for the problem's gymnasium environment (`Problem.env_id`, made with `Problem.gym_kwargs`) when its
  actions are discrete and its observations are the problem's states (chain-walk, car-on-hill, bicycle),
  or an online run's training environment when its actions are discrete; otherwise the program says which
  of these fails and exports the operator only;
* ``DIR/export.json``: what was exported, from which run.

Errors are one line on stderr with exit code 2 (`pbo_tf.cli.common`): no such folder, an unfinished run,
one without an operator (FQI, DQN, i-FQI, i-DQN), a seed the run did not train, ``--k_max < 0``, an
unreadable ``--omega0`` or one of the wrong size, an environment no registered package provides.
Everything is checked before anything is
written, and files are replaced atomically.
"""

from __future__ import annotations

import os

from absl import flags

import pbo_tf  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from pbo_tf.cli import common as cli
from pbo_tf.experiments import run_folder
from pbo_tf.experiments.reader import RunError, RunReader
from pbo_tf.io import write_json_atomic

FLAGS = flags.FlagValues()

_RUN_DIR = flags.DEFINE_string(
    "run_dir",
    None,
    "A finished ProFQI, ProDQN or oracle run folder (with metrics.json), or seed_<s>/ of a batched one.",
    flag_values=FLAGS,
)
_SEED = flags.DEFINE_integer(
    "seed", None, "Which seed of a batched run (default: its first seed).", flag_values=FLAGS
)
_K_MAX = flags.DEFINE_integer("k_max", None, "Apply the operator k = 0..k_max times.", flag_values=FLAGS)
_OMEGA0 = flags.DEFINE_string(
    "omega0",
    None,
    "An .npz whose 'params' ([n, d] or [d]) are the starting vectors (default: the run's ω_0).",
    flag_values=FLAGS,
)
_OUTPUT = flags.DEFINE_string(
    "output", None, "JSON file of the curve (default: <seed dir>/applied_k<k_max>.json).", flag_values=FLAGS
)
_EXPORT = flags.DEFINE_string(
    "export",
    None,
    "Also export the operator (DIR/operator) and, for discrete actions, the greedy policy at --export_k "
    "(DIR/policy) as SavedModels.",
    flag_values=FLAGS,
)
_EXPORT_K = flags.DEFINE_integer(
    "export_k", None, "k of the exported policy (default: the run's K).", flag_values=FLAGS
)
cli.define_common_flags(FLAGS)
flags.mark_flags_as_required(["run_dir", "k_max"], flag_values=FLAGS)

#: Rows of the printed table when k_max is larger than this (besides K and K + extra iterations).
_TABLE_ROWS = 20


class ApplyError(ValueError):
    """A user-facing error (no such run, unfinished run, bad seed, k or starting vectors, ...)."""


# ------------------------------------------------------------------------------------------- checks
def check_run(run_dir: str, seed: int | None) -> tuple[RunReader, int]:
    """Checks that ``run_dir`` is a finished run of a registered environment that trained ``seed``.

    Returns:
      ``(the run's reader, seed)``; ``seed`` None becomes the run's first seed (the folder's seed where
      ``run_dir`` is one seed's folder of a batched run).

    Raises:
      ApplyError: no such folder, an unfinished (or diverged) run, an environment without the run's
        setting, or another seed.
      ValueError: a corrupt ``metrics.json`` (the message names the file).
    """
    from pbo_tf.envs import registry

    try:
        reader = RunReader(run_dir)
    except RunError as e:
        raise ApplyError(f"--run_dir {e}") from e
    online = reader.setting == "online"
    env = reader.env
    if online and env.startswith("gym_") and env not in registry.names():
        env = "gym"  # the generic gymnasium env's runs record gym_<id> (pbo_tf.envs.gym.online.env_name)
    if env not in registry.names():
        raise ApplyError(
            f"--run_dir {run_dir!r} is a run of the environment {env!r}, which no registered package "
            f"provides: install the package that registers it (its {registry.ENTRY_POINT_GROUP!r} entry "
            "point) or pass --import=<the module that registers it>"
        )
    if not online and env not in registry.names("problem"):
        raise ApplyError(f"--run_dir {run_dir!r} is a {env} run, an environment without an offline problem")
    if online and env not in registry.names("online"):
        raise ApplyError(f"--run_dir {run_dir!r} is an online {env} run, an environment without online spec")
    if seed is not None and reader.default_seed not in (None, int(seed)):
        raise ApplyError(f"--seed={seed}: {run_dir!r} is the folder of seed {reader.default_seed}")
    seed = reader.seed() if seed is None else int(seed)
    if seed not in reader.seeds:
        raise ApplyError(f"--seed={seed}: {run_dir!r} trained the seeds {reader.seeds}")
    return reader, seed


def load_starts(path: str, d: int):
    """The starting vectors ``[n, d]`` (float32) of ``path``'s ``params`` (``[n, d]`` or ``[d]``).

    Raises:
      ApplyError: the file cannot be read, has no ``params``, or holds vectors of another size, none, or
        non-finite ones.
    """
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            if "params" not in data.files:
                raise ApplyError(f"--omega0 {path!r} has no 'params' array (it has {sorted(data.files)})")
            params = np.asarray(data["params"])
    except ApplyError:
        raise
    except Exception as e:  # missing, truncated, not a zip, pickled objects, ...
        raise ApplyError(f"--omega0 {path!r} is not a readable .npz: {cli.one_line(str(e))}") from e
    if params.ndim == 1:
        params = params[None]
    if params.ndim != 2 or params.shape[1] != d or not np.issubdtype(params.dtype, np.number):
        raise ApplyError(
            f"--omega0 {path!r}: 'params' must be [n, {d}] or [{d}] numbers (the run's Q family has d={d}), "
            f"got {params.dtype} {list(params.shape)}"
        )
    if len(params) == 0 or not np.all(np.isfinite(params)):
        raise ApplyError(f"--omega0 {path!r}: 'params' must hold at least one vector, all finite")
    return params.astype(np.float32)


def check_writable(path: str, what: str, folder: bool = False) -> None:
    """Raises `ApplyError` when ``path`` (a file, or a folder when ``folder``) cannot be written there."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ApplyError(f"cannot write {what} {path!r}: {parent!r} is a file, not a folder")
    if folder and os.path.exists(path) and not os.path.isdir(path):
        raise ApplyError(f"cannot write {what} {path!r}: it is a file, not a folder")
    if not folder and os.path.isdir(path):
        raise ApplyError(f"cannot write {what} {path!r}: it is a folder (give a .json path)")
    if not folder and os.path.basename(path) in run_folder.RUN_FILES:
        raise ApplyError(
            f"cannot write {what} {path!r}: {os.path.basename(path)} is a run's own file (the readers would "
            "take this curve for a run's, or the run would lose its own): give another name"
        )
    held = run_folder.run_files_in(path) if folder and os.path.isdir(path) else []
    if held:
        raise ApplyError(
            f"cannot write {what} {path!r}: it is a run folder (it holds {', '.join(held)}), whose operator/ "
            "and policy/ an export would replace: give another folder"
        )


# ------------------------------------------------------------------------------------------ applying
def applied_curves(experiment, pbo, starts, k_max: int, data) -> tuple[list[list[dict]], object]:
    """The curve (k = 0..k_max) of each starting vector, and the iterates ``[k_max + 1, n, d]``.

    Each starting vector is iterated and evaluated on its own, its k_max + 1 points in one call, so that its
    curve does not depend on the other vectors of the file (float32 matmuls round differently with the
    batch's shape on some CPUs): offline by `Experiment.evaluate_curve` on ``data``, the run's dataset;
    online (``data`` None) by the run's environment, greedy episodes from the evaluation seed of the run's
    own curve (`pbo_tf.envs.base.OnlineEnv.evaluate`)."""
    import numpy as np
    import tensorflow as tf

    def evaluate(chain):
        if data is None:
            return experiment.env.evaluate(experiment.q_family(), chain, experiment.n_eval_episodes)
        return experiment.evaluate_curve(chain, data)

    curves, iterates = [], []
    for start in starts:
        chain = pbo.iterate(tf.constant(start[None]), k_max).numpy()  # [k_max + 1, 1, d]
        curve = [dict(entry) for entry in evaluate(chain[:, 0])]
        for k, entry in enumerate(curve):
            entry["k"] = k
        curves.append(curve)
        iterates.append(chain)
    return curves, np.concatenate(iterates, axis=1)


def table(curves_key: str, curve: list[dict], run_curve: list[dict] | None, marks: dict[int, str]) -> str:
    """The printed table: k and ``curves_key`` (and the run's own value where it has one)."""
    k_max = len(curve) - 1
    if k_max <= _TABLE_ROWS:
        ks = list(range(k_max + 1))
    else:
        step = k_max / (_TABLE_ROWS // 2)
        ks = sorted({round(i * step) for i in range(_TABLE_ROWS // 2 + 1)} | {k for k in marks if k <= k_max})
    run_values = {e["k"]: e.get(curves_key) for e in run_curve or [] if isinstance(e["k"], int)}
    header = f"{'k':>6}  {curves_key:>16}" + (f"  {'run':>16}" if run_curve is not None else "")
    lines = [header]

    def fmt(value):
        return f"{value:16.6g}" if isinstance(value, (int, float)) else f"{'-':>16}"

    for k in ks:
        row = f"{k:>6}  {fmt(curve[k].get(curves_key))}"
        if run_curve is not None:
            row += f"  {fmt(run_values.get(k))}"
        lines.append(row + (f"  {marks[k]}" if k in marks else ""))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ run
def run(argv: list[str]) -> int:
    """Applies, evaluates, writes the curve (and the export) and prints the table. Errors are raised and
    reported in one line by `pbo_tf.cli.common` (exit code 2)."""
    if len(argv) > 1:
        raise ApplyError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    k_max = _K_MAX.value
    if k_max < 0:
        raise ApplyError(f"--k_max must be >= 0, got {k_max}")
    if _EXPORT_K.value is not None and _EXPORT.value is None:
        raise ApplyError("--export_k needs --export=DIR")
    if _EXPORT_K.value is not None and _EXPORT_K.value < 0:
        raise ApplyError(f"--export_k must be >= 0, got {_EXPORT_K.value}")
    run_dir = _RUN_DIR.value
    reader, seed = check_run(run_dir, _SEED.value)
    metrics, run_curve = reader.metrics, reader.curve(seed)

    from pbo_tf.evaluation.stats import aggregate_curves
    from pbo_tf.experiments import export

    try:
        pbo, q_family, omega0 = reader.operator(seed)
    except FileNotFoundError as e:
        raise ApplyError(
            f"{e}; only ProFQI, ProDQN and oracle runs have an operator to apply (FQI and DQN runs have "
            "none, and an i-FQI or i-DQN run's curve is its K + 1 heads: it has no iterate past K)"
        ) from e
    experiment = reader.experiment()
    online = reader.setting == "online"
    source = experiment.env if online else experiment.problem  # main_metric, env_id
    seed_dir = reader.seed_dir(seed)
    starts = omega0[None] if _OMEGA0.value is None else load_starts(_OMEGA0.value, q_family.d)
    output = _OUTPUT.value
    if output is None:
        stem = "" if _OMEGA0.value is None else "_" + os.path.splitext(os.path.basename(_OMEGA0.value))[0]
        output = os.path.join(seed_dir, f"applied_k{k_max}{stem}.json")
    check_writable(output, "--output")
    specs, no_policy = None, None
    if _EXPORT.value is not None:
        check_writable(_EXPORT.value, "--export", folder=True)
        try:
            if online:
                specs, no_policy = export.online_policy_specs(experiment.env, seed)
            else:
                specs, no_policy = export.policy_specs(experiment.problem)
        except export.ExportError as e:
            raise ApplyError(f"--export: {e}") from e
    data = None if online else reader.dataset(seed)

    curves, _ = applied_curves(experiment, pbo, starts, k_max, data)
    out = {
        "env": metrics["env"],
        "algorithm": metrics["algorithm"],
        "K": metrics["K"],
        "seed": seed,
        "run_dir": os.path.abspath(run_dir),
        "k_max": k_max,
        "omega0": "run" if _OMEGA0.value is None else os.path.abspath(_OMEGA0.value),
    }
    if len(curves) == 1:
        out["curve"] = curves[0]
    else:
        out["curve"], out["curve_ci95"] = aggregate_curves(curves)
        out["per_omega0"] = [{"index": i, "curve": c} for i, c in enumerate(curves)]
    write_json_atomic(output, out)

    K, extra = int(metrics["K"]), experiment.schedule.extra_iterations
    marks = {K: "(K)", K + extra: "(K + extra: the run's last)"} if extra else {K: "(K)"}
    what = "" if len(curves) == 1 else f" (mean over {len(curves)} starting vectors)"
    print(f"{metrics['env']} / {metrics['algorithm']}, seed {seed}: Λ^k(ω_0) for k = 0..{k_max}{what}")
    main_metric = source.main_metric
    print(table(main_metric, out["curve"], run_curve if _OMEGA0.value is None else None, marks))
    print(f"Wrote {output}")
    if _EXPORT.value is not None:
        export_k = K if _EXPORT_K.value is None else _EXPORT_K.value
        info = {key: out[key] for key in ("env", "algorithm", "K", "seed", "run_dir", "omega0")}
        info["d"] = q_family.d
        written = export.export_trained(_EXPORT.value, specs, pbo, q_family, starts[0], export_k, info)
        print(f"Wrote {written['operator']} (apply(omega, k), iterate(omega, k))")
        if written["policy"]:
            env_id = source.env_id
            print(f"Wrote {written['policy']} (the greedy policy at k={export_k}; pbo-play --env={env_id})")
        else:
            print(f"No policy exported: {no_policy}")
    return 0


def main(argv: list[str] | None = None) -> None:
    """The ``pbo-apply`` console script: parses ``argv`` (default ``sys.argv``), runs, exits."""
    cli.run_main(run, FLAGS, argv)


if __name__ == "__main__":
    main()
