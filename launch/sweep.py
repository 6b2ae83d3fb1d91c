r"""Launches many runs (gin files × seeds) as subprocesses of launch/train.py, skipping finished ones.

  python launch/sweep.py --root_dir=runs/chain_walk_k5 --seeds=0,1,2 --parallel=2 \
      --gin_file=gin_configs/chain_walk/fqi.gin --gin_file=gin_configs/chain_walk/profqi.gin \
      --gin_bindings='K=5'

Each run goes to ``ROOT/<env>/<gin file name>/seed_<s>``; a folder with metrics.json is complete and is
not launched again, so re-running the same command after an interruption finishes only what is missing
(unfinished runs resume from their checkpoints). Logs go to ``<run folder>/log.txt``.

``--batch_seeds`` trains all the (consecutive) seeds of a gin file in one process and one compiled graph
(``NUM_SEEDS``), in ``ROOT/<env>/<gin file name>/seeds_<first>-<last>``; its metrics.json holds every
seed's curve and `launch/plot.py` reads it as one run per seed.
"""

import os
import subprocess
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("root_dir", None, "Folder that receives one run folder per (gin file, seed).")
flags.DEFINE_multi_string("gin_file", None, "Gin files to sweep.")
flags.DEFINE_list("seeds", ["0"], "Seeds (comma separated).")
flags.DEFINE_multi_string("gin_bindings", [], "Bindings applied to every run.")
flags.DEFINE_integer("parallel", 1, "Runs at a time.")
flags.DEFINE_boolean("batch_seeds", False, "One process per gin file training all seeds in one graph.")
flags.DEFINE_integer(
    "intra_op_threads", 0, "Passed to each train.py (0 = all cores; with --parallel=N, cores/N is sensible)."
)
flags.mark_flags_as_required(["root_dir", "gin_file"])

TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")


def run_dir(root: str, gin_file: str, seed: str) -> str:
    env = os.path.basename(os.path.dirname(os.path.abspath(gin_file)))
    name = os.path.splitext(os.path.basename(gin_file))[0]
    return os.path.join(root, env, name, f"seed_{seed}")


def seed_groups(seeds: list[str], batch: bool) -> list[tuple[str, list[str]]]:
    """``(folder suffix, bindings)`` per job: one per seed, or one for all (consecutive) seeds."""
    if not batch:
        return [(f"seed_{s}", [f"SEED={s}"]) for s in seeds]
    values = [int(s) for s in seeds]
    if values != list(range(values[0], values[0] + len(values))):
        raise app.UsageError(f"--batch_seeds needs consecutive seeds, got {seeds}")
    return [(f"seeds_{values[0]}-{values[-1]}", [f"SEED={values[0]}", f"NUM_SEEDS={len(values)}"])]


def main(argv):
    del argv
    jobs = []
    for gin_file in FLAGS.gin_file:
        if not os.path.exists(gin_file):
            raise app.UsageError(f"gin file {gin_file!r} does not exist")
        for suffix, seed_bindings in seed_groups(FLAGS.seeds, FLAGS.batch_seeds):
            folder = os.path.join(os.path.dirname(run_dir(FLAGS.root_dir, gin_file, "0")), suffix)
            if os.path.exists(os.path.join(folder, "metrics.json")):
                print(f"skip (complete): {folder}")
                continue
            cmd = [sys.executable, TRAIN, f"--root_dir={folder}", f"--gin_file={gin_file}"]
            cmd += [f"--gin_bindings={b}" for b in seed_bindings + list(FLAGS.gin_bindings)]
            cmd.append(f"--intra_op_threads={FLAGS.intra_op_threads}")
            jobs.append((folder, cmd))
    print(f"{len(jobs)} runs to launch, {FLAGS.parallel} at a time")
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
        print(f"{len(failed)} runs failed: {failed}")
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
