r"""Launches many runs (gin files × seeds) as subprocesses of `pbo_tf.cli.train`, skipping finished ones.

  pbo-sweep --root_dir=runs/chain_walk_k5 --seeds=0,1,2 --parallel=2 \
      --gin_file=gin_configs/chain_walk/fqi.gin --gin_file=gin_configs/chain_walk/profqi.gin \
      --gin_bindings='K=5'

(or ``python launch/sweep.py ...`` in a checkout; gin files as for ``pbo-train``: paths or names under the
shipped configs). Each run goes to ``ROOT/<env>/<gin file name>/seed_<s>``; a folder with metrics.json is
complete and is not launched again, so re-running the same command after an interruption finishes only
what is missing (unfinished runs resume from their checkpoints). Logs go to ``<run folder>/log.txt``.

Before launching anything, every run's config is parsed and built here, and every existing folder is
checked against it (`pbo_tf.experiments.run_folder`): a bad file, binding or value, or a folder that holds
another experiment (another config fingerprint, complete or not), stops the sweep with one line naming it
(exit code 2), unless ``--overwrite`` moves such folders aside to ``<folder>.old-<time>``.

``--batch_seeds`` trains all the (consecutive) seeds of a gin file in one process and one compiled graph
(``NUM_SEEDS``), in ``ROOT/<env>/<gin file name>/seeds_<first>-<last>``; its metrics.json holds every
seed's curve and ``pbo-plot`` reads it as one run per seed.
"""

import os
import subprocess
import sys
import time

from absl import flags

import pbo_tf  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from pbo_tf.cli import common as cli

FLAGS = flags.FlagValues()
flags.DEFINE_string(
    "root_dir", None, "Folder that receives one run folder per (gin file, seed).", flag_values=FLAGS
)
flags.DEFINE_multi_string("gin_file", None, "Gin files to sweep.", flag_values=FLAGS)
flags.DEFINE_list("seeds", ["0"], "Seeds (comma separated).", flag_values=FLAGS)
flags.DEFINE_multi_string("gin_bindings", [], "Bindings applied to every run.", flag_values=FLAGS)
flags.DEFINE_integer("parallel", 1, "Runs at a time.", flag_values=FLAGS)
flags.DEFINE_boolean(
    "batch_seeds", False, "One process per gin file training all seeds in one graph.", flag_values=FLAGS
)
flags.DEFINE_integer(
    "intra_op_threads",
    0,
    "Passed to each training run (0 = all cores; with --parallel=N, cores/N is sensible).",
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
    env = os.path.basename(os.path.dirname(os.path.abspath(gin_file)))
    name = os.path.splitext(os.path.basename(gin_file))[0]
    return os.path.join(root, env, name, f"seed_{seed}")


def seed_groups(seeds: list[str], batch: bool) -> list[tuple[str, list[str]]]:
    """``(folder suffix, bindings)`` per job: one per seed, or one for all (consecutive) seeds."""
    try:
        values = [int(s) for s in seeds]
    except ValueError as e:
        raise ValueError(f"--seeds must be comma-separated integers, got {','.join(seeds)!r}") from e
    if not values:
        raise ValueError("--seeds is empty")
    if not batch:
        return [(f"seed_{s}", [f"SEED={s}"]) for s in values]
    if values != list(range(values[0], values[0] + len(values))):
        raise ValueError(f"--batch_seeds needs consecutive seeds, got {seeds}")
    return [(f"seeds_{values[0]}-{values[-1]}", [f"SEED={values[0]}", f"NUM_SEEDS={len(values)}"])]


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


def plan(gin_files, seeds, bindings, batch, overwrite, log=print) -> list[tuple[str, list[str]]]:
    """The ``(folder, training command)`` of every run to launch; complete runs are left out.

    Raises:
      FileNotFoundError, ValueError: a missing gin file, a bad binding or value (one line naming it).
      RunFolderConflict: folders that hold another experiment (without ``overwrite``).
    """
    from pbo_tf.experiments import run_folder
    from pbo_tf.experiments.config import resolve_gin_file

    jobs, conflicts = [], []
    for gin_file in map(resolve_gin_file, gin_files):
        for suffix, seed_bindings in seed_groups(seeds, batch):
            folder = os.path.join(os.path.dirname(run_dir(FLAGS.root_dir, gin_file, "0")), suffix)
            status, current, why = check_job(folder, gin_file, seed_bindings + list(bindings))
            if status == "complete":
                log(f"skip (complete): {folder}")
                continue
            if status == "conflict":
                if not overwrite:
                    conflicts.append(why)
                    continue
                run_folder.check(folder, current, overwrite=True, log=log)
            cmd = [*train_command(), f"--root_dir={folder}", f"--gin_file={gin_file}"]
            cmd += [f"--gin_bindings={b}" for b in seed_bindings + list(bindings)]
            cmd.append(f"--intra_op_threads={FLAGS.intra_op_threads}")
            jobs.append((folder, cmd))
    if conflicts:
        more = f" (and {len(conflicts) - 1} more folders)" if len(conflicts) > 1 else ""
        raise run_folder.RunFolderConflict(
            f"{conflicts[0]}{more}; pass --overwrite to move them aside, or use another --root_dir"
        )
    return jobs


def run(argv: list[str]) -> int:
    """Plans and launches the sweep the flags describe; 1 when a run failed."""
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    if FLAGS.parallel < 1:
        raise ValueError(f"--parallel must be >= 1, got {FLAGS.parallel}")
    from pbo_tf.experiments.run_folder import RunFolderError

    try:
        os.makedirs(FLAGS.root_dir, exist_ok=True)
    except OSError as e:
        raise RunFolderError(f"cannot create --root_dir {FLAGS.root_dir!r}: {e.strerror or e}") from e
    jobs = plan(FLAGS.gin_file, FLAGS.seeds, FLAGS.gin_bindings, FLAGS.batch_seeds, FLAGS.overwrite)
    print(f"{len(jobs)} runs to launch, {FLAGS.parallel} at a time", flush=True)
    running, failed, start = [], [], time.perf_counter()
    while jobs or running:
        while jobs and len(running) < FLAGS.parallel:
            folder, cmd = jobs.pop(0)
            os.makedirs(folder, exist_ok=True)
            log = open(os.path.join(folder, "log.txt"), "a")  # noqa: SIM115 (closed when the run ends)
            running.append((folder, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
            print(f"started: {folder}", flush=True)
        time.sleep(0.5)
        for item in list(running):
            folder, proc, log = item
            if proc.poll() is not None:
                log.close()
                running.remove(item)
                status = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode}, see log.txt)"
                if proc.returncode:
                    failed.append(folder)
                print(f"{status}: {folder} [{time.perf_counter() - start:.0f}s]", flush=True)
    if failed:
        program = os.path.basename(sys.argv[0])
        print(f"{program}: error: {len(failed)} runs failed (see their log.txt): {failed}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    """The ``pbo-sweep`` console script: parses ``argv`` (default ``sys.argv``), runs, exits."""
    cli.run_main(run, FLAGS, argv)


if __name__ == "__main__":
    main()
