r"""Exports the benchmark's compiled programs as XLA HLO, with inputs and TensorFlow's outputs.

  python benchmarks/export_xla.py --output_dir=/tmp/xla_export [--xla_cases=...] [--fqi_epochs=100]
  python benchmarks/xla_replay.py --export_dir=/tmp/xla_export --output=replay.json   # where JAX runs

Each case is one of our ``jit_compile=True`` functions (the one `benchmarks/benchmark.py` times), taken
through TensorFlow's XLA bridge (``experimental_get_compiler_ir``): the module XLA would compile for
whatever device TensorFlow runs on. ``xla_replay.py`` compiles and times it with the XLA inside jaxlib, so
the speed of our programs can be measured on an accelerator that has JAX but no TensorFlow build (the lent
GPU machines here carry no TensorFlow and reach no package index; see BUILD.md § GPU).

The HLO's parameters are the function's flat arguments, then its captured inputs (variables as their
values); the outputs are the flat return values, then the new values of the variables XLA updates in
place (the module's ``input_output_alias`` says which), and both are checked against TensorFlow. Float
variables larger than ``--max_stored`` elements are replaced, in TensorFlow too, by counter-hash values of
the same mean and variance (`xla_replay.hash_uniform`) that the replay regenerates, so the export stays
small; large outputs are checked on a strided sample.
"""

import dataclasses
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

import pbo_tf  # noqa: E402,F401
from benchmarks.cases import (  # noqa: E402
    CAR_ON_HILL,
    LUNAR_LANDER,
    car_on_hill_data,
    car_on_hill_pbo,
    car_on_hill_q,
    fqi_trainer,
    pbo_loss_step_flops,
    prodqn_agent_train,
    prodqn_train_step_flops,
    profqi_refresh_flops,
    profqi_trainer,
    profqi_trainers,
    synthetic_transitions,
)
from benchmarks.xla_replay import HLO_DTYPES, checksum, synthetic_input  # noqa: E402

CASES = (
    "car_on_hill_profqi_step",
    "car_on_hill_profqi_step_bfloat16",
    "lunar_lander_prodqn_agent",
    "lunar_lander_prodqn_agent_bfloat16",
    "car_on_hill_fqi_iteration",
    # The library's seed axis (`stacked_gradient_step`): 20 car-on-hill seeds in one step, per seed-step.
    "car_on_hill_profqi_seeds20_stacked_step",
    # The trainer's whole compiled outer loop (``jit_compile="round"``, the library default), W batches, data
    # order and target gathers included: one seed, and 20 seeds on the seed axis (`stacked_refresh_loop`, what
    # `seed_axis_rounds` runs). Their per-seed-step ratio is the seeds20 speedup.
    "car_on_hill_profqi_outer",
    "car_on_hill_profqi_seeds20_outer",
    # TF32 off (`enable_tensor_float_32_execution(False)`: the dots ask for full fp32 precision), to check a
    # GPU's results against TensorFlow's to fp32 accuracy; the others use TensorFlow's default (TF32 on).
    "car_on_hill_profqi_step_highest",
    "lunar_lander_prodqn_agent_highest",
)
# Cases whose many variables would make the export too big to carry (the device tool takes 64 MiB): their
# float variables over this many elements are hash-generated and their outputs checked on a sparser sample.
CASE_MAX_STORED = {"car_on_hill_profqi_seeds20_stacked_step": 4096, "car_on_hill_profqi_seeds20_outer": 4096}
FLAGS = flags.FLAGS


def define_flags():  # when run as a program: the tests and xla_profqi.py import this module's functions
    flags.DEFINE_string("output_dir", None, "Write the export here.")
    flags.DEFINE_list("xla_cases", list(CASES), f"Which cases to export, among {list(CASES)}.")
    flags.DEFINE_integer("max_stored", 1 << 16, "Float variables with more elements are hash-generated.")
    flags.DEFINE_integer("fqi_epochs", 100, "Epochs of the exported FQI iteration.")
    flags.DEFINE_integer(
        "outer_epochs", 20, "Epochs (one 500-transition step each) per call of the *_outer cases' outer loop."
    )
    flags.mark_flag_as_required("output_dir")


def entry_signature(hlo_text: str) -> tuple[list[tuple[str, tuple[int, ...]]], int]:
    """``(parameters, n_outputs)`` of the HLO module's ENTRY computation: each parameter's element type and
    shape, and the number of elements of its result tuple (1 if it returns a single array)."""
    entry = next((line for line in hlo_text.splitlines() if line.startswith("ENTRY")), None)
    if entry is None:
        raise ValueError("no ENTRY computation in the HLO text")
    params_text, result_text = entry.split(") -> ", 1)
    array = r"(\w+)\[([\d,]*)\]"
    params = [
        (t, tuple(int(x) for x in dims.split(",") if x)) for t, dims in re.findall(r": " + array, params_text)
    ]
    n_out = len(re.findall(array, re.sub(r"/\*.*?\*/", "", result_text.rstrip(" {"))))
    return params, n_out


def output_aliases(hlo_text: str) -> list[tuple[int, int]]:
    """``(output, parameter)`` pairs of the module's ``input_output_alias``: the variables XLA updates in
    place. A replay feeds those outputs back as the next call's inputs (the inputs' buffers are donated)."""
    header = hlo_text.split("\n", 1)[0]
    return [(int(o), int(p)) for o, p in re.findall(r"\{(\d+)\}: \((\d+), \{\}", header)]


def export_call(
    fn, args, name, output_dir, flops, steps_per_call, max_stored, seed=0, reference=True
) -> dict:
    """Exports the XLA-compiled tf.function ``fn`` on ``args``; returns the case's ``cases.json`` entry.

    Calls ``fn`` once (TensorFlow's reference outputs), so variables it updates move one step; with
    ``reference=False`` it does not (nothing is checked on replay)."""
    import tensorflow as tf

    flat_args = [x for x in tf.nest.flatten(args, expand_composites=True) if x is not None]
    concrete = fn.get_concrete_function(*args)
    ir = fn.experimental_get_compiler_ir(*args)
    hlo_text, hlo_proto = ir(stage="hlo"), ir(stage="hlo_serialized")
    params, n_out = entry_signature(hlo_text)
    captured = list(concrete.captured_inputs)
    if len(flat_args) + len(captured) != len(params):
        raise ValueError(
            f"{name}: {len(flat_args)} arguments + {len(captured)} captured inputs != {len(params)} HLO "
            "parameters; cannot map the inputs"
        )
    inputs, specs, resources = [], [], []
    for i, (hlo_type, shape) in enumerate(params):
        dtype = tf.dtypes.as_dtype(HLO_DTYPES[hlo_type])
        source = flat_args[i] if i < len(flat_args) else captured[i - len(flat_args)]
        is_resource = source.dtype == tf.resource
        value = tf.raw_ops.ReadVariableOp(resource=source, dtype=dtype) if is_resource else source
        x = np.asarray(tf.cast(value, tf.float32) if dtype == tf.bfloat16 else value)
        if tuple(x.shape) != shape:
            raise ValueError(f"{name}: input {i} has shape {x.shape}, the HLO parameter {shape}")
        spec = {"kind": "stored", "dtype": HLO_DTYPES[hlo_type], "shape": list(shape)}
        if is_resource and x.dtype == np.float32 and x.size > max_stored:
            # Same mean and variance (a deep chain's scale depends on them); constants (zero Adam moments)
            # stay exact; non-negative arrays stay non-negative.
            mean, half = float(x.mean()), float(x.std()) * 3**0.5
            low, high = (max(mean - half, 0.0) if x.min() >= 0 else mean - half), mean + half
            spec = {**spec, "kind": "hash", "seed": seed * 100003 + i, "low": low, "high": high}
            x = synthetic_input(spec)
            tf.raw_ops.AssignVariableOp(resource=source, value=tf.constant(x, dtype))
        spec["checksum"] = checksum(x)
        specs.append(spec)
        inputs.append(x)
        if is_resource:
            resources.append((source, dtype))

    outputs = (
        [x for x in tf.nest.flatten(fn(*args), expand_composites=True) if x is not None] if reference else []
    )
    expected = {i: x for i, x in enumerate(outputs)}
    aliases = output_aliases(hlo_text)
    if reference:  # variables updated in place: their new values, read back from TensorFlow
        for out, param in aliases:
            source = flat_args[param] if param < len(flat_args) else captured[param - len(flat_args)]
            if source.dtype == tf.resource and out >= len(outputs):
                dtype = tf.dtypes.as_dtype(HLO_DTYPES[params[param][0]])
                expected[out] = tf.raw_ops.ReadVariableOp(resource=source, dtype=dtype)
    expected = {
        i: np.asarray(tf.cast(x, tf.float32) if x.dtype == tf.bfloat16 else x) for i, x in expected.items()
    }
    arrays = {
        f"in_{i}": x for i, (x, s) in enumerate(zip(inputs, specs, strict=True)) if s["kind"] == "stored"
    }
    out_specs = []
    for i, x in sorted(expected.items()):
        stride = max(1, x.size // max_stored)
        arrays[f"out_{i}"] = x.reshape(-1)[::stride]
        out_specs.append({"index": i, "stride": stride, "shape": list(x.shape)})
    with open(os.path.join(output_dir, name + ".hlo.pb"), "wb") as f:
        f.write(hlo_proto)
    with open(os.path.join(output_dir, name + ".hlo.txt"), "w") as f:
        f.write(hlo_text)
    np.savez_compressed(os.path.join(output_dir, name + ".npz"), **arrays)
    return {
        "name": name, "flops": flops, "steps_per_call": steps_per_call, "inputs": specs,
        "outputs": out_specs, "n_outputs": n_out, "n_return_values": len(outputs),
        "variables_checked": len(expected) - len(outputs), "aliases": aliases,
    }  # fmt: skip


def build(name, fqi_epochs, outer_epochs):
    """``(fn, args, flops, steps_per_call)`` of one case."""
    import tensorflow as tf

    from pbo_tf.data.transitions import gather_batch

    q = car_on_hill_q()
    rng = np.random.default_rng(0)
    zero = tf.constant(0, tf.int64)
    c = CAR_ON_HILL
    # one Adam step with its targets gathered from the refresh's cache (what `gradient_step` is given)
    step_flops = pbo_loss_step_flops(
        c.K, c.pbo_sizes, c.q_sizes, c.n_actions, c.w_batch, c.batch, targets=False, chain=False
    )

    def car_on_hill_step_inputs(seed, dtype=None):
        """A car-on-hill ProFQI trainer at the paper's step shapes and its first step's inputs."""
        pbo = lambda: car_on_hill_pbo(dtype)  # noqa: E731
        trainer = profqi_trainer(
            q, pbo, car_on_hill_data(seed), c.K, c.n_w, c.batch, c.gamma, 1, True, seed=seed
        )
        trainer.learner.sync_target()
        chain = trainer.learner.frozen_chain()
        w_idx = trainer.w_batch_indices(zero, zero)
        indices = trainer.pass_indices(zero, zero)
        targets = tf.gather(tf.gather(trainer.dataset_targets(chain), indices[0], axis=2), w_idx, axis=1)
        return trainer, (tf.gather(trainer.w_set, w_idx), gather_batch(trainer.data, indices[0]), targets)

    if name.startswith("car_on_hill_profqi_step"):
        dtype = "bfloat16" if name.endswith("bfloat16") else None
        trainer, (w, batch, targets) = car_on_hill_step_inputs(0, dtype)
        return trainer.gradient_step, (w, batch, None, targets), step_flops, 1
    if name == "car_on_hill_profqi_seeds20_stacked_step":
        from pbo_tf.trainers.seed_batch import stacked_gradient_step

        trainers, inputs = zip(*(car_on_hill_step_inputs(s) for s in range(20)), strict=True)
        ws, batches, targets = (list(x) for x in zip(*inputs, strict=True))
        args = (ws, batches, [None] * 20, targets)
        return stacked_gradient_step(list(trainers)), args, step_flops, 20
    if name in ("car_on_hill_profqi_outer", "car_on_hill_profqi_seeds20_outer"):
        from pbo_tf.trainers.seed_batch import stacked_refresh_loop

        n_seeds = 20 if "seeds20" in name else 1
        datasets = [car_on_hill_data(s) for s in range(n_seeds)]
        trainers = profqi_trainers(
            q, car_on_hill_pbo, datasets, c.K, c.n_w, c.batch, c.gamma, outer_epochs, "round"
        )
        firsts = [t.first_pass(0) for t in trainers]
        steps = outer_epochs * trainers[0].steps_per_pass
        # per Adam step: the refresh's target chain and dataset targets shared out over its steps
        sizes = dataclasses.replace(c, n_transitions=len(datasets[0]), passes=outer_epochs)
        flops = profqi_refresh_flops(sizes, steps) / steps
        if n_seeds == 1:
            return trainers[0].run_round, (firsts[0],), flops, steps
        return stacked_refresh_loop(trainers), (firsts,), flops, n_seeds * steps
    if name.startswith("lunar_lander_prodqn_agent"):
        dtype = "bfloat16" if name.endswith("bfloat16") else None
        train, experience, agent = prodqn_agent_train(
            jit=True, compute_dtype=dtype, fused_adam=False, policy_refresh=True
        )  # the XLA configuration of the GPU numbers
        # One call is a training step: per Adam step, its work (the policy refresh shared out) and count.
        adam_steps = agent.adam_steps_per_train_step
        flops = prodqn_train_step_flops(LUNAR_LANDER, policy_refresh=True) / adam_steps
        return train, (experience, None), flops, adam_steps  # (experience, weights)
    if name == "car_on_hill_fqi_iteration":
        data = synthetic_transitions(rng, 5500, [-1, -3], [1, 3], 2)
        trainer = fqi_trainer(q, data, 500, 0.95, fqi_epochs, "round")
        args = (zero, tf.constant(q.initial_params(1, 0)))
        return trainer.run_round, args, 0.0, fqi_epochs * trainer.batches_per_pass
    raise ValueError(f"unknown case {name!r}; known: {list(CASES)}")


def main(argv):
    del argv
    import tensorflow as tf

    from pbo_tf.io import write_text_atomic

    unknown = set(FLAGS.xla_cases) - set(CASES)
    if unknown:
        raise app.UsageError(f"unknown --xla_cases {sorted(unknown)}; known: {list(CASES)}")
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    path = os.path.join(FLAGS.output_dir, "cases.json")
    meta = {"cases": []}
    if os.path.exists(path):  # add to an earlier export: cases of the same name are replaced
        with open(path) as f:
            meta = json.load(f)
    meta["exported_with"] = {"tensorflow": tf.__version__}
    for name in FLAGS.xla_cases:
        highest = name.endswith("_highest")
        tf.config.experimental.enable_tensor_float_32_execution(not highest)
        try:
            fn, args, flops, steps = build(
                name.removesuffix("_highest"), FLAGS.fqi_epochs, FLAGS.outer_epochs
            )
            max_stored = min(FLAGS.max_stored, CASE_MAX_STORED.get(name, FLAGS.max_stored))
            case = export_call(fn, args, name, FLAGS.output_dir, flops, steps, max_stored)
        finally:  # TensorFlow's default again, whatever happened
            tf.config.experimental.enable_tensor_float_32_execution(True)
        meta["cases"] = [c for c in meta["cases"] if c["name"] != name] + [case]
        write_text_atomic(path, json.dumps(meta, indent=1) + "\n")
        print(f"exported {name}: {len(case['inputs'])} inputs, {case['n_outputs']} outputs, "
              f"{case['variables_checked']} updated variables checked", flush=True)  # fmt: skip
    print(f"wrote {FLAGS.output_dir}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
