r"""Measures gradient-step wall times side by side in one run, against the machine's matmul throughput.

  python launch/benchmark.py --output=results/benchmark.json [--repeats=3] [--steps=200]

Prints, for each case, the median wall time per gradient step inside the real trainer's compiled loop
(dataset gathering and the Adam update included), the analytic FLOPs of one step, and the achieved
GFLOP/s as a fraction of the measured fp32 dense matmul throughput (median of repeated 1024³ matmuls in
TF). Cases: chain-walk and LQR ProFQI at the paper's shapes (foundation issue), the car-on-hill ProFQI step
(K=9, d=151, 30 vectors, 500 transitions, deep PBO [2,2,2,2]) on synthetic transitions, and the chain-walk
FQI step. Compare numbers only within one run: the machine is shared and noisy.
"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

import pbo_tf  # noqa: E402,F401

FLAGS = flags.FLAGS
flags.DEFINE_string("output", None, "Write the results as JSON here.")
flags.DEFINE_integer("repeats", 3, "Timed repetitions per case (the median is reported).")
flags.DEFINE_integer("steps", 200, "Gradient steps per timed repetition (rounded to whole epochs).")
flags.DEFINE_boolean("jit_compile", False, "Also time each ProFQI case with XLA on the gradient step.")


def _median_time(fn, repeats):
    fn()  # trace / warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_gflops(repeats: int) -> float:
    import tensorflow as tf

    a = tf.random.normal([1024, 1024])
    b = tf.random.normal([1024, 1024])
    f = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)))
    seconds = _median_time(lambda: [f(a, b).numpy() for _ in range(5)], max(repeats, 3)) / 5
    return 2 * 1024**3 / seconds / 1e9


def _mlp_flops(sizes, rows):
    return sum(2 * rows * i * o for i, o in zip(sizes[:-1], sizes[1:], strict=True))


def profqi_case(name, q, pbo_factory, data, K, n_w, batch_size, gamma, steps, repeats, jit, cache=True):
    """Median ms per ProFQI gradient step of `ProFQITrainer`'s compiled outer loop."""
    import tensorflow as tf

    from pbo_tf.trainers.profqi import ProFQITrainer

    per_epoch = len(data) // batch_size
    epochs = max(1, steps // per_epoch)
    trainer = ProFQITrainer(
        pbo_factory(), pbo_factory(), q, data.to_dataset(), len(data), q.initial_params(n_w, 0), K, gamma,
        epochs=epochs, training_steps=1, batch_size=batch_size, w_batch_size=n_w, lr_start=1e-4,
        lr_end=1e-5, seed=0, log=None, jit_compile=jit, cache_targets=cache,
    )  # fmt: skip
    chain = tf.zeros([K, n_w, q.d])
    n_steps = epochs * per_epoch
    seconds = _median_time(lambda: trainer._run_outer(tf.constant(0, tf.int64), chain).numpy(), repeats)
    return seconds / n_steps * 1e3


def fqi_case(q, data, batch_size, gamma, steps, repeats):
    import tensorflow as tf

    from pbo_tf.trainers.fqi import FQITrainer

    trainer = FQITrainer(
        q, data.to_dataset(), len(data), q.initial_params(1, 0)[0], 1, gamma, fitting_steps=1, patience=1,
        batch_size=batch_size, lr_start=1e-3, lr_end=1e-4, seed=0, log=None,
    )  # fmt: skip
    target = tf.constant(q.initial_params(1, 0))
    epochs = max(1, steps // trainer.batches_per_pass)
    k = tf.constant(0, tf.int64)

    def run():
        for e in range(epochs):
            trainer._epoch(k, tf.constant(e, tf.int64), target).numpy()

    return _median_time(run, repeats) / (epochs * trainer.batches_per_pass) * 1e3


def main(argv):
    del argv
    import numpy as np

    from pbo_tf.data.transitions import Transitions
    from pbo_tf.experiments.problems import ChainWalkProblem, LQRProblem
    from pbo_tf.operators import DeepPBO, LinearPBO
    from pbo_tf.q import FlatMLPQ

    peak = matmul_gflops(FLAGS.repeats)
    print(f"fp32 matmul (1024^3, median): {peak:.1f} GFLOP/s")
    rows, results = [], {"matmul_gflops": peak}

    cw = ChainWalkProblem()
    cw_q, cw_data = cw.q_family(), cw.dataset(0)
    lq = LQRProblem()
    lq_q, lq_data = lq.q_family(), lq.dataset(0)
    rng = np.random.default_rng(0)
    coh_q = FlatMLPQ(2, [30], [-1.0, 1.0])
    states = rng.uniform([-1, -3], [1, 3], size=(500, 2))
    coh_data = Transitions.from_arrays(
        states, rng.integers(0, 2, 500), rng.choice([0.0, 1.0, -1.0], 500, p=[0.9, 0.05, 0.05]),
        np.clip(states + rng.normal(0, 0.1, (500, 2)), -1, 1), rng.random(500) < 0.05,
    )  # fmt: skip

    # Analytic FLOPs of one gradient step (forward + backward ≈ 3× forward for the differentiated part).
    def linear_flops(K, n_w, d):
        return 3 * K * 2 * n_w * d * d

    def deep_flops(K, n_w, d, hidden):
        return 3 * K * _mlp_flops([d, *hidden, d], n_w)

    coh_hidden = [2 * 151] * 4
    coh_flops = deep_flops(9, 30, 151, coh_hidden) + 3 * 9 * 30 * _mlp_flops([3, 30, 1], 500)
    cases = [
        ("chain_walk_profqi", cw_q, lambda: LinearPBO(40), cw_data, 5, 100, 20, cw.gamma,
         linear_flops(5, 100, 40)),
        ("lqr_profqi", lq_q, lambda: DeepPBO(2, hidden_units=[8]), lq_data, 3, 5, 121, lq.gamma,
         deep_flops(3, 5, 2, [8])),
        ("car_on_hill_profqi", coh_q, lambda: DeepPBO(151, hidden_multiples=[2, 2, 2, 2]), coh_data,
         9, 30, 500, 0.95, coh_flops),
    ]  # fmt: skip
    for name, q, factory, data, K, n_w, bs, gamma, flops in cases:
        variants = [("", False, True), ("_per_step_targets", False, False)]
        if FLAGS.jit_compile:
            variants.append(("_xla", True, True))
        for suffix, jit, cache in variants:
            ms = profqi_case(
                name, q, factory, data, K, n_w, bs, gamma, FLAGS.steps, FLAGS.repeats, jit, cache
            )
            fraction = flops / (ms / 1e3) / 1e9 / peak
            results[f"{name}{suffix}_step_ms"] = ms
            results[f"{name}{suffix}_fraction_of_peak"] = fraction
            rows.append((f"{name}{suffix}", ms, flops, fraction))
    ms = fqi_case(cw_q, cw_data, 20, cw.gamma, FLAGS.steps, FLAGS.repeats)
    results["fqi_step_ms"] = ms
    rows.append(("chain_walk_fqi", ms, float("nan"), float("nan")))

    print(f"{'case':40s} {'ms/step':>9s} {'MFLOP/step':>11s} {'of peak':>8s}")
    for name, ms, flops, fraction in rows:
        print(f"{name:40s} {ms:9.3f} {flops / 1e6:11.2f} {fraction:8.1%}")
    if FLAGS.output:
        from pbo_tf.io import write_text_atomic

        write_text_atomic(FLAGS.output, json.dumps(results, indent=2) + "\n")
        print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
