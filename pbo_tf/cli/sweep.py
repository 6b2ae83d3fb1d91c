r"""Launches a grid of runs (gin files × K × grid bindings × seeds) as subprocesses of `pbo_tf.cli.train`, on
this machine or on a Ray cluster, skipping finished ones.

  pbo-sweep --root_dir=runs/chain_walk_k5 --seeds=0,1,2 --parallel=2 \
      --gin_file=gin_configs/chain_walk/fqi.gin --gin_file=gin_configs/chain_walk/profqi.gin \
      --gin_bindings='K=5'
  pbo-sweep --root_dir=runs/chain_walk --seeds=0,1,2 --ks=2,5,15 --grid=REFRESHES=10,20 \
      --gin_file=chain_walk/fqi.gin --gin_file=chain_walk/profqi.gin --engine=ray --ray_address=auto

(or ``python launch/sweep.py ...`` in a checkout; gin files as for ``pbo-train``: paths or names under the
shipped configs). Every point of the cross product of ``--gin_file``\ s, ``--ks`` (each binds ``K=``),
``--grid=NAME=v1,v2`` (each binds ``NAME=``; repeatable) and ``--seeds`` is one run, in
``ROOT/<env>/k<K>/<gin file name>/<NAME>_<v>/.../seed_<s>``; without ``--ks`` the ``k<K>`` level is left
out, and without ``--grid`` the ``<NAME>_<v>`` levels, so that a plain sweep keeps the layout
``ROOT/<env>/<gin file name>/seed_<s>``. A folder with metrics.json is complete and is not launched again,
so re-running the same command after an interruption finishes only what is missing (unfinished runs resume
from their checkpoints). Logs go to ``<run folder>/log.txt``.

Before launching anything, every point's config is parsed and built here, and every existing folder is
checked against it (`pbo_tf.experiments.run_folder`): a folder that holds another experiment (another
config fingerprint, complete or not) stops the sweep with one line naming it (exit code 2), unless
``--overwrite`` moves such folders aside to ``<folder>.old-<time>``. A bad file, binding or value stops the
sweep the same way when every point has it; when only some points have it (a bad ``--grid`` or ``--ks``
value), those points fail and the others run.

Engines (``--engine``): ``local`` runs ``--parallel`` points at a time on this machine; ``ray`` makes each
point a Ray task (``--cpus_per_run``, ``--gpus_per_run``) that runs the same training subprocess, on a local
Ray instance of ``--parallel`` × ``--cpus_per_run`` CPUs, or on the cluster of ``--ray_address``
(``auto``, or ``host:port``; run folders and the Python environment must then be at the same paths on every
machine). Ray is an optional dependency: ``pip install -e .[sweep]``.

A point that fails does not stop the others. ``ROOT/sweep_status.json`` records every point of the last
sweep (by its folder relative to ROOT; the points of earlier sweeps into ROOT that this one does not run stay
under ``earlier``): ``skipped`` (complete), ``pending``, ``running``, ``done`` or
``failed`` with its exit code, the last error line of its log and its wall time. The sweep prints a
progress line every ``--progress_every_s`` (done, running, failed, left, and an ETA from the finished
points' mean wall time) and under it one line per running point (its latest progress line, with a count
``i/N``, read from its log.txt, and its own ETA), lists the failed points at the end and then exits 1.

``--batch_seeds`` trains all the (consecutive) seeds of a point in one process and one compiled graph
(``NUM_SEEDS``; online files: one compiled training step for all the seeds,
`pbo_tf.experiments.online_seeds`), in ``.../seeds_<first>-<last>``; its metrics.json holds every seed's
curve and ``pbo-plot`` reads it as one run per seed.

``--import=module`` (repeatable) is imported here and passed on to every training run (the environments of
a package without a ``pbo_tf.envs`` entry point: `pbo_tf.envs.registry`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

from absl import flags

import pbo_tf  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from pbo_tf.analysis import results
from pbo_tf.cli import common as cli

STATUS_FILE = "sweep_status.json"
RAY_INSTALL = "pip install -e .[sweep]"
#: Environment variables passed on to every training subprocess (a Ray worker need not have them).
_PASSED_ENV = ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL", cli.VERBOSE_ENV)
_BINDING_NAME = re.compile(r"^[A-Za-z_][\w./]*$")

FLAGS = flags.FlagValues()
flags.DEFINE_string("root_dir", None, "Folder that receives one run folder per point.", flag_values=FLAGS)
flags.DEFINE_multi_string("gin_file", None, "Gin files to sweep.", flag_values=FLAGS)
flags.DEFINE_list("seeds", ["0"], "Seeds (comma separated).", flag_values=FLAGS)
flags.DEFINE_list(
    "ks",
    [],
    "Values of K (comma separated), each binding K= in its own k<K> folder level.",
    flag_values=FLAGS,
)
flags.DEFINE_multi_string(
    "grid",
    [],
    "NAME=v1,v2,...: a binding swept over its values, in <NAME>_<v> folder levels (repeatable: the cross "
    "product).",
    flag_values=FLAGS,
)
flags.DEFINE_multi_string("gin_bindings", [], "Bindings applied to every run.", flag_values=FLAGS)
flags.DEFINE_enum("engine", "local", ["local", "ray"], "Where the points run.", flag_values=FLAGS)
flags.DEFINE_string(
    "ray_address",
    None,
    "With --engine=ray: the cluster to join (auto, or host:port); unset: start a local Ray instance.",
    flag_values=FLAGS,
)
flags.DEFINE_float("cpus_per_run", 1.0, "With --engine=ray: CPUs each point reserves.", flag_values=FLAGS)
flags.DEFINE_float("gpus_per_run", 0.0, "With --engine=ray: GPUs each point reserves.", flag_values=FLAGS)
flags.DEFINE_integer(
    "parallel",
    1,
    "Points at a time (with --engine=ray and no --ray_address: the local Ray instance has "
    "parallel × cpus_per_run CPUs).",
    flag_values=FLAGS,
)
flags.DEFINE_float("progress_every_s", 10.0, "Seconds between progress lines.", flag_values=FLAGS)
flags.DEFINE_boolean(
    "batch_seeds", False, "One process per point training all seeds in one graph.", flag_values=FLAGS
)
flags.DEFINE_integer(
    "intra_op_threads",
    0,
    "Passed to each training run (0 = all cores; with --parallel=N, cores/N is sensible).",
    flag_values=FLAGS,
)
flags.DEFINE_boolean(
    "deterministic",
    False,
    "Passed to each training run: deterministic TensorFlow ops (pbo-train --deterministic).",
    flag_values=FLAGS,
)
flags.DEFINE_boolean(
    "overwrite",
    False,
    "Run folders that hold another experiment are moved aside to <folder>.old-<time> (never deleted).",
    flag_values=FLAGS,
)
cli.define_common_flags(FLAGS)
flags.mark_flags_as_required(["root_dir", "gin_file"], flag_values=FLAGS)


@dataclasses.dataclass(frozen=True)
class Point:
    """One run of the grid; ``key`` is its folder relative to the root (its name in the status file)."""

    key: str
    folder: str
    gin_file: str
    bindings: tuple[str, ...]


def train_command() -> list[str]:
    """The command that trains one run, with the same pbo_tf as this sweep: ``python -m pbo_tf.cli.train``,
    or, when pbo_tf is imported from a checkout, its ``launch/train.py``, which puts the checkout on the
    path (a checkout is not necessarily installed, nor the working directory)."""
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(pbo_tf.__file__)))
    shim = os.path.join(checkout, "launch", "train.py")
    if os.path.isfile(shim):
        return [sys.executable, shim]
    return [sys.executable, "-m", "pbo_tf.cli.train"]


def run_dir(root: str, gin_file: str, seed: str) -> str:
    """The folder of one seed of ``gin_file`` in a sweep without ``--ks`` or ``--grid``."""
    env = os.path.basename(os.path.dirname(os.path.abspath(gin_file)))
    name = os.path.splitext(os.path.basename(gin_file))[0]
    return os.path.join(root, env, name, results.seed_folder_name(seed))


def seed_groups(seeds: list[str], batch: bool) -> list[tuple[str, list[str]]]:
    """``(folder name, bindings)`` per job: one per seed, or one for all (consecutive) seeds."""
    try:
        values = [int(s) for s in seeds]
    except ValueError as e:
        raise ValueError(f"--seeds must be comma-separated integers, got {','.join(seeds)!r}") from e
    if not values:
        raise ValueError("--seeds is empty")
    _check_once(values, "--seeds")
    if not batch:
        return [(results.seed_folder_name(s), [f"SEED={s}"]) for s in values]
    if values != list(range(values[0], values[0] + len(values))):
        raise ValueError(f"--batch_seeds needs consecutive seeds, got {seeds}")
    return [(f"seeds_{values[0]}-{values[-1]}", [f"SEED={values[0]}", f"NUM_SEEDS={len(values)}"])]


def parse_ks(ks: list[str]) -> list[int]:
    try:
        values = [int(k) for k in ks]
    except ValueError as e:
        raise ValueError(f"--ks must be comma-separated integers, got {','.join(ks)!r}") from e
    _check_once(values, "--ks")
    return values


def _check_once(values: list[int], flag: str) -> None:
    """Raises ValueError naming the values ``flag`` lists more than once (each would go to one folder)."""
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"{flag} lists {', '.join(map(str, repeated))} more than once")


def parse_grid(specs: list[str]) -> list[tuple[str, list[str]]]:
    """``[(NAME, [v1, v2, ...])]`` of the ``--grid=NAME=v1,v2,...`` flags (values must give distinct folder
    names)."""
    grid = []
    for spec in specs:
        name, sep, values = (part.strip() for part in spec.partition("="))
        items = [v.strip() for v in values.split(",")] if values else []
        if not sep or not _BINDING_NAME.match(name) or not items or "" in items:
            raise ValueError(f"--grid={spec!r}: expected NAME=v1,v2,... (a binding name and its values)")
        if name in (n for n, _ in grid):
            raise ValueError(f"--grid names {name} twice")
        folders = [folder_value(v) for v in items]
        if len(set(folders)) != len(folders):
            raise ValueError(f"--grid={spec!r}: values repeat (or give the same folder name {folders})")
        grid.append((name, items))
    return grid


def folder_value(value: str) -> str:
    """``value`` as part of a folder name: quotes dropped, characters other than letters, digits and
    ``.+-=`` made ``_``."""
    return re.sub(r"[^\w.+\-=]", "_", value.replace("'", "").replace('"', "")) or "_"


def grid_points(
    root: str,
    gin_files: list[str],
    seeds: list[str],
    batch: bool = False,
    ks: list[int] = (),
    grid: list[tuple[str, list[str]]] = (),
    bindings: list[str] = (),
) -> list[Point]:
    """Every point of gin files × ``ks`` × ``grid`` values × seed groups, in that order; a point's bindings
    are its seed bindings, ``bindings``, then ``K=`` and its grid values.

    Raises:
      ValueError: ``K`` or a grid name is also in ``bindings``, the seeds' ``SEED`` / ``NUM_SEEDS`` are
        bound by ``bindings`` or swept by ``grid``, or two points would share a folder.
    """
    seeded = ["SEED", "NUM_SEEDS"]  # --seeds (and --batch_seeds) set them for every point
    for name, _ in grid:
        if name in seeded:
            raise ValueError(f"--grid cannot sweep {name}: --seeds (and --batch_seeds) set it")
    swept = (["K"] if ks else []) + [name for name, _ in grid]
    for binding in bindings:
        name = binding.partition("=")[0].strip()
        if name in swept:
            raise ValueError(f"{name} is both swept (--ks / --grid) and bound by --gin_bindings={binding!r}")
        if name in seeded:
            raise ValueError(
                f"{name} is set by --seeds (and --batch_seeds), not by --gin_bindings={binding!r}"
            )
    groups = seed_groups(seeds, batch)
    points, seen = [], {}
    for gin_file in gin_files:
        env = os.path.basename(os.path.dirname(os.path.abspath(gin_file)))
        name = os.path.splitext(os.path.basename(gin_file))[0]
        for k in ks or [None]:
            for values in itertools.product(*(items for _, items in grid)):
                parts = [env, *([f"k{k}"] if k is not None else []), name]
                parts += [f"{n}_{folder_value(v)}" for (n, _), v in zip(grid, values, strict=True)]
                extra = ([f"K={k}"] if k is not None else []) + [
                    f"{n}={v}" for (n, _), v in zip(grid, values, strict=True)
                ]
                for suffix, seed_bindings in groups:
                    key = os.path.join(*parts, suffix)
                    if key in seen:
                        raise ValueError(f"{seen[key]} and {gin_file} both go to {os.path.join(root, key)}")
                    seen[key] = gin_file
                    folder = os.path.join(root, key)
                    points.append(Point(key, folder, gin_file, (*seed_bindings, *bindings, *extra)))
    return points


def check_job(folder: str, gin_file: str, bindings: list[str]) -> tuple[str, dict, str]:
    """Parses and builds one run's config (errors name the binding or value) and checks its folder;
    returns ``(folder status, fingerprint, why a conflict)``: the status of
    `pbo_tf.experiments.run_folder.check`, or ``"conflict"``."""
    from pbo_tf.experiments import make_experiment, run_folder
    from pbo_tf.experiments.config import parse_config

    parse_config([gin_file], bindings)
    make_experiment(root_dir=folder, log=None)
    current = run_folder.fingerprint()
    try:
        return run_folder.check(folder, current), current, ""
    except run_folder.RunFolderConflict as e:
        return "conflict", current, str(e).split("; pass --overwrite")[0]


def command(point: Point) -> list[str]:
    """The training subprocess of ``point`` (absolute paths: a Ray worker may start elsewhere), with this
    sweep's ``--import`` modules."""
    cmd = [*train_command(), f"--root_dir={os.path.abspath(point.folder)}"]
    cmd += [f"--gin_file={os.path.abspath(point.gin_file)}"]
    cmd += [f"--gin_bindings={b}" for b in point.bindings]
    cmd += [f"--{cli.IMPORT_FLAG}={module}" for module in cli.imported_modules(FLAGS)]
    cmd += ["--deterministic"] * bool(FLAGS.deterministic)
    return [*cmd, f"--intra_op_threads={FLAGS.intra_op_threads}"]


def plan(points: list[Point], overwrite: bool, log=print) -> tuple[list[Point], dict[str, dict]]:
    """``(the points to launch, the status entries of the others)``: complete points are ``skipped``; a point
    whose config cannot be built is ``failed`` (exit code 2 and the one-line error), unless every point
    fails, which raises its error.

    Raises:
      FileNotFoundError, ValueError: every point has a bad binding or value (one line naming it).
      RunFolderConflict: folders that hold another experiment (without ``overwrite``).
    """
    from pbo_tf.experiments import run_folder

    launch, statuses, conflicts, first_error = [], {}, [], None
    for point in points:
        try:
            status, current, why = check_job(point.folder, point.gin_file, list(point.bindings))
        except Exception as e:  # a bad config fails this point only (unless it fails them all)
            code, message = cli.describe(e)
            first_error = first_error or e
            log(f"FAILED (config): {point.folder}: {message}")
            statuses[point.key] = _entry(point, "failed", exit_code=code, error=message)
            continue
        if status == "complete":
            log(f"skip (complete): {point.folder}")
            statuses[point.key] = _entry(point, "skipped")
            continue
        if status == "conflict":
            if not overwrite:
                conflicts.append(why)
                continue
            run_folder.check(point.folder, current, overwrite=True, log=log)
        launch.append(point)
    if conflicts:
        more = f" (and {len(conflicts) - 1} more folders)" if len(conflicts) > 1 else ""
        raise run_folder.RunFolderConflict(
            f"{conflicts[0]}{more}; pass --overwrite to move them aside, or use another --root_dir"
        )
    if (
        first_error is not None
        and len(statuses) == len(points)
        and all(entry["status"] == "failed" for entry in statuses.values())
    ):
        raise first_error
    return launch, statuses


def _entry(point: Point, status: str, exit_code=None, error=None, wall_s=None, started=None) -> dict:
    entry = {
        "status": status,
        "exit_code": exit_code,
        "error": error,
        "wall_s": None if wall_s is None else round(wall_s, 1),
        "gin_file": point.gin_file,
        "bindings": list(point.bindings),
    }
    if started is not None:  # a running point: when it started (seconds since the epoch)
        entry["started"] = round(started, 1)
    return entry


# --- One point: the training subprocess (run in a thread of this process, or in a Ray task).

#: The training subprocesses that threads of this process wait for (stopped when the sweep is interrupted).
_LIVE: set = set()


def run_point(cmd: list[str], folder: str, env: dict[str, str]) -> tuple[int, str | None, float]:
    """Runs the training command ``cmd`` for ``folder`` (output appended to its log.txt) and waits for it;
    returns ``(exit code, its last error line or None, wall seconds)``. The subprocess dies with the thread
    that waits for it (Linux), and is stopped when the wait is interrupted (a cancelled Ray task)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "log.txt")
    start = time.time()
    with open(path, "ab") as log:
        offset = log.tell()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        _LIVE.add(proc)
        try:
            code = proc.wait()
        except BaseException:
            stop(proc)
            raise
        finally:
            _LIVE.discard(proc)
    wall = time.time() - start
    return code, (None if code == 0 else last_error(path, offset, code)), wall


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the thread that started it ends (Linux prctl)."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop(proc: subprocess.Popen) -> None:
    """Terminates ``proc`` (killed after 10 s) and reaps it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def last_error(path: str, offset: int, code: int) -> str:
    """The last ``<program>: error: ...`` line (else the last line) written to the log ``path`` after
    ``offset``; else what the exit code says."""
    try:
        with open(path, "rb") as f:
            f.seek(max(offset, os.path.getsize(path) - 65536))
            lines = [
                line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()
            ]
    except OSError:
        lines = []
    errors = [line for line in lines if ": error: " in line]
    if errors or lines:
        return (errors or lines)[-1][:1000]
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exit code {code}"


# --- Engines: start points, report the finished ones.


class LocalEngine:
    """``parallel`` points at a time, each in a thread of this process waiting for its subprocess."""

    def __init__(self, parallel: int):
        from concurrent.futures import ThreadPoolExecutor

        self.parallel = parallel
        self.pool = ThreadPoolExecutor(max_workers=parallel)

    def slots(self) -> int:
        """How many points may run at once."""
        return self.parallel

    def submit(self, cmd: list[str], folder: str, env: dict[str, str]):
        return self.pool.submit(run_point, cmd, folder, env)

    def finished(self, handles: list, timeout: float) -> list[tuple]:
        """``(handle, run_point's result or None, None or the error that stopped it)`` of the handles that
        finish within ``timeout``."""
        from concurrent.futures import FIRST_COMPLETED, wait

        done, _ = wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        return [(h, *_result(h.result)) for h in done]

    def close(self, pending: list) -> None:
        """Stops the ``pending`` points' subprocesses (an interrupted sweep), then the threads."""
        if pending:
            for proc in list(_LIVE):
                stop(proc)
        self.pool.shutdown(wait=True, cancel_futures=True)


def import_ray():
    """The ``ray`` module, or a one-line `MissingDependencyError` naming the install command."""
    try:
        import ray
    except ImportError as e:
        from pbo_tf.deps import MissingDependencyError

        raise MissingDependencyError(
            f"ray is not installed: --engine=ray needs it; install it with `{RAY_INSTALL}`", name="ray"
        ) from e
    return ray


class RayEngine:
    """Every point a Ray task (``max_retries=0``: a failed run is reported, not retried), as many at once as
    the cluster's CPUs and GPUs hold; a local instance is started (and shut down) unless Ray is already
    initialised in this process or ``address`` names a cluster."""

    def __init__(self, address: str | None, parallel: int, cpus: float, gpus: float):
        ray = self.ray = import_ray()
        self.started = not ray.is_initialized()
        if self.started and address:
            ray.init(address=address, log_to_driver=False)
        elif self.started:
            ray.init(
                num_cpus=max(1, math.ceil(parallel * cpus)), include_dashboard=False, log_to_driver=False
            )
        self.cpus, self.gpus = cpus, gpus
        # run_point travels by value: workers need not import pbo_tf (nor find this checkout).
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        self.task = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=0)(run_point)

    def slots(self) -> int | None:
        """How many points the cluster's resources hold at once (None: unbounded)."""
        total = self.ray.cluster_resources()
        fits = [
            math.floor(total.get(name, 0) / need + 1e-9)
            for name, need in (("CPU", self.cpus), ("GPU", self.gpus))
            if need > 0
        ]
        if fits and min(fits) < 1:
            raise ValueError(
                f"no node of the Ray cluster can take a point: --cpus_per_run={self.cpus:g}, "
                f"--gpus_per_run={self.gpus:g}, the cluster has {total.get('CPU', 0):g} CPUs and "
                f"{total.get('GPU', 0):g} GPUs"
            )
        return min(fits) if fits else None

    def submit(self, cmd: list[str], folder: str, env: dict[str, str]):
        return self.task.remote(cmd, folder, env)

    def finished(self, handles: list, timeout: float) -> list[tuple]:
        ready, _ = self.ray.wait(handles, num_returns=1, timeout=timeout)
        if ready:  # every other one that is ready too
            ready, _ = self.ray.wait(handles, num_returns=len(handles), timeout=0)
        return [(h, *_result(lambda h=h: self.ray.get(h))) for h in ready]

    def close(self, pending: list) -> None:
        """Cancels the ``pending`` tasks (an interrupted sweep: each stops its subprocess), then shuts down
        the instance this engine started."""
        for handle in pending:
            self.ray.cancel(handle)
        if self.started:
            self.ray.shutdown()


def _result(get) -> tuple[tuple | None, str | None]:
    """``(get(), None)``, or ``(None, the error on one line)`` when the point's task itself failed."""
    try:
        return get(), None
    except Exception as e:
        return None, cli.one_line(f"{type(e).__name__}: {e}")[:1000]


# --- The sweep.


class Status:
    """``ROOT/sweep_status.json``: every point of the sweep (by its folder relative to ROOT), its status
    (``skipped``, ``pending``, ``running``, ``done`` or ``failed``), exit code, last error line and wall
    time; rewritten whenever a point starts or finishes. The entries of points that earlier sweeps into the
    same root ran and this one does not are kept, under ``earlier``."""

    def __init__(self, root: str, entries: dict[str, dict]):
        self.path = os.path.join(root, STATUS_FILE)
        self.entries = entries
        self.earlier = {key: e for key, e in _read_earlier(self.path).items() if key not in entries}

    def count(self, status: str) -> int:
        return sum(entry["status"] == status for entry in self.entries.values())

    def write(self) -> None:
        from pbo_tf.io import write_text_atomic

        body = {"updated": time.strftime("%Y-%m-%dT%H:%M:%S"), "points": self.entries}
        if self.earlier:
            body["earlier"] = self.earlier
        write_text_atomic(self.path, json.dumps(body, indent=1) + "\n")


def _read_earlier(path: str) -> dict[str, dict]:
    """Every point entry of the status file at ``path`` (its ``points`` and its ``earlier``); none if there
    is no such file or it cannot be read as one (it is then rewritten from this sweep alone)."""
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(body, dict):
        return {}
    out = {}
    for part in ("earlier", "points"):  # a point of the last sweep replaces an older entry of the same key
        entries = body.get(part)
        if isinstance(entries, dict):
            out.update({k: e for k, e in entries.items() if isinstance(e, dict)})
    return out


def progress(status: Status, left: int, slots: int | None, now: float | None = None) -> str:
    """``done / running / failed / left`` and an ETA. Each unfinished point is expected to take the mean
    wall time of the finished points of its gin file (points of one gin file cost alike; FQI and ProFQI
    do not), less what a running point has already run (``now``: seconds since the epoch, default the
    clock); while some gin file has no finished point yet, the ETA is not given."""
    now = time.time() if now is None else now
    done, running, failed = status.count("done"), status.count("running"), status.count("failed")
    line = f"{done} done, {running} running, {failed} failed, {left} left"
    walls: dict[str, list[float]] = {}
    for e in status.entries.values():
        if e["status"] in ("done", "failed") and e["wall_s"]:
            walls.setdefault(e["gin_file"], []).append(e["wall_s"])
    unfinished = [e for e in status.entries.values() if e["status"] in ("running", "pending")]
    if not unfinished:
        return line
    if any(e["gin_file"] not in walls for e in unfinished):
        return line + ", ETA after a point of each gin file has finished"

    def left_of(e):
        mean = sum(walls[e["gin_file"]]) / len(walls[e["gin_file"]])
        return max(0.0, mean - (now - e["started"])) if e.get("started") is not None else mean

    work = sum(left_of(e) for e in unfinished)
    at_once = max(1, len(unfinished) if slots is None else min(slots, len(unfinished)))
    return line + f", ETA {_duration(work / at_once)}"


#: A TensorFlow / absl log line (``W1201 20:28:52.203632 ...``), which is not a point's own progress.
_LOG_PREFIX = re.compile(r"^[DIWEF]\d{4} ")
#: The count a progress line reports: ``refresh 3/1000``, ``iteration 2/9``, ``training step 1000/25000``.
_COUNT = re.compile(r"\b(\d+)/(\d+)\b")


def point_progress(folder: str, started: float | None, now: float | None = None) -> str | None:
    """The latest progress line a running point wrote to ``folder/log.txt`` (its last line with a count
    ``i/N``, TensorFlow's own log lines skipped), with the point's ETA from its own count and run time:
    ``elapsed · (N − i) / i``; None while it has written none."""
    path = os.path.join(folder, "log.txt")
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 16_384))
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        match = _COUNT.search(line)
        if not line or _LOG_PREFIX.match(line) or match is None:
            continue
        done, total = int(match.group(1)), int(match.group(2))
        if started is not None and 0 < done <= total:
            elapsed = (time.time() if now is None else now) - started
            line += f" (ETA {_duration(elapsed * (total - done) / done)})"
        return line
    return None


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(round(seconds)), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m" if hours else (f"{m}m{s:02d}s" if m else f"{s}s")


def execute(engine, points: list[Point], status: Status, every_s: float) -> None:
    """Runs ``points`` on ``engine``, recording in ``status`` (and its file) when they start and finish; on
    an interruption the running points are stopped and recorded as failed."""
    env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
    waiting, running = list(points), {}
    last_line = time.monotonic()
    try:
        while waiting or running:
            slots = engine.slots()
            changed = False
            while waiting and (slots is None or len(running) < slots):
                point = waiting.pop(0)
                os.makedirs(point.folder, exist_ok=True)
                running[engine.submit(command(point), point.folder, env)] = point
                status.entries[point.key] = _entry(point, "running", started=time.time())
                print(f"started: {point.folder}", flush=True)
                changed = True
            for handle, result, error in engine.finished(list(running), timeout=min(every_s, 1.0)):
                point = running.pop(handle)
                code, wall = None, None
                if result is not None:
                    code, error, wall = result
                status.entries[point.key] = _entry(
                    point, "done" if code == 0 else "failed", code, error, wall
                )
                took = f" [{wall:.0f}s]" if wall is not None else ""
                if code == 0:
                    print(f"done: {point.folder}{took}", flush=True)
                else:
                    print(f"FAILED (exit {code}): {point.folder}{took}: {error}", flush=True)
                changed = True
            if changed:
                status.write()
            if time.monotonic() - last_line >= every_s:
                print(f"progress: {progress(status, len(waiting), slots)}", flush=True)
                for point in running.values():
                    latest = point_progress(point.folder, status.entries[point.key].get("started"))
                    if latest is not None:
                        print(f"  {point.key}: {latest}", flush=True)
                last_line = time.monotonic()
    except BaseException:
        for point in running.values():
            status.entries[point.key] = _entry(point, "failed", error="interrupted")
        raise
    finally:
        engine.close(list(running))
        status.write()


def run(argv: list[str]) -> int:
    """Plans and launches the sweep the flags describe; 1 when a point failed."""
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    if FLAGS.parallel < 1:
        raise ValueError(f"--parallel must be >= 1, got {FLAGS.parallel}")
    if FLAGS.cpus_per_run < 0 or FLAGS.gpus_per_run < 0:
        raise ValueError("--cpus_per_run and --gpus_per_run must be >= 0")
    if FLAGS.progress_every_s <= 0:
        raise ValueError(f"--progress_every_s must be > 0, got {FLAGS.progress_every_s}")
    if FLAGS.intra_op_threads < 0:
        raise ValueError(f"--intra_op_threads must be >= 0 (0 = all cores), got {FLAGS.intra_op_threads}")
    if FLAGS.engine == "ray":
        import_ray()  # before the planning: a missing Ray is one line at once
    from pbo_tf.experiments.config import resolve_gin_file
    from pbo_tf.experiments.run_folder import RunFolderError

    points = grid_points(
        FLAGS.root_dir,
        [resolve_gin_file(g, log=print) for g in FLAGS.gin_file],
        FLAGS.seeds,
        FLAGS.batch_seeds,
        parse_ks(FLAGS.ks),
        parse_grid(FLAGS.grid),
        FLAGS.gin_bindings,
    )
    try:
        os.makedirs(FLAGS.root_dir, exist_ok=True)
    except OSError as e:
        raise RunFolderError(f"cannot create --root_dir {FLAGS.root_dir!r}: {e.strerror or e}") from e
    launch, planned = plan(points, FLAGS.overwrite)
    pending = {p.key: _entry(p, "pending") for p in launch}
    status = Status(FLAGS.root_dir, {p.key: planned.get(p.key) or pending[p.key] for p in points})
    where = f"{FLAGS.parallel} at a time" if FLAGS.engine == "local" else "on Ray"
    print(f"{len(launch)} runs to launch, {where}", flush=True)
    status.write()
    if launch:
        if FLAGS.engine == "ray":
            engine = RayEngine(FLAGS.ray_address, FLAGS.parallel, FLAGS.cpus_per_run, FLAGS.gpus_per_run)
        else:
            engine = LocalEngine(FLAGS.parallel)
        execute(engine, launch, status, FLAGS.progress_every_s)
    skipped = status.count("skipped")
    print(f"sweep: {progress(status, 0, None)}, {skipped} skipped (status: {status.path})", flush=True)
    failed = [key for key, entry in status.entries.items() if entry["status"] == "failed"]
    for key in failed:
        entry = status.entries[key]
        print(f"failed (exit {entry['exit_code']}): {key}: {entry['error']}", flush=True)
    if failed:
        program = os.path.basename(argv[0]) if argv else "pbo-sweep"
        print(
            f"{program}: error: {len(failed)} of {len(points)} points failed (see {status.path})",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    """The ``pbo-sweep`` console script: parses ``argv`` (default ``sys.argv``), runs, exits."""
    cli.run_main(run, FLAGS, argv)


if __name__ == "__main__":
    main()
