r"""Replays XLA programs exported by ``benchmarks/export_xla.py`` on any XLA backend, without TensorFlow.

  python benchmarks/xla_replay.py --export_dir=DIR --output=gpu.json [--repeats=20]

For machines that have JAX (jaxlib) but no TensorFlow build for their accelerator. Each exported case is
the HLO module that TensorFlow's XLA bridge built for one of our compiled calls (a ProFQI gradient step, a
``ProDQNAgent.train`` step, a whole FQI iteration, ...), its inputs and TensorFlow's own outputs on them.
This script converts each module to StableHLO, compiles it for the default JAX backend (a GPU if there is
one), checks its outputs against TensorFlow's (relative L2 error; TF32 matmuls on a GPU give about 1e-3),
then times it: the median over ``--repeats`` of the mean wall time of ``--iters`` back-to-back calls, the
inputs resident on the device. It also measures the device's dense matmul throughput (1024³ as in
``benchmarks/benchmark.py``, and 8192³, which a GPU needs to approach its peak) and prints each case as
ms/step and as a fraction of both.

What this measures is the compiled program, which is where the FLOPs are; it leaves out TensorFlow's own
per-call cost around it (a few tens of microseconds per XLA cluster launch).

The export format (also written by ``export_xla.py``, which imports the helpers below): ``cases.json``
lists the cases; ``<name>.hlo.pb`` is the serialized HloModuleProto; ``<name>.npz`` holds the stored
inputs (``in_<i>``) and the reference outputs or strided samples of them (``out_<i>``). Inputs too large to
ship are regenerated here, bit for bit, from a counter hash (`hash_uniform`), the same values TensorFlow
was given; their checksum is verified before use.

One private piece of jaxlib is used, because JAX has no public API for it: ``jax._src.lib.xla_client``,
whose ``_xla.mlir.xla_computation_to_mlir_module`` turns a serialized HloModuleProto into MLIR (JAX's
public entry points take Python functions, not an HLO module built elsewhere). The MLIR is then compiled
and run through the low-level backend client of ``jax.extend`` (``compile_and_load``,
``execute_sharded``). Both may change between jaxlib versions.

This file needs only NumPy, absl and JAX (no TensorFlow, no pbo_tf), so it runs on its own where JAX does.
"""

import json
import os
import re
import shutil
import statistics
import time

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)

# HLO element types <-> numpy dtypes (bfloat16 arrays are stored as their float32 values).
HLO_DTYPES = {
    "pred": "bool", "s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64", "u8": "uint8",
    "u16": "uint16", "u32": "uint32", "u64": "uint64", "f16": "float16", "bf16": "bfloat16",
    "f32": "float32", "f64": "float64",
}  # fmt: skip


def hash_uniform(shape, seed: int) -> np.ndarray:
    """Float32 values in [0, 1) from a counter hash (splitmix64) of the flat index and ``seed``.

    Integer arithmetic and an exact conversion only, so the values are the same bit for bit on every
    machine and NumPy version (unlike a NumPy Generator's stream, which NumPy does not promise to keep)."""
    n = int(np.prod(shape, dtype=np.int64))
    with np.errstate(over="ignore"):
        z = np.arange(n, dtype=np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)).reshape(shape)


def synthetic_input(spec: dict) -> np.ndarray:
    """The array a ``"hash"`` input spec describes: ``low + (high − low) · hash_uniform``, in float32."""
    u = hash_uniform(spec["shape"], spec["seed"])
    return (np.float32(spec["low"]) + np.float32(spec["high"] - spec["low"]) * u).astype(np.float32)


def checksum(x: np.ndarray) -> float:
    return float(np.sum(np.asarray(x, np.float64)))


def load_inputs(export_dir: str, case: dict) -> list[np.ndarray]:
    """The case's inputs in HLO parameter order, verified against the checksums TensorFlow recorded."""
    stored = np.load(os.path.join(export_dir, case["name"] + ".npz"))
    out = []
    for i, spec in enumerate(case["inputs"]):
        x = stored[f"in_{i}"] if spec["kind"] == "stored" else synthetic_input(spec)
        if abs(checksum(x) - spec["checksum"]) > 1e-6 * max(1.0, abs(spec["checksum"])):
            raise ValueError(
                f"{case['name']}: input {i} does not match the exported checksum "
                f"({checksum(x)} != {spec['checksum']}); the export is corrupt or from another version"
            )
        out.append(np.asarray(x).astype(numpy_dtype(spec["dtype"])))
    return out


def numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def reference_error(case: dict, outputs: list[np.ndarray], stored) -> dict:
    """Relative L2 error of each checked output (whole, or the strided sample TensorFlow stored); for an
    integer or boolean output, the fraction of its elements that differ."""
    errors = {}
    for spec in case["outputs"]:
        i = spec["index"]
        ref = np.asarray(stored[f"out_{i}"]).reshape(-1)
        got = np.asarray(outputs[i]).reshape(-1)[:: spec["stride"]]
        if not np.issubdtype(ref.dtype, np.floating):
            errors[i] = float(np.mean(got != ref)) if ref.size else 0.0
            continue
        got, ref = got.astype(np.float64), ref.astype(np.float64)
        if not np.all(np.isfinite(got)):
            errors[i] = float("inf")
            continue
        errors[i] = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
    return errors


def mlir_module(xla_client, hlo_proto: bytes) -> str:
    """The serialized HloModuleProto as MLIR text a PJRT plugin accepts.

    TensorFlow's XLA bridge copies each return value (``XLA_Retvals``) with ``mhlo.copy``, which has no
    StableHLO counterpart: the GPU plugin's legalisation to StableHLO refuses it. An optimisation barrier
    is the same identity, so each copy becomes one."""
    text = xla_client._xla.mlir.xla_computation_to_mlir_module(xla_client.XlaComputation(hlo_proto))
    return re.sub(r"\bmhlo\.copy\b", "stablehlo.optimization_barrier", text)


def define_flags():  # only when run as a program: export_xla.py imports this module's helpers
    flags.DEFINE_string("export_dir", None, "Folder written by benchmarks/export_xla.py.")
    flags.DEFINE_string("output", None, "Write the results as JSON here.")
    flags.DEFINE_integer("repeats", 20, "Timed repetitions per case (the median is reported).")
    flags.DEFINE_integer("iters", 10, "Back-to-back calls per timed repetition.")
    flags.DEFINE_list("cases", None, "Only these case names (default: all exported).")
    flags.DEFINE_integer("big_matmul", 8192, "Size of the second matmul (a GPU's peak needs a large one).")
    flags.DEFINE_string(
        "train_dir",
        None,
        "Train mode: run each case's `train` schedule and write its state here after every call.",
    )
    flags.DEFINE_integer(
        "snapshot_every",
        0,
        "Train mode: also keep the state after every N-th call as <case>_state_at<calls>.npz (the newest "
        "one only), so that cases trained in separate processes and stopped at a deadline can be cut back "
        "to a call count they all reached (xla_profqi.py --mode=finish does).",
    )
    flags.mark_flag_as_required("export_dir")


def load_executable(backend, device, xla_client, name: str):
    """``(executable, compile seconds)`` of the exported case ``name`` on ``device``."""
    with open(os.path.join(FLAGS.export_dir, name + ".hlo.pb"), "rb") as f:
        module = mlir_module(xla_client, f.read())
    start = time.perf_counter()
    exe = backend.compile_and_load(module, [device])
    return exe, time.perf_counter() - start


def run_step(exe, state: list, aliases) -> list:
    """One call; the variables it updates in place come back as outputs and replace their inputs in
    ``state`` for the next call, as in a training loop (their input buffers are donated)."""
    outs = [r[0] for r in exe.execute_sharded(state).disassemble_into_single_device_arrays()]
    for out, param in aliases:
        state[param] = outs[out]
    return outs


def _time(fn, repeats, iters):
    import jax

    jax.block_until_ready(fn())  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            out = fn()
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / iters)
    return statistics.median(times)


def matmul_gflops(n, precision, repeats, dtype="float32", iters=10):
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), dtype)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), dtype)
    f = jax.jit(lambda x, y: jnp.matmul(x, y, precision=precision))
    return 2 * n**3 / _time(lambda: f(a, b), repeats, iters) / 1e9


def snapshot_path(train_dir: str, name: str, calls: int) -> str:
    return os.path.join(train_dir, f"{name}_state_at{calls}.npz")


def keep_snapshot(train_dir: str, name: str, calls: int, every: int) -> None:
    """Copies ``<name>_state.npz`` (just written after call ``calls``) to its snapshot and removes the
    previous snapshot (``calls - every``)."""
    shutil.copyfile(os.path.join(train_dir, name + "_state.npz"), snapshot_path(train_dir, name, calls))
    previous = snapshot_path(train_dir, name, calls - every)
    if os.path.exists(previous):
        os.remove(previous)


def hardware(meta, device) -> dict:
    """What the exported programs train on here, as the run folder's ``metrics.json`` records it under
    ``hardware`` (`pbo_tf.experiments.hardware`): the device, and the precision the programs' float32 dots
    ask for (``default`` when TensorFlow exported them with TensorFloat-32 enabled, its default; ``highest``
    with it off), which a GPU with TF32 (compute capability 8.0 or higher) runs in TF32."""
    import jax

    tf32_enabled = meta.get("exported_with", {}).get("tf32", True)
    precision = "default" if tf32_enabled else "highest"
    capability = getattr(device, "compute_capability", None)
    has_tf32 = capability is None or tuple(int(x) for x in str(capability).split(".")) >= (8, 0)
    gpu = device.platform == "gpu"
    return {
        "device": str(getattr(device, "device_kind", device)) if gpu else "CPU",
        "platform": device.platform,
        "framework": f"jax {jax.__version__}",
        "matmul_precision": precision,
        "tf32": bool(gpu and has_tf32 and precision == "default"),
    }


def train(meta, backend, device, xla_client):
    """Runs each case's ``train`` schedule: ``calls`` calls, input ``counter_input`` set to
    ``counter_start + call × counter_step``, the variables fed back; after every call writes
    ``<name>_state.npz`` (the aliased parameters' values ``param_<i>``, the first output of every call so
    far, the seconds of each call) so a run cut short keeps what it did; with ``--snapshot_every=N`` also
    the newest ``<name>_state_at<calls>.npz`` with ``calls`` a multiple of N. Before the first call,
    ``<name>_hardware.json``: the `hardware` it trains on."""
    import jax

    for case in meta["cases"]:
        if "train" not in case or (FLAGS.cases and case["name"] not in FLAGS.cases):
            continue
        name, schedule = case["name"], case["train"]
        path = os.path.join(FLAGS.train_dir, name + "_hardware.json")
        with open(path + ".tmp", "w") as f:
            json.dump(hardware(meta, device), f, indent=1)
        os.replace(path + ".tmp", path)
        exe, compile_s = load_executable(backend, device, xla_client, name)
        print(f"{name}: compiled in {compile_s:.1f}s", flush=True)
        state = [jax.device_put(x, device) for x in load_inputs(FLAGS.export_dir, case)]
        counter = case["inputs"][schedule["counter_input"]]
        first_outputs, seconds = [], []
        for call in range(schedule["calls"]):
            value = schedule.get("counter_start", 0) + call * schedule["counter_step"]
            value = np.asarray(value, numpy_dtype(counter["dtype"]))
            state[schedule["counter_input"]] = jax.device_put(value, device)
            start = time.perf_counter()
            outs = run_step(exe, state, case["aliases"])
            first_outputs.append(np.asarray(outs[0]))  # (waits for the call)
            seconds.append(time.perf_counter() - start)
            arrays = {f"param_{p}": np.asarray(state[p]) for _, p in case["aliases"]}
            tmp = os.path.join(FLAGS.train_dir, name + "_state.tmp.npz")
            np.savez(tmp, first_outputs=np.stack(first_outputs), seconds=np.asarray(seconds), **arrays)
            os.replace(tmp, os.path.join(FLAGS.train_dir, name + "_state.npz"))
            if FLAGS.snapshot_every and (call + 1) % FLAGS.snapshot_every == 0:
                keep_snapshot(FLAGS.train_dir, name, call + 1, FLAGS.snapshot_every)
            print(f"{name}: call {call + 1}/{schedule['calls']} in {seconds[-1]:.2f}s, "
                  f"last output {np.asarray(outs[0]).reshape(-1)[-1]:.4g}", flush=True)  # fmt: skip


def main(argv):
    del argv
    import jax
    import jax.extend

    jax.config.update("jax_enable_x64", True)  # the programs take int64 counters
    from jax._src.lib import xla_client

    with open(os.path.join(FLAGS.export_dir, "cases.json")) as f:
        meta = json.load(f)
    device = jax.devices()[0]
    backend = jax.extend.backend.get_backend()
    if FLAGS.train_dir:
        os.makedirs(FLAGS.train_dir, exist_ok=True)
        return train(meta, backend, device, xla_client)
    results = {
        "device": str(getattr(device, "device_kind", device)),
        "platform": device.platform,
        "jax_version": jax.__version__,
        "exported_with": meta.get("exported_with", {}),
    }
    print(f"device: {results['device']} ({device.platform}), jax {jax.__version__}", flush=True)

    def save():
        if FLAGS.output:
            tmp = FLAGS.output + ".tmp"
            with open(tmp, "w") as f:
                json.dump(results, f, indent=2)
            os.replace(tmp, FLAGS.output)

    big_n = FLAGS.big_matmul
    for n in (1024, big_n):
        # the 1024^3 matmul timed as the cases are (--repeats x --iters), the big one 5 x 2
        repeats, iters = (5, 2) if n > 1024 else (FLAGS.repeats, FLAGS.iters)
        for label, precision in (("", "default"), ("_highest", "highest")):
            gflops = matmul_gflops(n, precision, repeats, iters=iters)
            results[f"matmul{n}{label}_gflops"] = gflops
            print(f"fp32 matmul {n}^3, precision {precision}: {gflops:.0f} GFLOP/s", flush=True)
    results["matmul1024_bfloat16_gflops"] = matmul_gflops(
        1024, "default", FLAGS.repeats, "bfloat16", FLAGS.iters
    )
    peak = results["matmul_gflops"] = results["matmul1024_gflops"]
    big = results["matmul_big_gflops"] = results[f"matmul{big_n}_gflops"]
    save()

    rows = []
    for case in meta["cases"]:
        if FLAGS.cases and case["name"] not in FLAGS.cases:
            continue
        name = case["name"]
        try:
            exe, compile_s = load_executable(backend, device, xla_client, name)
            state = [jax.device_put(x, device) for x in load_inputs(FLAGS.export_dir, case)]

            def call(exe=exe, state=state, aliases=case["aliases"]):
                return run_step(exe, state, aliases)

            outputs = [np.asarray(x) for x in call()]
            errors = reference_error(case, outputs, np.load(os.path.join(FLAGS.export_dir, name + ".npz")))
            seconds = _time(call, FLAGS.repeats, FLAGS.iters)
        except Exception as e:  # noqa: BLE001  (one case failing must not lose the others)
            results[f"{name}_error"] = f"{type(e).__name__}: {e}"[:2000]
            print(f"  {name}: FAILED {results[f'{name}_error'][:300]}", flush=True)
            save()
            continue
        ms = seconds / case["steps_per_call"] * 1e3
        worst = max(errors.values()) if errors else float("nan")
        results[f"{name}_step_ms"] = ms
        results[f"{name}_compile_s"] = compile_s
        results[f"{name}_max_relative_error"] = worst
        results[f"{name}_relative_errors"] = {str(i): e for i, e in errors.items()}
        if case["flops"]:
            results[f"{name}_fraction_of_peak"] = case["flops"] / (ms * 1e-3) / 1e9 / peak
            results[f"{name}_fraction_of_big_peak"] = case["flops"] / (ms * 1e-3) / 1e9 / big
        rows.append((name, ms, case["flops"], worst, compile_s))
        print(f"  {name}: {ms:.4f} ms/step, max rel. error vs TensorFlow {worst:.1e}, "
              f"compile {compile_s:.1f}s", flush=True)  # fmt: skip
        save()

    # The seeds20 speedup on this device: 20 sequential single-seed runs take 20 x one seed's time
    # (the same program on other data), so the ratio of per-seed-step times is the throughput ratio.
    for one, many, key in (
        ("car_on_hill_profqi_outer", "car_on_hill_profqi_seeds20_outer", "seeds20_speedup"),
        ("car_on_hill_profqi_step", "car_on_hill_profqi_seeds20_stacked_step", "seeds20_step_speedup"),
    ):
        if f"{one}_step_ms" in results and f"{many}_step_ms" in results:
            results[key] = results[f"{one}_step_ms"] / results[f"{many}_step_ms"]
            print(f"{key}: {results[key]:.2f}x ({one} per step / {many} per seed-step)")
    print(f"fp32 matmul: {peak:.0f} GFLOP/s at 1024^3, {big:.0f} at {big_n}^3 (default precision)")
    print(
        f"{'case':44s} {'ms/step':>10s} {'MFLOP/step':>11s} {'of 1024^3':>9s} {'of big':>9s} {'rel.err':>8s}"
    )
    for name, ms, flops, err, _ in rows:
        achieved = flops / (ms * 1e-3) / 1e9 if flops else float("nan")
        print(f"{name:44s} {ms:10.4f} {flops / 1e6:11.2f} {achieved / peak:9.1%} {achieved / big:9.1%} "
              f"{err:8.1e}")  # fmt: skip
    save()


if __name__ == "__main__":
    define_flags()
    app.run(main)
