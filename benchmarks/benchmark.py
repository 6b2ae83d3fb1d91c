r"""Measures gradient-step wall times side by side in one run, against the machine's matmul throughput.

  python benchmarks/benchmark.py --output=results/benchmark.json [--cases=...] [--repeats=3] [--steps=200]
  python benchmarks/benchmark.py --toy --cases=...     # every case at toy sizes, in seconds (the tests)

Prints, for each case, the median wall time per Adam (gradient) step inside the real trainer's or agent's
compiled loop (dataset gathering and the Adam update included), the analytic FLOPs of the work done, and
the achieved GFLOP/s as a fraction of the measured fp32 dense matmul throughput (median of repeated 1024³
matmuls in TF). The car-on-hill ProFQI and Lunar Lander ProDQN cases also give the time and FLOPs per
training step (the paper's: a pass over the dataset offline, 11 Adam steps; one `ProDQNAgent.train` call
online, ceil(|W| / w_batch_size) = 2 Adam steps). The cases (``--cases``; `benchmarks/README.md` lists them)
time the library's code paths at the paper's sizes (`benchmarks.cases`): the trainers' ``jit_compile``
modes, bfloat16, the ProDQN agent, the seeds batched both ways, thread pools, the evaluations and the
end-to-end share of `train()`. Compare numbers only within one run: the machine is shared and noisy.

The host's own speed drifts within a run, so each fraction is given three times: against the matmul
measured first (``*_fraction_of_peak``), against the best measured in the run (``*_fraction_of_best_peak``,
the conservative one) and against a matmul measured right after the case (``*_fraction_of_adjacent_peak``,
the machine as the case saw it). Ratios between two ways of running are medians of ratios timed side by
side (A B A B ...).
"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from pbo_tf.cli.common import import_tensorflow_quietly  # noqa: E402

import_tensorflow_quietly()  # TensorFlow's start-up lines, and its cuInit error on a CPU, left out

import pbo_tf  # noqa: E402,F401
from benchmarks.cases import (  # noqa: E402
    CAR_ON_HILL,
    CAR_ON_HILL_TOY,
    LUNAR_LANDER,
    LUNAR_LANDER_TOY,
    car_on_hill_data,
    car_on_hill_pbo,
    car_on_hill_q,
    car_on_hill_recommended,
    fqi_trainer,
    ifqi_refresh_call,
    mlp_flops,
    prodqn_agent_train,
    prodqn_train_step_flops,
    profqi_refresh_flops,
    profqi_trainer,
    profqi_trainers,
    step_weight_bytes,
    synthetic_transitions,
)

CASES_DEFAULT = (
    "foundation", "car_on_hill", "mixed", "prodqn_agent", "fqi", "ifqi", "end_to_end", "seeds", "evaluation"
)  # fmt: skip
# "threads" re-runs the small cases in child processes with TensorFlow's default thread pools and with one
# intra-op thread, alternately ("threads_probe" is what each child runs).
# "operator_scaling" times the deep, convolutional and equivariant operators' Adam steps from car-on-hill's
# d = 151 to a [256, 256] Q network's 67 585.
CASES = (*CASES_DEFAULT, "threads", "threads_probe", "operator_scaling")
# The keys of the car-on-hill and Lunar Lander cases' headline variants (`record_call`'s).
STEP_KEYS = (
    "adam_step_ms", "train_step_ms", "adam_steps_per_train_step", "adam_step_flops", "train_step_flops",
    "fraction_of_peak",
)  # fmt: skip
# --toy: the counts below, toy sizes (`cases.CAR_ON_HILL_TOY`, `cases.LUNAR_LANDER_TOY`, small matmuls and
# evaluations) and graph mode where a case asks for XLA (`cases.XLA`), so every case runs in seconds: a check
# that the cases run and report, not a measurement.
TOY_FLAGS = dict(
    repeats=1, steps=2, ll_steps=1, fqi_epochs=2, e2e_refreshes=1, seeds=2, seed_epochs=1, thread_rounds=1,
    bicycle_eval_steps=10, scaling_steps=1,
)  # fmt: skip
FLAGS = flags.FLAGS


def define_flags():  # when run as a program: the tests import this module's functions
    flags.DEFINE_string("output", None, "Write the results as JSON here.")
    flags.DEFINE_integer("repeats", 3, "Timed repetitions per case (the median is reported).")
    flags.DEFINE_integer(
        "steps",
        200,
        "Gradient steps per timed repetition of the foundation and threads cases (whole passes).",
    )
    flags.DEFINE_list("cases", list(CASES_DEFAULT), f"Which cases to run, among {list(CASES)}.")
    flags.DEFINE_bool("toy", False, f"Toy sizes and counts ({TOY_FLAGS}, overriding those flags).")
    flags.DEFINE_integer(
        "ll_steps",
        3,
        "Training steps (`ProDQNAgent.train` calls) per timed repetition of the Lunar Lander case.",
    )
    flags.DEFINE_integer(
        "fqi_epochs",
        100,
        "Epochs per timed FQI iteration (real iterations run up to 1 200 with patience 30).",
    )
    flags.DEFINE_integer(
        "e2e_refreshes", 3, "Refreshes per timed ProFQITrainer.train() call of the end_to_end case."
    )
    flags.DEFINE_integer("seeds", 20, "Seeds of the batched-seeds case.")
    flags.DEFINE_integer(
        "seed_epochs",
        10,
        "Epochs (of 1 step each, 500 transitions) per compiled call and seed in the seeds case. With 1, "
        "each sequential call's fixed cost (tens of ms) outweighs its step and inflates the ratio; real "
        "runs make 1000 epochs per call.",
    )
    flags.DEFINE_integer(
        "thread_rounds", 2, "Rounds of the threads case (each: default child, one-thread child)."
    )
    flags.DEFINE_integer(
        "intra_op_threads", 0, "TensorFlow's intra-op threads for this process (0 = default)."
    )
    flags.DEFINE_integer(
        "inter_op_threads", 0, "TensorFlow's inter-op threads for this process (0 = default)."
    )
    flags.DEFINE_integer("bicycle_eval_steps", 2000, "Steps of the bicycle evaluation case (paper: 50 000).")
    flags.DEFINE_integer("scaling_steps", 2, "Adam steps per timed call of the operator_scaling case.")


def _median_time(fn, repeats):
    fn()  # trace / warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_gflops(repeats: int, n: int = 1024) -> float:
    """The median GFLOP/s of ``n``³ fp32 matmuls (1024³: the benchmark's peak)."""
    import tensorflow as tf

    a = tf.random.normal([n, n])
    b = tf.random.normal([n, n])
    f = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)))
    seconds = _median_time(lambda: [f(a, b).numpy() for _ in range(5)], max(repeats, 3)) / 5
    return 2 * n**3 / seconds / 1e9


def memory_read_gbs(repeats: int, n: int = 64 * 2**20) -> float:
    """The host's memory read bandwidth as TensorFlow sees it: median GB/s of ``tf.reduce_sum`` over ``n``
    float32 values (the default, 256 MiB, is far above any last-level cache)."""
    import tensorflow as tf

    x = tf.Variable(tf.ones([n]))
    f = tf.function(lambda: tf.reduce_sum(x))
    seconds = _median_time(lambda: [f().numpy() for _ in range(3)], max(repeats, 3)) / 3
    return x.shape.num_elements() * 4 / seconds / 1e9


def _fraction(flops, ms, gflops):
    """Achieved GFLOP/s of ``flops`` in ``ms`` ÷ ``gflops`` (NaN when the case has no FLOP count)."""
    return flops / (ms / 1e3) / 1e9 / gflops if flops == flops else float("nan")


def _random_params(q, n):
    """``n`` random parameter vectors in a Variable: one compiled rollout serves every evaluation (as it
    would during training), and random weights give every policy a non-constant greedy action."""
    import tensorflow as tf

    return tf.Variable(np.random.default_rng(0).normal(0, 0.3, (n, q.d)).astype(np.float32))


def _paired(fn_a, fn_b, rounds):
    """Times ``fn_a`` and ``fn_b`` side by side (A B A B ..., after one warm-up call each): the host's
    speed drifts up to 3x within a run, so a ratio of medians taken minutes apart can mislead. Returns
    ``(median of the per-pair ratios t_a / t_b, median t_a, median t_b)`` in seconds."""
    fn_a()
    fn_b()
    t_a, t_b = [], []
    for _ in range(rounds):
        for fn, times in ((fn_a, t_a), (fn_b, t_b)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    ratio = statistics.median(a / b for a, b in zip(t_a, t_b, strict=True))
    return ratio, statistics.median(t_a), statistics.median(t_b)


def profqi_call(q, pbo_factory, data, K, n_w, batch_size, gamma, steps, jit):
    """``(call, n_steps)``: one call of `ProFQITrainer`'s compiled refresh (``n_steps`` steps)."""
    per_pass = len(data) // batch_size
    passes = max(1, steps // per_pass)
    trainer = profqi_trainer(q, pbo_factory, data, K, n_w, batch_size, gamma, passes, jit)
    first = trainer.first_pass(0)
    return (lambda: trainer.run_round(first).numpy()), passes * per_pass


def profqi_refresh_call(q, pbo_factory, sizes, data, jit, w_set=None, **trainer_options):
    """``(call, trainer)``: one call of `ProFQITrainer`'s compiled refresh at ``sizes`` (``sizes.passes``
    passes over ``data``; ``trainer.steps_per_refresh`` Adam steps; ``w_set`` default the paper's W;
    ``trainer_options`` more of the trainer's keywords, e.g. the loss's)."""
    s = sizes
    trainer = profqi_trainer(
        q, pbo_factory, data, s.K, s.n_w, s.batch, s.gamma, s.passes, jit, w_set=w_set, **trainer_options
    )
    first = trainer.first_pass(0)
    return (lambda: trainer.run_round(first).numpy()), trainer


def profqi_case(q, pbo_factory, data, K, n_w, batch_size, gamma, steps, repeats, jit):
    """Median ms per ProFQI gradient step of `ProFQITrainer`'s compiled refresh."""
    call, n_steps = profqi_call(q, pbo_factory, data, K, n_w, batch_size, gamma, steps, jit)
    return _median_time(call, repeats) / n_steps * 1e3


def fqi_call(q, data, batch_size, gamma, epochs, jit):
    """``(call, n_steps)``: one compiled FQI iteration of ``epochs`` epochs (no early stop while timing;
    the call's fixed costs, the targets and the first pass's order, are included)."""
    import tensorflow as tf

    trainer = fqi_trainer(q, data, batch_size, gamma, epochs, jit)
    target = tf.constant(q.initial_params(1, 0))
    k = tf.constant(0, tf.int64)
    return (lambda: [x.numpy() for x in trainer.run_round(k, target)]), epochs * trainer.batches_per_pass


def fqi_iteration_case(q, data, batch_size, gamma, epochs, repeats, jit):
    """Median ms per FQI gradient step inside one compiled iteration of ``epochs`` epochs."""
    call, n_steps = fqi_call(q, data, batch_size, gamma, epochs, jit)
    return _median_time(call, repeats) / n_steps * 1e3


def end_to_end_trainer(q, pbo_factory, data, K, n_w, batch_size, gamma, passes, refreshes, rounds):
    """A `ProFQITrainer` for `end_to_end_vs_bare` (``refreshes`` per timed call, ``rounds`` rounds) that
    writes its checkpoints and summaries to a temporary folder."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="pbo_e2e_")
    return profqi_trainer(
        q, pbo_factory, data, K, n_w, batch_size, gamma, passes, "round",
        refreshes=end_to_end_refreshes(refreshes, rounds), checkpoint_dir=os.path.join(folder, "checkpoints"),
        summary_dir=os.path.join(folder, "tb"),
    )  # fmt: skip


def end_to_end_refreshes(refreshes, rounds):
    """The refreshes `end_to_end_vs_bare` runs in all (its trainer must have at least these)."""
    return refreshes * (3 * rounds + 2) + 1


def end_to_end_vs_bare(trainer, refreshes, rounds):
    """A `ProFQITrainer`'s gradient steps/s end to end against its bare compiled refresh, measured two ways.

    A: ``trainer.train(max_rounds=refreshes)`` (divergence check, summaries, progress and the final
    checkpoint included, as the trainer was built: `end_to_end_trainer` writes them to a temporary folder).
    B: the same number of calls of the compiled refresh (``φ̄ ← φ``, target chain and passes, one program)
    alone. Both are compiled before timing. The trainer needs `end_to_end_refreshes` refreshes.

    Returns ``{"inside": fraction of A's wall time spent inside the compiled refresh calls (the end-to-end
    rate over the bare rate, measured within the same calls, so a loaded host's drift cancels), "paired":
    the median per-pair ratio t_B / t_A (the same ratio of rates, A and B timed alternately), "t_train",
    "t_bare": the median seconds of A and of B, "steps": gradient steps per call}``.
    """
    trainer.train(max_rounds=1)  # compile
    first = trainer.first_pass(1)

    def bare():
        for _ in range(refreshes):
            trainer.run_round(first).numpy()

    paired, t_bare, t_train = _paired(bare, lambda: trainer.train(max_rounds=refreshes), rounds)
    # `train` calls the trainer's `run_round` attribute: a timing wrapper there sees every compiled call.
    compiled, inside = trainer.run_round, [0.0]

    def timed(first_pass):
        start = time.perf_counter()
        out = compiled(first_pass)
        out.numpy()  # the call's result is ready: its whole time counts as inside
        inside[0] += time.perf_counter() - start
        return out

    trainer.run_round = timed
    fractions = []
    for _ in range(rounds):
        inside[0] = 0.0
        start = time.perf_counter()
        trainer.train(max_rounds=refreshes)
        fractions.append(inside[0] / (time.perf_counter() - start))
    trainer.run_round = compiled
    steps = refreshes * trainer.steps_per_refresh
    return {"inside": statistics.median(fractions), "paired": paired, "t_train": t_train, "t_bare": t_bare,
            "steps": steps}  # fmt: skip


def _sequential_and_in_one_graph(calls, repeats):
    """Times ``calls`` (``[(fn, args)]``, each returning a tensor) one after the other and inside one
    `tf.function` (TensorFlow runs the independent calls concurrently), side by side; returns `_paired`'s
    ``(ratio, t_sequential, t_one_graph)``."""
    import tensorflow as tf

    @tf.function
    def together(all_args):
        return [fn(*args) for (fn, _), args in zip(calls, all_args, strict=True)]

    all_args = [args for _, args in calls]
    return _paired(_sequential(calls), lambda: [x.numpy() for x in together(all_args)], repeats)


def _sequential(calls):
    """A function running ``calls`` (``[(fn, args)]``, each returning a tensor) one after the other."""

    def run():
        for fn, args in calls:
            fn(*args).numpy()

    return run


def seeds_speedup(q, pbo_factory, datasets, K, n_w, batch_size, gamma, epochs, repeats, jit):
    """Throughput of S ProFQI seeds batched ÷ the same S seeds run one after the other, both ways the library
    batches them: ``{"side_by_side": (ratio, t_seq, t_batched), "seed_axis": (...)}``, each timed side by
    side with its own sequential runs. ``side_by_side`` (`train_seeds`' default) runs the S loops in one
    graph; ``seed_axis`` (`seed_axis_rounds`) is one compiled step for all seeds, the operators' weights
    stacked."""
    from pbo_tf.trainers.seed_batch import stacked_refresh_loop

    trainers = profqi_trainers(q, pbo_factory, datasets, K, n_w, batch_size, gamma, epochs, jit)
    calls = [(t.run_round, t.begin_round(0)) for t in trainers]
    side_by_side = _sequential_and_in_one_graph(calls, max(repeats, 5))
    stacked = stacked_refresh_loop(trainers)  # what the seed axis (`seed_axis_rounds`) runs
    firsts = [t.first_pass(0) for t in trainers]
    seed_axis = _paired(_sequential(calls), lambda: stacked(firsts).numpy(), max(repeats, 5))
    return {"side_by_side": side_by_side, "seed_axis": seed_axis}


def fqi_seeds_case(q, datasets, batch_size, gamma, epochs, repeats, jit="round"):
    """Per seed-step seconds of S FQI iterations run one after the other and in one graph (as
    `train_seeds` runs them), timed side by side; returns ``(ratio, t_sequential, t_batched)``."""
    trainers = [
        fqi_trainer(q, data, batch_size, gamma, epochs, jit, seed=s) for s, data in enumerate(datasets)
    ]
    calls = [(lambda k, p, t=t: t.run_round(k, p)[1], t.begin_round(0)) for t in trainers]
    ratio, t_seq, t_bat = _sequential_and_in_one_graph(calls, repeats)
    steps = len(trainers) * epochs * trainers[0].batches_per_pass
    return ratio, t_seq / steps, t_bat / steps


def threads_probe(coh, coh_q, coh_pbo, coh_small, coh_full, n_seeds, repeats, fqi_epochs, steps):
    """What the threads case measures in each child: ms per step of the car-on-hill FQI iteration and
    ProFQI step (``coh``: the sizes), and ms per seed-step of S car-on-hill FQI seeds, sequential and in one
    graph."""
    out = {}
    out["fqi_step_ms"] = fqi_iteration_case(
        coh_q, coh_full, coh.batch, coh.gamma, fqi_epochs, repeats, "round"
    )
    out["profqi_step_ms"] = profqi_case(
        coh_q, coh_pbo, coh_small, coh.K, coh.n_w, coh.batch, coh.gamma, steps, repeats, "round"
    )
    datasets = [synthetic_transitions(np.random.default_rng(s), coh.n_transitions, [-1, -3], [1, 3], 2)
                for s in range(n_seeds)]  # fmt: skip
    _, t_seq, t_bat = fqi_seeds_case(coh_q, datasets, coh.batch, coh.gamma, max(fqi_epochs // 10, 1), repeats)
    out["fqi_seeds_sequential_ms"], out["fqi_seeds_batched_ms"] = t_seq * 1e3, t_bat * 1e3
    return out


def threads_child_env():
    """The environment of a threads-case child: this process's, without TensorFlow's thread-count variables
    (``TF_NUM_INTRAOP_THREADS``, ``TF_NUM_INTEROP_THREADS``), so that the default child runs TensorFlow's
    default pools and each child only the pools its flags name."""
    dropped = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
    return {k: v for k, v in os.environ.items() if k not in dropped}


def threads_case(n_rounds):
    """Runs `threads_probe` in child processes, alternately with TensorFlow's default thread pools and with
    one intra-op thread (2 inter-op threads), ``n_rounds`` times each; returns each child's results."""
    import subprocess
    import tempfile

    runs = {"default": [], "one_thread": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(n_rounds):
            for name, intra, inter in (("default", 0, 0), ("one_thread", 1, 2)):
                path = os.path.join(tmp, f"{name}_{r}.json")
                cmd = [sys.executable, os.path.abspath(__file__), "--cases=threads_probe", f"--output={path}",
                       f"--intra_op_threads={intra}", f"--inter_op_threads={inter}",
                       f"--repeats={FLAGS.repeats}", f"--fqi_epochs={FLAGS.fqi_epochs}",
                       f"--steps={FLAGS.steps}", f"--seeds={FLAGS.seeds}"]  # fmt: skip
                if FLAGS.toy:  # (the child's toy counts are the ones passed above)
                    cmd.append("--toy")
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=threads_child_env())
                with open(path) as f:
                    runs[name].append(json.load(f))
                print(f"  threads round {r + 1}/{n_rounds}, {name}: " + ", ".join(
                    f"{k} {v:.3f}" for k, v in runs[name][-1].items() if k.startswith("threads_")
                ), flush=True)  # fmt: skip
    return runs


def training_steps_call(train, experience, steps):
    """A call that runs ``steps`` training steps ``train(experience)`` (`cases.prodqn_agent_train`)."""
    return lambda: [float(train(experience).loss) for _ in range(steps)]


def car_on_hill_evaluation_case(q, n_policies, repeats, n_starts=None, horizon=None):
    """Car-on-hill grid evaluation of ``n_policies`` policies (one per k): 100-step greedy rollouts from the
    289 grid cells (the first ``n_starts`` cells and ``horizon`` steps when given), all policies in one
    compiled loop. Returns (cold seconds of the first call, tracing and XLA compilation included; median
    warm seconds; rollouts per second warm)."""

    from pbo_tf.envs import car_on_hill as coh
    from pbo_tf.envs.car_on_hill.evaluation import greedy_rollout_values

    params = _random_params(q, n_policies)
    greedy = lambda states: q.greedy_actions_paired(params, states)  # noqa: E731
    grid = coh.grid_centres("reference")[:n_starts]
    options = {} if horizon is None else {"horizon": horizon}
    start = time.perf_counter()
    greedy_rollout_values(greedy, grid, n_policies, **options)
    cold = time.perf_counter() - start
    warm = _median_time(lambda: greedy_rollout_values(greedy, grid, n_policies, **options), repeats)
    return cold, warm, n_policies * len(grid) / warm


def bicycle_evaluation_case(q, n_policies, n_rollouts, max_steps, repeats):
    """Bicycle evaluation of ``n_policies`` Q policies × ``n_rollouts`` noisy episodes of ``max_steps``
    steps. The Q network's greedy action is computed at every step (the real per-step cost) but the hand-made
    `lean_controller` decides, so no episode falls and every one runs ``max_steps`` steps (the paper's
    evaluation cost for a policy that balances). Returns (cold seconds, warm seconds, policy-steps/s)."""
    import tensorflow as tf

    from pbo_tf.envs import bicycle
    from pbo_tf.envs.bicycle.evaluation import lean_controller, make_rollout_fn

    params = _random_params(q, n_policies)

    def greedy(states):
        q_actions = q.greedy_actions_paired(params, states)  # >= 0: the sum below is the controller's
        return lean_controller(states) + tf.minimum(q_actions, 0)

    fn = make_rollout_fn(greedy, n_policies, n_rollouts)
    run = lambda: fn(0, np.zeros(4), bicycle.NOISE, bicycle.GAMMA, max_steps)["steps"].numpy()  # noqa: E731
    start = time.perf_counter()
    steps = run()
    cold = time.perf_counter() - start
    if not (steps == max_steps).all():
        raise RuntimeError(f"the benchmark's balancing controller fell: {steps.min()} < {max_steps} steps")
    warm = _median_time(run, repeats)
    return cold, warm, n_policies * n_rollouts * max_steps / warm


def ll_bounds(results, peak, ll):
    """What bounds the Lunar Lander Adam step here (the library's configuration, ``ll``: the sizes): the
    time its FLOPs take at the measured matmul throughput, and the time its weight traffic takes at the
    measured read bandwidth (`step_weight_bytes`)."""
    flops = prodqn_train_step_flops(ll) / ll.w_batches  # per Adam step (all W batches are the same size)
    weight_bytes = step_weight_bytes(ll.K, ll.pbo_sizes)
    flop_ms = flops / (peak * 1e9) * 1e3
    byte_ms = weight_bytes / (results["memory_read_gbs"] * 1e9) * 1e3
    results["lunar_lander_prodqn_weight_bytes"] = weight_bytes
    results["lunar_lander_prodqn_flop_bound_ms"] = flop_ms
    results["lunar_lander_prodqn_byte_bound_ms"] = byte_ms
    results["lunar_lander_prodqn_bound"] = "bytes" if byte_ms > flop_ms else "FLOPs"
    print(f"  Lunar Lander Adam step bounds: {flops / 1e9:.1f} GFLOP at the matmul's {peak:.0f} GFLOP/s = "
          f"{flop_ms:.0f} ms; {weight_bytes / 1e9:.2f} GB of weight traffic at "
          f"{results['memory_read_gbs']:.1f} GB/s = {byte_ms:.0f} ms: "
          f"{results['lunar_lander_prodqn_bound']}-bound; measured "
          f"{results['lunar_lander_prodqn_adam_step_ms']:.0f} ms", flush=True)  # fmt: skip


def operator_scaling_case(results: dict, toy: bool, steps: int, repeats: int) -> list[tuple]:
    """The deep, convolutional and equivariant operators' weights and ms per Adam step on the PBO chain loss
    (`cases.operator_adam_step`: K = 10 and 15 rows of W, Lunar Lander's; toy: 2 and 3) for each Q network of
    `cases.OPERATOR_SCALES`, the deep one only where it fits in `cases.DEEP_PBO_MEMORY_LIMIT`; and each
    operator's exponent of cost against d (`cases.log_log_slope`). The deep PBO runs in graph mode (as
    lunar_lander/prodqn.gin runs it), the others under XLA (`main` with --toy: graph mode, `cases.XLA`).
    Returns the rows ``(kind, shape, weights, ms)``."""
    from benchmarks import cases

    scales = cases.OPERATOR_SCALES_TOY if toy else cases.OPERATOR_SCALES
    K, w_rows = (2, 3) if toy else (LUNAR_LANDER.K, LUNAR_LANDER.w_batch)
    print(f"Operators' Adam steps on the PBO chain loss (K = {K}, {w_rows} rows of W)", flush=True)
    rows = []
    for shape in scales:
        for kind in cases.OPERATOR_KINDS:
            key = f"operator_scaling_{kind}_{shape.name}"
            size = cases.deep_pbo_bytes(shape.d)
            if kind == "deep" and size > cases.DEEP_PBO_MEMORY_LIMIT:
                print(f"  {kind:12s} d = {shape.d:6d}: skipped (weights and Adam {size / 2**30:.1f} GiB)")
                continue
            step, pbo = cases.operator_adam_step(kind, shape, K, w_rows, jit=kind != "deep")
            weights = sum(int(np.prod(v.shape)) for v in pbo.trainable_variables)
            start = time.perf_counter()
            step().numpy()  # traced and compiled
            first = time.perf_counter() - start
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                [step() for _ in range(steps)][-1].numpy()
                times.append(time.perf_counter() - start)
            ms = statistics.median(times) / steps * 1e3
            results.update({f"{key}_d": shape.d, f"{key}_weights": weights, f"{key}_adam_step_ms": ms})
            results[f"{key}_first_call_s"] = first
            rows.append((kind, shape, weights, ms))
            print(
                f"  {kind:12s} d = {shape.d:6d}: {weights:11d} weights, {ms:9.2f} ms per Adam step "
                f"(first call, with compilation, {first:.1f} s)",
                flush=True,
            )
            del step, pbo
    for kind in cases.OPERATOR_KINDS:
        points = [(shape.d, ms) for k, shape, _, ms in rows if k == kind]
        exponent = cases.log_log_slope(*zip(*points, strict=True)) if points else float("nan")
        results[f"operator_scaling_{kind}_exponent"] = exponent
        print(f"  {kind}: cost ~ d^{exponent:.2f} over d = {[p[0] for p in points]}", flush=True)
    second = scales[1].name  # Lunar Lander at full size
    deep, equivariant = (
        results.get(f"operator_scaling_{k}_{second}_adam_step_ms") for k in ("deep", "equivariant")
    )
    if deep and equivariant:
        results[f"operator_scaling_{second}_deep_over_equivariant"] = deep / equivariant
        print(f"  {second}: the deep PBO's Adam step / the equivariant one's: {deep / equivariant:.1f}x")
    return rows


def main(argv):
    del argv
    from benchmarks import cases

    xla = cases.XLA
    cases.XLA = not FLAGS.toy  # --toy: every case's program in graph mode (see `cases.XLA`)
    try:
        _run()
    finally:
        cases.XLA = xla


def _run():
    from pbo_tf.experiments.config import set_threads

    set_threads(FLAGS.intra_op_threads, FLAGS.inter_op_threads)
    from pbo_tf.envs.chain_walk.problem import ChainWalkProblem
    from pbo_tf.envs.lqr.problem import LQRProblem
    from pbo_tf.operators import DeepPBO, LinearPBO
    from pbo_tf.q import FlatMLPQ

    unknown = set(FLAGS.cases) - set(CASES)
    if unknown:
        raise app.UsageError(f"unknown --cases {sorted(unknown)}; known: {list(CASES)}")
    if FLAGS.toy:
        for name, value in TOY_FLAGS.items():
            setattr(FLAGS, name, value)
    coh, ll = (CAR_ON_HILL_TOY, LUNAR_LANDER_TOY) if FLAGS.toy else (CAR_ON_HILL, LUNAR_LANDER)
    matmul_n = 128 if FLAGS.toy else 1024
    rng = np.random.default_rng(0)
    coh_q, coh_pbo = car_on_hill_q(coh), lambda dtype=None: car_on_hill_pbo(dtype, coh)
    coh_small = synthetic_transitions(rng, coh.batch, [-1, -3], [1, 3], 2)  # one batch: one step per pass
    coh_full = synthetic_transitions(rng, coh.n_transitions, [-1, -3], [1, 3], 2)
    if FLAGS.cases == ["threads_probe"]:  # a child of the threads case: its numbers only
        from pbo_tf.io import write_text_atomic

        probe = threads_probe(
            coh,
            coh_q,
            coh_pbo,
            coh_small,
            coh_full,
            FLAGS.seeds,
            FLAGS.repeats,
            FLAGS.fqi_epochs,
            FLAGS.steps,
        )
        write_text_atomic(FLAGS.output, json.dumps({f"threads_{k}": v for k, v in probe.items()}) + "\n")
        return

    peak = matmul_gflops(FLAGS.repeats, matmul_n)
    print(f"fp32 matmul ({matmul_n}^3, median): {peak:.1f} GFLOP/s", flush=True)
    rows, results = [], {"matmul_gflops": peak}
    if "prodqn_agent" in FLAGS.cases:
        results["memory_read_gbs"] = memory_read_gbs(FLAGS.repeats, 2**16 if FLAGS.toy else 64 * 2**20)
        print(f"memory read bandwidth (reduce_sum, median): {results['memory_read_gbs']:.1f} GB/s")

    def record(name, ms, flops, unit="step"):
        """``ms`` and ``flops`` per Adam (gradient) step of case ``name`` (``flops`` NaN: not counted)."""
        fraction = _fraction(flops, ms, peak)
        results[f"{name}_{unit}_ms"] = ms
        # The host's speed drifts (up to 3x in one run): also measure the matmul right after the case.
        adjacent = matmul_gflops(1, matmul_n) if flops == flops else float("nan")
        if flops == flops:
            results[f"{name}_{unit}_flops"] = flops
            results[f"{name}_fraction_of_peak"] = fraction
            results[f"{name}_matmul_gflops_adjacent"] = adjacent
            results[f"{name}_fraction_of_adjacent_peak"] = _fraction(flops, ms, adjacent)
        rows.append((name, ms, flops, fraction, adjacent))
        print(f"  {name}: {ms:.3f} ms per {unit.replace('_', ' ')}", flush=True)
        save()

    def record_call(name, seconds, flops, adam_steps, train_steps):
        """A case timed as ``seconds`` per call that does ``flops`` of work in ``adam_steps`` Adam steps,
        ``train_steps`` training steps: ``*_adam_step_ms`` / ``*_adam_step_flops`` and ``*_train_step_ms`` /
        ``*_train_step_flops`` (the call's fixed work, such as a refresh's target chain, shared out)."""
        results[f"{name}_train_step_ms"] = seconds / train_steps * 1e3
        results[f"{name}_train_step_flops"] = flops / train_steps
        results[f"{name}_adam_steps_per_train_step"] = adam_steps / train_steps
        record(name, seconds / adam_steps * 1e3, flops / adam_steps, unit="adam_step")
        per_train = adam_steps / train_steps
        print(f"    {seconds / train_steps * 1e3:.3f} ms per training step ({per_train:g} Adam steps, "
              f"{flops / train_steps / 1e9:.3f} GFLOP)", flush=True)  # fmt: skip

    clock = [time.perf_counter(), time.process_time()]
    # Compiled calls that a later case times again, the same program: compiled once per process.
    compiled = {}

    def lap(case):
        """Prints the wall and CPU seconds the case took."""
        wall, cpu = time.perf_counter() - clock[0], time.process_time() - clock[1]
        print(f"  [{case}: {wall:.1f} s, {cpu:.1f} s of CPU]", flush=True)
        clock[:] = time.perf_counter(), time.process_time()

    def save():  # after every case, so a run stopped part-way keeps what it measured
        if FLAGS.output:
            from pbo_tf.io import write_text_atomic

            write_text_atomic(FLAGS.output, json.dumps(results, indent=2) + "\n")

    if "foundation" in FLAGS.cases:
        cw = ChainWalkProblem()
        lq = LQRProblem()
        # FLOPs: the PBO chain's, forward and backward (the tabular and quadratic Q families add little).
        cases = [
            ("chain_walk_profqi", cw.q_family(), lambda: LinearPBO(40), cw.dataset(0), 5, 100, 20, cw.gamma,
             3 * 5 * 2 * 100 * 40 * 40),
            ("lqr_profqi", lq.q_family(), lambda: DeepPBO(2, hidden_units=[8]), lq.dataset(0), 3, 5, 121,
             lq.gamma, 3 * 3 * mlp_flops([2, 8, 2], 5)),
        ]  # fmt: skip
        for name, q, factory, data, K, n_w, bs, gamma, flops in cases:
            for suffix, jit in (("", False), ("_xla", True), ("_xla_round", "round")):
                ms = profqi_case(q, factory, data, K, n_w, bs, gamma, FLAGS.steps, FLAGS.repeats, jit)
                record(name + suffix, ms, flops)
        lap("foundation")

    if "car_on_hill" in FLAGS.cases:
        print(f"car-on-hill ProFQI refresh ({coh.passes} passes over {coh.n_transitions} transitions in "
              f"batches of {coh.batch})", flush=True)  # fmt: skip
        variants = (
            ("_xla_round", "round"),  # the library default: the whole refresh is one XLA program
            ("_xla", True),  # one XLA program per gradient step
            ("_no_xla", False),
        )
        calls = {}
        for suffix, jit in variants:
            call, trainer = profqi_refresh_call(coh_q, coh_pbo, coh, coh_full, jit)
            calls[suffix] = call
            adam_steps = trainer.steps_per_refresh
            seconds = _median_time(call, FLAGS.repeats)
            record_call(
                "car_on_hill_profqi" + suffix, seconds, profqi_refresh_flops(coh, adam_steps), adam_steps,
                coh.passes,
            )  # fmt: skip
        # Compiling each step ÷ compiling the whole refresh, timed side by side (A B A B ...).
        ratio, _, _ = _paired(calls["_xla"], calls["_xla_round"], max(FLAGS.repeats, 5))
        results["car_on_hill_profqi_round_speedup"] = ratio
        print(
            f"  car-on-hill ProFQI, XLA on each step ÷ XLA on the whole refresh, side by side: {ratio:.2f}x"
        )
        for key in STEP_KEYS:
            results[f"car_on_hill_profqi_{key}"] = results[f"car_on_hill_profqi_xla_round_{key}"]
        compiled["car_on_hill_profqi_round"] = calls["_xla_round"]
        # The recommended configuration (profqi_fixed_point.gin: SiLU, Glorot, standardised input, W's last
        # layer drawn, the deep fixed-point term) beside the paper's, both compiled per refresh.
        factory, w_set, options = car_on_hill_recommended(coh)
        recommended, trainer = profqi_refresh_call(
            coh_q, factory, coh, coh_full, "round", w_set=w_set, **options
        )
        adam_steps = trainer.steps_per_refresh
        record_call(
            "car_on_hill_profqi_recommended", _median_time(recommended, FLAGS.repeats),
            profqi_refresh_flops(coh, adam_steps), adam_steps, coh.passes,
        )  # fmt: skip
        ratio, _, _ = _paired(recommended, calls["_xla_round"], max(FLAGS.repeats, 5))
        results["car_on_hill_profqi_recommended_vs_paper"] = ratio
        print(
            f"  car-on-hill ProFQI, the recommended configuration's refresh (profqi_fixed_point.gin) ÷ the "
            f"paper's, side by side: {ratio:.2f}x"
        )
        lap("car_on_hill")

    if "mixed" in FLAGS.cases:
        import tensorflow as tf

        for dtype in (tf.float32, tf.bfloat16):
            a, b = (
                tf.cast(tf.random.normal([matmul_n, matmul_n]), dtype),
                tf.cast(tf.random.normal([matmul_n, matmul_n]), dtype),
            )
            f = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y), tf.float32)))
            seconds = (
                _median_time(lambda f=f, a=a, b=b: [f(a, b).numpy() for _ in range(5)], FLAGS.repeats) / 5
            )
            results[f"matmul_{dtype.name}_gflops"] = 2 * matmul_n**3 / seconds / 1e9
            print(f"  {dtype.name} matmul: {results[f'matmul_{dtype.name}_gflops']:.1f} GFLOP/s", flush=True)
        call, trainer = profqi_refresh_call(coh_q, lambda: coh_pbo("bfloat16"), coh, coh_full, "round")
        adam_steps = trainer.steps_per_refresh
        record_call(
            "car_on_hill_profqi_xla_round_bfloat16", _median_time(call, FLAGS.repeats),
            profqi_refresh_flops(coh, adam_steps), adam_steps, coh.passes,
        )  # fmt: skip
        lap("mixed")

    if "prodqn_agent" in FLAGS.cases:
        print("Lunar Lander ProDQNAgent.train (the real agent): a training step of "
              f"{ll.w_batches} Adam steps", flush=True)  # fmt: skip
        variants = {
            # gin_configs/lunar_lander/prodqn.gin: graph mode, fused Adam
            "": {},
            # + the online loop's refresh of the policies' cached Λ^K(ω_0) after the training step
            "_with_policy_refresh": {"policy_refresh": True},
            "_xla": {"jit": True, "fused_adam": False},
            "_xla_bfloat16": {"jit": True, "fused_adam": False, "compute_dtype": "bfloat16"},
            # the target chain recomputed at every Adam step (the agent's default; Polyak updates need it)
            "_per_step_chain": {"cache": False},
        }  # fmt: skip
        for suffix, options in variants.items():
            train, experience, agent = prodqn_agent_train(ll, **options)
            steps = FLAGS.ll_steps
            seconds = _median_time(training_steps_call(train, experience, steps), FLAGS.repeats)
            flops = prodqn_train_step_flops(
                ll, options.get("cache", True), options.get("policy_refresh", False)
            )
            record_call(
                "lunar_lander_prodqn_agent" + suffix, seconds, steps * flops,
                steps * agent.adam_steps_per_train_step, steps,
            )  # fmt: skip
            del train, experience, agent  # (the Lunar Lander operator is 100 MB, its Adam state 200)
        # The headline: the training step as the library runs it (fp32; bfloat16 changes the arithmetic).
        for key in STEP_KEYS:
            results[f"lunar_lander_prodqn_{key}"] = results[f"lunar_lander_prodqn_agent_{key}"]
        ll_bounds(results, peak, ll)
        save()
        lap("prodqn_agent")

    if "fqi" in FLAGS.cases:
        for suffix, jit in (("", False), ("_xla_step", True), ("_xla_iteration", "round")):
            ms = fqi_iteration_case(
                coh_q, coh_full, coh.batch, coh.gamma, FLAGS.fqi_epochs, FLAGS.repeats, jit
            )
            record("car_on_hill_fqi" + suffix, ms, float("nan"))
        cw = ChainWalkProblem()
        for suffix, jit in (("", False), ("_xla_iteration", "round")):
            ms = fqi_iteration_case(
                cw.q_family(), cw.dataset(0), 20, cw.gamma, FLAGS.fqi_epochs, FLAGS.repeats, jit
            )
            record("chain_walk_fqi" + suffix, ms, float("nan"))
        results["fqi_step_ms"] = min(
            results[f"car_on_hill_fqi{s}_step_ms"] for s in ("", "_xla_step", "_xla_iteration")
        )
        lap("fqi")

    if "ifqi" in FLAGS.cases:
        print(f"car-on-hill i-FQI refresh beside FQI's and ProFQI's (K = {coh.K}: {coh.K + 1} heads, "
              f"{coh.passes} passes over {coh.n_transitions} transitions in batches of {coh.batch})",
              flush=True)  # fmt: skip
        ifqi, trainer = ifqi_refresh_call(coh_q, coh, coh_full)
        adam_steps = trainer.steps_per_refresh
        record(
            "car_on_hill_ifqi_xla_round", _median_time(ifqi, FLAGS.repeats) / adam_steps * 1e3, float("nan")
        )
        profqi = compiled.get("car_on_hill_profqi_round")  # the car-on-hill case's, when it ran
        if profqi is None:
            profqi, _ = profqi_refresh_call(coh_q, coh_pbo, coh, coh_full, "round")
        fqi, fqi_steps = fqi_call(coh_q, coh_full, coh.batch, coh.gamma, coh.passes, "round")
        # the same passes over D each: i-FQI's refresh ÷ ProFQI's and ÷ one FQI iteration, side by side
        ratio, _, _ = _paired(ifqi, profqi, max(FLAGS.repeats, 5))
        results["car_on_hill_ifqi_vs_profqi_refresh"] = ratio
        ratio_fqi, _, _ = _paired(ifqi, fqi, max(FLAGS.repeats, 5))
        results["car_on_hill_ifqi_vs_fqi_iteration"] = ratio_fqi
        print(f"  i-FQI refresh ÷ ProFQI refresh: {ratio:.2f}x; ÷ FQI iteration of as many passes: "
              f"{ratio_fqi:.2f}x (side by side)", flush=True)  # fmt: skip
        save()
        lap("ifqi")

    if "threads" in FLAGS.cases:
        print("Thread pools: the small cases in child processes, TensorFlow's default vs one intra-op thread "
              "(two inter-op), alternately", flush=True)  # fmt: skip
        runs = threads_case(FLAGS.thread_rounds)
        med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
        for name, values in med.items():
            for key, value in values.items():
                results[f"{key}_{name}"] = value
        one, default = med["one_thread"], med["default"]
        results["fqi_one_thread_speedup"] = default["threads_fqi_step_ms"] / one["threads_fqi_step_ms"]
        results["profqi_one_thread_speedup"] = (
            default["threads_profqi_step_ms"] / one["threads_profqi_step_ms"]
        )
        # S seeds in one graph with one intra-op thread (the seeds' loops side by side on the two inter-op
        # threads) ÷ the same seeds one after the other with the default pools (a user's alternative).
        key = f"fqi_seeds{FLAGS.seeds}_one_thread_speedup"
        results[key] = default["threads_fqi_seeds_sequential_ms"] / one["threads_fqi_seeds_batched_ms"]
        # and with the default pools in both (the same process, side by side)
        key = f"fqi_seeds{FLAGS.seeds}_speedup"
        results[key] = default["threads_fqi_seeds_sequential_ms"] / default["threads_fqi_seeds_batched_ms"]
        results["fqi_step_ms"] = min(results.get("fqi_step_ms", np.inf), one["threads_fqi_step_ms"])
        print(f"  FQI step: {default['threads_fqi_step_ms']:.3f} ms default, "
              f"{one['threads_fqi_step_ms']:.3f} ms one thread; "
              f"ProFQI step: {default['threads_profqi_step_ms']:.1f} ms default, "
              f"{one['threads_profqi_step_ms']:.1f} ms one thread; {FLAGS.seeds} FQI seeds per seed-step: "
              f"{default['threads_fqi_seeds_sequential_ms']:.3f} ms sequential (default), "
              f"{one['threads_fqi_seeds_batched_ms']:.3f} ms in one graph (one thread)",
              flush=True)  # fmt: skip
        save()
        lap("threads")

    if "end_to_end" in FLAGS.cases:
        cw = ChainWalkProblem()
        rounds = FLAGS.repeats if FLAGS.toy else max(FLAGS.repeats, 3)
        # The paper's passes per refresh and K (chain-walk: its largest); calls of a few seconds each.
        setups = [
            ("car_on_hill", coh_q, coh_pbo, coh_full, coh.K, coh.n_w, coh.batch, coh.gamma, coh.passes,
             FLAGS.e2e_refreshes),
            ("chain_walk", cw.q_family(), lambda: LinearPBO(40), cw.dataset(0), 15, 100, 20, cw.gamma, 5,
             (2 if FLAGS.toy else 100) * FLAGS.e2e_refreshes),
        ]  # fmt: skip
        for name, q, factory, data, K, n_w, bs, gamma, passes, refreshes in setups:
            trainer = end_to_end_trainer(q, factory, data, K, n_w, bs, gamma, passes, refreshes, rounds)
            out = end_to_end_vs_bare(trainer, refreshes, rounds)
            results[f"{name}_profqi_end_to_end_over_bare"] = out["inside"]
            results[f"{name}_profqi_end_to_end_over_bare_paired"] = out["paired"]
            results[f"{name}_profqi_end_to_end_steps_per_s"] = out["steps"] / out["t_train"]
            results[f"{name}_profqi_bare_steps_per_s"] = out["steps"] / out["t_bare"]
            print(f"  {name} ProFQITrainer.train(), {refreshes} refreshes of {passes} passes: "
                  f"{out['inside']:.3f} of its wall time inside the compiled refresh; timed alternately, "
                  f"{out['steps'] / out['t_train']:.1f} gradient steps/s end to end, "
                  f"{out['steps'] / out['t_bare']:.1f} bare, per-pair ratio {out['paired']:.3f}",
                  flush=True)  # fmt: skip
        lap("end_to_end")

    if "seeds" in FLAGS.cases:
        datasets = [car_on_hill_data(s, coh.batch) for s in range(FLAGS.seeds)]
        ways = seeds_speedup(
            coh_q, coh_pbo, datasets, coh.K, coh.n_w, coh.batch, coh.gamma, FLAGS.seed_epochs, FLAGS.repeats,
            jit="round",
        )  # fmt: skip
        for way, (speedup, t_seq, t_bat) in ways.items():
            suffix = "" if way == "side_by_side" else "_seed_axis"  # the library's default is the headline
            results[f"seeds{FLAGS.seeds}_speedup{suffix}"] = speedup
            print(f"  {FLAGS.seeds} car-on-hill ProFQI seeds, {way.replace('_', ' ')}: "
                  f"sequential {t_seq:.2f}s, batched {t_bat:.2f}s, speedup {speedup:.2f}x",
                  flush=True)  # fmt: skip
        lap("seeds")

    if "evaluation" in FLAGS.cases:
        # the paper's K + 1 = 10 policies on the 289 cells (toy: 2 policies, 5 cells, 5 steps)
        n_policies, n_starts, horizon = (2, 5, 5) if FLAGS.toy else (coh.K + 1, None, None)
        cold, warm, rate = car_on_hill_evaluation_case(coh_q, n_policies, FLAGS.repeats, n_starts, horizon)
        results.update(
            car_on_hill_eval_s=warm, car_on_hill_eval_cold_s=cold, car_on_hill_eval_rollouts_per_s=rate
        )
        print(f"  car-on-hill evaluation, J for k = 0..{n_policies - 1} ({n_policies} policies, "
              f"{n_starts or 289} cells, <= {horizon or 100} steps): {warm:.3f} s "
              f"({rate:.0f} rollouts/s; first call {cold:.1f} s with compilation)", flush=True)  # fmt: skip
        from pbo_tf.envs import bicycle

        bq = FlatMLPQ(4, [30], bicycle.ACTION_ENCODING)
        n = FLAGS.bicycle_eval_steps
        n_policies, n_rollouts = (2, 4) if FLAGS.toy else (9, 100)
        cold, warm, rate = bicycle_evaluation_case(bq, n_policies, n_rollouts, n, FLAGS.repeats)
        paper = 9 * 100 * 50_000 / rate
        results.update(bicycle_eval_s=warm, bicycle_eval_cold_s=cold, bicycle_eval_steps_per_s=rate,
                       bicycle_paper_eval_s=paper)  # fmt: skip
        print(f"  bicycle evaluation ({n_policies} policies x {n_rollouts} rollouts x {n} steps): "
              f"{warm:.2f} s ({rate / 1e6:.2f} M policy-steps/s; first call {cold:.1f} s); the paper's "
              f"50 000-step evaluation of a balancing policy: {paper:.0f} s", flush=True)  # fmt: skip
        save()
        lap("evaluation")

    if "operator_scaling" in FLAGS.cases:
        operator_scaling_case(results, FLAGS.toy, FLAGS.scaling_steps, FLAGS.repeats)
        save()
        lap("operator_scaling")

    # The shared machine's speed drifts within a run: measure the matmul again and also give each fraction
    # against the best throughput seen in the run (the conservative figure).
    results["matmul_gflops_end"] = matmul_gflops(FLAGS.repeats, matmul_n)
    adjacent_peaks = [r[4] for r in rows if r[4] == r[4]]
    best_peak = max(
        peak, results["matmul_gflops_end"], results.get("matmul_float32_gflops", 0.0), *adjacent_peaks
    )
    results["matmul_gflops_best"] = best_peak
    print(f"fp32 matmul: {peak:.1f} GFLOP/s at the start, {results['matmul_gflops_end']:.1f} at the end, "
          f"best {best_peak:.1f}")  # fmt: skip
    print(f"{'case':40s} {'ms/step':>9s} {'MFLOP/step':>11s} {'of peak':>8s} {'of best':>8s} {'of adj.':>8s}")
    for name, ms, flops, fraction, adjacent in rows:
        of_best = _fraction(flops, ms, best_peak)
        if flops == flops:
            results[f"{name}_fraction_of_best_peak"] = of_best
        print(f"{name:40s} {ms:9.3f} {flops / 1e6:11.2f} {fraction:8.1%} {of_best:8.1%} "
              f"{_fraction(flops, ms, adjacent):8.1%}")  # fmt: skip
    for key in sorted(results):
        if "speedup" in key or key.endswith("_per_s") or "_eval_" in key:
            print(f"{key:40s} {results[key]:9.3f}")
    save()
    if FLAGS.output:
        print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
