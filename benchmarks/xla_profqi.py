r"""Trains an offline ProFQI run on an accelerator that has JAX but no TensorFlow, then finishes it here.

  # 1. here: export each seed's whole refresh (target sync, target chain, Bellman-target cache and all
  #    its epochs of gradient steps) as one XLA program, with the seed's initial state
  python benchmarks/xla_profqi.py --mode=export --gin_file=gin_configs/car_on_hill/profqi.gin \
      --gin_bindings='NUM_SEEDS=5' --root_dir=runs/coh_profqi --export_dir=.xla_export_profqi
  # 2. there: run every refresh, the state fed back (benchmarks/xla_replay.py's train mode)
  python benchmarks/xla_replay.py --export_dir=.xla_export_profqi --train_dir=OUT
  # 3. here: load the final state into the seeds' trainers, log and checkpoint their refreshes, then
  #    the usual runner resumes from those checkpoints (all steps done), evaluates and writes metrics.json
  python benchmarks/xla_profqi.py --mode=finish --gin_file=... --gin_bindings=... --root_dir=runs/coh_profqi \
      --export_dir=.xla_export_profqi --device_dir=OUT

A run folder that has already done some refreshes (here, or on a device with ``--allow_partial``) exports
from its last checkpoint: the program starts from the checkpointed weights, Adam state and counters, and the
device runs only the refreshes that are left. All seeds must be at the same refresh.

The program is the one TensorFlow's XLA bridge builds from `ProFQITrainer`'s own code (`sync_target`,
`frozen_chain`, `refresh_loop` with its XLA gradient step), so the data order and the learning-rate
schedule are the trainer's. One difference: the W batches' shuffle (`stateless_uniform`) draws other
numbers under XLA than in graph mode, so with ``w_batch_size < |W|`` the rows go in another order than in
`launch/train.py` (with the whole of W in each batch, as in the car-on-hill config, the result is the same).
``--mode=evaluate`` writes the curves of a run trained part of the way (by `launch/train.py` stopped after
some refreshes, or a device run) at its checkpoints into ``partial_metrics.json``; metrics.json is not
written, so the folder stays resumable. ``--check`` exports with TensorFlow's outputs of the first
refresh (run here, so use it with a small PASSES_PER_REFRESH) for the replay to compare. The seeds' training
time in metrics.json is the accelerator's wall time of the calls.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

import pbo_tf  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

FLAGS = flags.FLAGS


def define_flags():  # when run as a program: the tests import this module's functions
    flags.DEFINE_enum(
        "mode",
        None,
        ["export", "finish", "evaluate"],
        "export (before) or finish (after the device run); evaluate: the curves of a run folder trained "
        "part of the way (here or on a device) at its checkpoints, into partial_metrics.json (it stays "
        "resumable).",
    )
    flags.DEFINE_string("root_dir", None, "The run folder.")
    flags.DEFINE_multi_string("gin_file", None, "Gin config file(s) of an offline ProFQI run.")
    flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings.")
    flags.DEFINE_string("export_dir", None, "Where the export goes / is.")
    flags.DEFINE_string("device_dir", None, "finish: the folder xla_replay.py --train_dir wrote.")
    flags.DEFINE_bool("check", False, "export: run the first refresh here and store its outputs.")
    flags.DEFINE_bool(
        "allow_partial",
        False,
        "finish: accept a device run cut short (fewer refreshes than the schedule): checkpoint what was "
        "done, evaluate it into partial_metrics.json and leave the run resumable (no metrics.json).",
    )
    flags.mark_flags_as_required(["mode", "root_dir", "gin_file"])


def outer_step_program(trainer):
    """One XLA program for one whole refresh of ``trainer`` (`ProFQITrainer.refresh`: ``φ̄ ← φ``, the frozen
    chain, then every pass); takes the first pass, returns the step losses."""
    import tensorflow as tf

    return tf.function(trainer.refresh, jit_compile=True, autograph=False)  # as `ProFQITrainer.run_round`


def case_name(seed: int) -> str:
    return f"profqi_seed{seed}"


def build_trainers():
    from pbo_tf.experiments.config import parse_config
    from pbo_tf.experiments.runner import Experiment

    parse_config(FLAGS.gin_file, FLAGS.gin_bindings)
    experiment = Experiment(root_dir=FLAGS.root_dir, log=lambda m: print(m, flush=True))
    if experiment.algorithm.name != "profqi":
        raise app.UsageError(
            f"{FLAGS.gin_file}: an offline ProFQI config is needed, not {experiment.algorithm.name!r}"
        )
    os.makedirs(FLAGS.root_dir, exist_ok=True)
    return experiment, [(seed, experiment.build_seed(seed)["trainer"]) for seed in experiment.seeds]


def export():
    import tensorflow as tf

    from benchmarks.export_xla import export_call
    from pbo_tf.io import write_text_atomic

    _, trainers = build_trainers()
    start = outer_steps_done(trainers)
    if start >= trainers[0][1].refreshes:
        raise app.UsageError(f"{FLAGS.root_dir}: all {start} refreshes are done, nothing to export")
    os.makedirs(FLAGS.export_dir, exist_ok=True)
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()  # the dots' precision (hardware)
    meta = {"exported_with": {"tensorflow": tf.__version__, "tf32": tf32}, "cases": []}
    for seed, trainer in trainers:
        steps = trainer.steps_per_refresh
        first_epoch = tf.constant(start * trainer.passes_per_refresh, tf.int64)
        case = export_call(
            outer_step_program(trainer), (first_epoch,), case_name(seed), FLAGS.export_dir,
            0.0, steps, max_stored=1 << 40, reference=FLAGS.check,
        )  # fmt: skip
        calls = trainer.refreshes - start
        passes = trainer.passes_per_refresh
        case["train"] = {"calls": calls, "counter_input": 0, "counter_start": start * passes,
                         "counter_step": passes, "first_outer_step": start}  # fmt: skip
        meta["cases"].append(case)
        print(f"exported seed {seed}: refreshes {start + 1}..{trainer.refreshes}, {calls} calls of "
              f"{steps} gradient steps", flush=True)  # fmt: skip
    write_text_atomic(os.path.join(FLAGS.export_dir, "cases.json"), json.dumps(meta, indent=1) + "\n")


def outer_steps_done(trainers) -> int:
    """The refreshes the seeds' checkpoints hold (the same for all seeds, or an error)."""
    done = {seed: trainer.rounds_done for seed, trainer in trainers}
    if len(set(done.values())) > 1:
        raise app.UsageError(f"the seeds are at different refreshes {done}; resume the run folder with "
                             "launch/train.py until they agree")  # fmt: skip
    return next(iter(done.values()))


def device_states(device_dir: str, seeds: list[int]) -> dict:
    """Each seed's device state (``xla_replay.py --train_dir``) after the most calls that every seed
    reached: one run folder has one budget. That is each seed's last state when they agree; seeds trained
    in separate processes and stopped at a deadline are cut back to their newest common snapshot
    (``--snapshot_every``)."""
    import glob
    import re

    files = {}  # seed -> {calls: path}
    for seed in seeds:
        name = case_name(seed)
        last = os.path.join(device_dir, name + "_state.npz")
        if not os.path.exists(last):
            raise ValueError(f"seed {seed}: no {name}_state.npz in {device_dir}")
        found = {len(np.load(last)["seconds"]): last}
        for path in glob.glob(os.path.join(device_dir, name + "_state_at*.npz")):
            found.setdefault(int(re.search(r"_state_at(\d+)\.npz$", path).group(1)), path)
        files[seed] = found
    common = set.intersection(*(set(found) for found in files.values()))
    if not common:
        done = {seed: max(found) for seed, found in files.items()}
        raise ValueError(f"the seeds ran different numbers of refreshes on the device, {done}, and share "
                         "no snapshot (xla_replay.py --snapshot_every)")  # fmt: skip
    calls = max(common)
    if any(max(found) != calls for found in files.values()):
        print(f"the seeds ran {sorted(max(f) for f in files.values())} refreshes on the device; all are "
              f"taken at {calls}, the newest snapshot they share", flush=True)  # fmt: skip
    return {seed: np.load(found[calls]) for seed, found in files.items()}


def device_hardware(device_dir: str, seeds: list[int]) -> dict:
    """The device the seeds trained on, what ``metrics.json`` records under ``hardware``: the
    ``<case>_hardware.json`` that ``xla_replay.py`` wrote beside the first seed's state (the seeds of a
    folder share one device), or for a device folder without one, an ``unknown`` device."""
    path = os.path.join(device_dir, case_name(seeds[0]) + "_hardware.json")
    if not os.path.exists(path):
        return {"device": "unknown", "platform": "unknown", "framework": "jax", "matmul_precision": "unknown",
                "tf32": None}  # fmt: skip
    with open(path) as f:
        return json.load(f)


def finish():
    import tensorflow as tf

    experiment, trainers = build_trainers()
    start = outer_steps_done(trainers)
    with open(os.path.join(FLAGS.export_dir, "cases.json")) as f:
        cases = {c["name"]: c for c in json.load(f)["cases"]}
    states = device_states(FLAGS.device_dir, [s for s, _ in trainers])
    for seed, trainer in trainers:
        case = cases[case_name(seed)]
        state = states[seed]
        losses, seconds = state["first_outputs"], state["seconds"]
        done = len(losses)
        exported_at = case["train"].get("first_outer_step", 0)
        if start != exported_at:
            raise app.UsageError(
                f"seed {seed}: {FLAGS.root_dir} is at refresh {start} but the export started at "
                f"{exported_at}: export again from this folder"
            )
        if done < 1:
            raise ValueError(f"seed {seed}: the device ran no refresh ({FLAGS.device_dir})")
        total = start + done
        if total != trainer.refreshes and not (FLAGS.allow_partial and total < trainer.refreshes):
            raise ValueError(
                f"seed {seed}: the device ran {done} of the {trainer.refreshes - start} refreshes "
                "left (--allow_partial evaluates a run cut short)"
            )
        concrete = outer_step_program(trainer).get_concrete_function(tf.constant(0, tf.int64))
        captured = list(concrete.captured_inputs)
        n_args = len(case["inputs"]) - len(captured)
        for _, param in case["aliases"]:
            handle = captured[param - n_args]
            value = state[f"param_{param}"]
            dtype = tf.dtypes.as_dtype(case["inputs"][param]["dtype"])
            current = tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)
            if tuple(current.shape) != value.shape:
                raise ValueError(
                    f"seed {seed}: parameter {param} is {current.shape} here, {value.shape} there"
                )
            tf.raw_ops.AssignVariableOp(resource=handle, value=tf.constant(value, dtype))
        # The device's refreshes before its last: their losses and time (their weights stayed there).
        for i in range(done):
            trainer.end_round(start + i, losses[i], float(seconds[i]))
        trainer.checkpoint()
    if total == trainers[-1][1].refreshes:
        # The runner resumes from the checkpoints just written (every step done): evaluation, metrics.json,
        # which records the device the seeds trained on.
        experiment.hardware = device_hardware(FLAGS.device_dir, [s for s, _ in trainers])
        experiment.run()
        return
    evaluate_partial(experiment, total)


def evaluate_partial(experiment, outer_steps_done):
    """The curve of every seed at its checkpoint, into ``partial_metrics.json``; metrics.json is not written,
    so `launch/train.py` on the same folder and gin resumes the remaining refreshes."""
    from pbo_tf.evaluation.stats import aggregate_curves, mean_over_seeds
    from pbo_tf.io import write_json_atomic

    runs = [experiment.build_seed(seed) for seed in experiment.seeds]  # restored from the checkpoints
    per_seed = [experiment.finish_seed(r, r["trainer"].train_seconds) for r in runs]
    mean, ci = aggregate_curves([p["curve"] for p in per_seed])
    refreshes = runs[0]["trainer"].refreshes
    metrics = {
        "env": experiment.problem.name, "algorithm": experiment.label, "K": experiment.K,
        "refreshes_done": outer_steps_done, "refreshes": refreshes,
        "budget_fraction": outer_steps_done / refreshes, "seeds": experiment.seeds,
        "reference": mean_over_seeds([p["reference"] for p in per_seed]),  # each seed's is in per_seed
        "curve": mean, "curve_ci95": ci, "per_seed": per_seed,
        "wall_time_s_per_seed": float(np.mean([p["wall_time_s"] for p in per_seed])),
    }  # fmt: skip
    write_json_atomic(experiment.path("partial_metrics.json"), metrics)
    main = experiment.problem.main_metric
    print(f"partial ({outer_steps_done}/{refreshes} refreshes): {main} by k: "
          + ", ".join(f"{c['k']}: {c.get(main)}" for c in mean), flush=True)  # fmt: skip


def evaluate():
    experiment, trainers = build_trainers()
    done = outer_steps_done(trainers)
    total = trainers[0][1].refreshes
    if done == 0:
        raise app.UsageError(f"{FLAGS.root_dir}: no refresh is checkpointed yet; nothing to evaluate")
    if done == total:
        raise app.UsageError(f"{FLAGS.root_dir}: all {total} refreshes are done; launch/train.py on it "
                             "evaluates into metrics.json")  # fmt: skip
    evaluate_partial(experiment, done)


def main(argv):
    del argv
    if FLAGS.mode != "evaluate" and not FLAGS.export_dir:
        raise app.UsageError(f"--mode={FLAGS.mode} needs --export_dir")
    {"export": export, "finish": finish, "evaluate": evaluate}[FLAGS.mode]()


if __name__ == "__main__":
    define_flags()
    app.run(main)
