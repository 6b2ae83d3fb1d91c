"""benchmarks/cases.py and benchmarks/benchmark.py: the analytic counts the bounds and fractions rest on,
written out here from the paper's shapes; the sizes against the objects built from them; the end-to-end
case's share of `train()` on a trainer whose share is known; and every case of the benchmark at toy sizes."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf
from in_process import run_main  # tests/benchmarks/ is on sys.path (pytest prepends it)

from benchmarks import benchmark, cases
from pbo_tf.data.w_set import last_layer_size
from pbo_tf.operators import DeepPBO


def test_weight_traffic_counts_the_deep_pbo_s_own_parameters():
    d = 7
    pbo = DeepPBO(d, hidden_multiples=[2, 2, 2, 2])
    pbo.ensure_built()
    n_params = sum(int(np.prod(v.shape)) for v in pbo.trainable_variables)
    sizes = [d] + [2 * d] * 4 + [d]
    assert cases.mlp_params(sizes) == n_params
    # K = 3 applications, each read forward and backward; the merged weight gradient written once; Adam 7.
    assert cases.step_weight_bytes(3, sizes) == 14 * n_params * 4
    assert cases.step_weight_bytes(3, sizes, bytes_per_value=2) == 14 * n_params * 2


def test_lunar_lander_flops_are_the_paper_shape_s_work_written_out():
    """A training step (one `ProDQNAgent.train` call) at the paper's Lunar Lander shape: 2 Adam steps of 15
    rows of W each on one replay batch of 500, the target chain gathered from its cache."""
    # Q: (8 state values, the action's value) -> 30 -> 30 -> 1; deep PBO d -> 2d -> 2d -> 2d -> 2d -> d.
    q_macs = 9 * 30 + 30 * 30 + 30 * 1  # multiply-adds of one Q evaluation
    d = q_macs + 30 + 30 + 1  # and the biases
    pbo_macs = d * 2 * d + 3 * (2 * d) * (2 * d) + 2 * d * d  # one application to one row
    K, n_w, rows, B, A = 10, 30, 15, 500, 4
    adam_steps = -(-n_w // rows)
    # One Adam step (a multiply-add is 2 FLOPs): the prediction chain Λ^1..Λ^K forward and backward (3×), Q
    # at its K outputs on the batch's (s, a) forward and backward (3×), the Bellman targets (Q of the K
    # target vectors at the A actions of each next state).
    adam = 2 * (3 * K * rows * pbo_macs + 3 * K * rows * B * q_macs + K * rows * B * A * q_macs)
    ll = cases.LUNAR_LANDER
    assert (d, adam_steps) == (1261, 2)
    assert (ll.d, ll.w_batches, ll.K, ll.batch, ll.n_actions) == (d, adam_steps, K, B, A)
    assert cases.prodqn_train_step_flops(ll) == adam_steps * adam == 48_315_484_800
    # the target chain recomputed at every Adam step adds its K − 1 applications
    chain = 2 * (K - 1) * rows * pbo_macs
    assert cases.prodqn_train_step_flops(ll, cache_target_chain=False) == adam_steps * (adam + chain)
    # the reference implementation's work per Adam step recomputes everything: its 31 GFLOP
    assert adam + chain == 31_027_065_120
    # the policies' cached Λ^K(ω_0) after the training step: K applications to one row
    assert cases.prodqn_train_step_flops(ll, policy_refresh=True) == adam_steps * adam + 2 * K * pbo_macs
    # the weight traffic per Adam step: 25.45 M parameters, 2K + 8 passes of 4 bytes
    n_params = 2 * (d * 2 * d) + 3 * (2 * d) ** 2 + 4 * 2 * d + d
    assert cases.step_weight_bytes(K, ll.pbo_sizes) == 28 * n_params * 4


def test_car_on_hill_flops_are_the_paper_shape_s_work_written_out():
    """One compiled refresh at the paper's car-on-hill shape: the target chain of W and its Bellman targets
    on the whole dataset once, then 10 passes of 11 Adam steps (all of W, 500 transitions each)."""
    q_macs = 3 * 30 + 30 * 1  # (p, v, u) -> 30 -> 1
    d = q_macs + 30 + 1
    pbo_macs = d * 2 * d + 3 * (2 * d) ** 2 + 2 * d * d
    K, n_w, N, B, A, passes = 9, 30, 5500, 500, 2, 10
    adam_steps = passes * (N // B)
    once = 2 * ((K - 1) * n_w * pbo_macs + K * n_w * N * A * q_macs)
    step = 2 * (3 * K * n_w * pbo_macs + 3 * K * n_w * B * q_macs)  # targets gathered from the cache
    c = cases.CAR_ON_HILL
    assert (d, adam_steps) == (151, 110)
    assert (c.d, c.passes * c.batches_per_pass * c.w_batches) == (d, adam_steps)
    assert cases.profqi_refresh_flops(c, adam_steps) == once + adam_steps * step == 76_590_122_880


def test_the_sizes_are_those_of_the_agent_and_trainer_built_from_them():
    """The benchmark counts the work of the objects it builds: at toy sizes, the agent's Adam steps per
    training step (counted by its optimizer), its Q family and operator; the trainer's steps per refresh."""
    ll = cases.LUNAR_LANDER_TOY
    train, experience, agent = cases.prodqn_agent_train(ll)
    assert agent.params.shape == (ll.n_w, ll.d)
    kernels = [tuple(v.shape) for v in agent.pbo.trainable_variables if len(v.shape) == 2]
    assert kernels == list(zip(ll.pbo_sizes[:-1], ll.pbo_sizes[1:], strict=True))
    before = int(agent.optimizer.iterations)
    train(experience)
    train(experience)
    assert int(agent.optimizer.iterations) - before == 2 * ll.w_batches == 4
    assert ll.w_batches == math.ceil(ll.n_w / ll.w_batch) == agent.adam_steps_per_train_step

    c = cases.CAR_ON_HILL_TOY
    q = cases.car_on_hill_q(c)
    data = cases.car_on_hill_data(0, c.n_transitions)
    trainer = cases.profqi_trainer(
        q, lambda: cases.car_on_hill_pbo(sizes=c), data, c.K, c.n_w, c.batch, c.gamma, c.passes, False
    )
    assert q.d == c.d
    assert trainer.steps_per_refresh == c.passes * c.batches_per_pass * c.w_batches == 6
    assert trainer.run_round(trainer.first_pass(0)).shape == [6]

    # The recommended case builds what profqi_fixed_point.gin binds: its operator, its W and its loss term.
    factory, w_set, options = cases.car_on_hill_recommended(c)
    pbo = factory()
    config = pbo.get_config()
    assert (config["activation"], config["kernel_init"], config["standardise"]) == (
        "silu",
        "glorot_uniform",
        True,
    )
    assert np.abs(w_set[:, -last_layer_size(q) :]).max() > 0  # W's last layer drawn (the paper's is zero)
    assert [term.name for term in options["loss_terms"]] == ["bellman", "fixed_point"]
    assert options["loss_terms"][1].iterations == 30
    assert options["omega0"].shape == (c.d,)
    recommended = cases.profqi_trainer(q, factory, data, c.K, c.n_w, c.batch, c.gamma, c.passes, False,
                                       w_set=w_set, **options)  # fmt: skip
    assert recommended.run_round(recommended.first_pass(0)).shape == [6]
    np.testing.assert_allclose(
        recommended.learner.fixed_point_estimate.value.numpy(),
        recommended.target_pbo.iterate(tf.constant(options["omega0"][None]), 30)[-1].numpy(),
        rtol=1e-5,
    )


def test_end_to_end_share_is_the_time_inside_the_compiled_refresh(monkeypatch):
    """On a trainer whose refresh takes 0.2 s and whose bookkeeping after each refresh (`end_round`) takes
    0.1 s of a clock the test controls (the benchmark's `time`: nothing else advances it, so a loaded host
    changes nothing), `train()` spends 2/3 of its time inside the refresh, and the bare refreshes run at
    2/3 of its time: the case must report exactly these."""
    from pbo_tf.envs.chain_walk.problem import ChainWalkProblem
    from pbo_tf.operators import LinearPBO

    class Clock:
        now = 0.0

        def perf_counter(self):
            return self.now

    clock = Clock()
    monkeypatch.setattr(benchmark, "time", clock)
    cw = ChainWalkProblem()
    refreshes, rounds, inside_s, outside_s = 3, 3, 0.2, 0.1
    trainer = cases.profqi_trainer(
        cw.q_family(), lambda: LinearPBO(40), cw.dataset(0), 2, 10, 100, cw.gamma, 2, "round",
        refreshes=benchmark.end_to_end_refreshes(refreshes, rounds),
    )  # fmt: skip
    out = trainer.run_round(trainer.first_pass(0))
    real_end_round = trainer.end_round

    def refresh(first_pass):
        clock.now += inside_s
        return out

    def end_round(*args, **kwargs):
        clock.now += outside_s
        return real_end_round(*args, **kwargs)

    trainer.run_round, trainer.end_round = refresh, end_round
    result = benchmark.end_to_end_vs_bare(trainer, refreshes, rounds)
    assert result["steps"] == 3 * 2 * 4  # 3 refreshes × 2 passes × 4 batches of D (one W batch)
    assert result["inside"] == pytest.approx(inside_s / (inside_s + outside_s))
    assert result["paired"] == pytest.approx(inside_s / (inside_s + outside_s))
    assert result["t_bare"] == pytest.approx(refreshes * inside_s)
    assert result["t_train"] == pytest.approx(refreshes * (inside_s + outside_s))
    assert trainer.rounds_done == 1 + refreshes * (1 + 2 * rounds)  # compile, paired warm-up and rounds


# The keys each case reports (every value a finite number, but the Lunar Lander step's bound).
def _variants(prefix, suffixes, keys):
    return [f"{prefix}{s}_{k}" for s in suffixes for k in keys]


STEP_KEYS = (
    "adam_step_ms", "train_step_ms", "adam_steps_per_train_step", "adam_step_flops", "train_step_flops",
    "fraction_of_peak",
)  # fmt: skip
EXPECTED = {
    "foundation": _variants("chain_walk_profqi", ("", "_xla", "_xla_round"), ("step_ms", "fraction_of_peak"))
    + _variants("lqr_profqi", ("", "_xla", "_xla_round"), ("step_ms", "fraction_of_peak")),
    "car_on_hill": _variants("car_on_hill_profqi", ("", "_xla_round", "_xla", "_no_xla"), STEP_KEYS)
    + ["car_on_hill_profqi_round_speedup"]
    + _variants("car_on_hill_profqi_recommended", ("",), STEP_KEYS)
    + ["car_on_hill_profqi_recommended_vs_paper"],
    "mixed": ["matmul_float32_gflops", "matmul_bfloat16_gflops"]
    + _variants("car_on_hill_profqi_xla_round_bfloat16", ("",), STEP_KEYS),
    "prodqn_agent": _variants(
        "lunar_lander_prodqn",
        (
            "",
            "_agent",
            "_agent_with_policy_refresh",
            "_agent_xla",
            "_agent_xla_bfloat16",
            "_agent_per_step_chain",
        ),
        STEP_KEYS,
    )
    + ["memory_read_gbs", "lunar_lander_prodqn_flop_bound_ms", "lunar_lander_prodqn_byte_bound_ms"],
    "fqi": _variants("car_on_hill_fqi", ("", "_xla_step", "_xla_iteration"), ("step_ms",))
    + _variants("chain_walk_fqi", ("", "_xla_iteration"), ("step_ms",))
    + ["fqi_step_ms"],
    "ifqi": [
        "car_on_hill_ifqi_xla_round_step_ms",
        "car_on_hill_ifqi_vs_profqi_refresh",
        "car_on_hill_ifqi_vs_fqi_iteration",
    ],
    "end_to_end": _variants(
        "",
        ("car_on_hill", "chain_walk"),
        ("profqi_end_to_end_over_bare", "profqi_end_to_end_over_bare_paired", "profqi_bare_steps_per_s"),
    ),
    "seeds": ["seeds2_speedup", "seeds2_speedup_seed_axis"],
    "evaluation": ["car_on_hill_eval_s", "car_on_hill_eval_rollouts_per_s", "bicycle_eval_steps_per_s"],
    "threads": _variants(
        "threads_",
        ("fqi_step_ms", "profqi_step_ms", "fqi_seeds_sequential_ms", "fqi_seeds_batched_ms"),
        ("default", "one_thread"),
    )
    + ["fqi_one_thread_speedup", "profqi_one_thread_speedup", "fqi_seeds2_speedup"],
}


def test_every_benchmark_case_runs_at_toy_sizes_and_reports_its_numbers(tmp_path, monkeypatch):
    """`benchmarks/benchmark.py --toy` runs every case (the threads case runs `threads_probe` in its
    children, processes of their own); each reports its keys, with finite values, and the Lunar Lander and
    car-on-hill cases count the Adam steps and the work of a training step as the agent and the trainer do
    them. The program's ``main`` runs in this process: a subprocess would only add its TensorFlow start."""
    # (operator_scaling runs at toy size in its own test below)
    assert set(EXPECTED) | {"threads_probe", "operator_scaling"} == set(benchmark.CASES)
    output = tmp_path / "toy.json"
    run_main(benchmark, ["--toy", f"--cases={','.join(EXPECTED)}", f"--output={output}"], monkeypatch)
    results = json.loads(output.read_text())
    missing = [key for keys in EXPECTED.values() for key in keys if key not in results]
    assert not missing
    assert results.pop("lunar_lander_prodqn_bound") in ("bytes", "FLOPs")
    not_finite = {key: value for key, value in results.items() if not math.isfinite(value)}
    assert not not_finite

    check_training_step_counts(results)


def check_training_step_counts(results):
    """The toy Lunar Lander and car-on-hill cases count the Adam steps and the work of a training step as
    the agent and the trainer do them."""

    def ll(key, variant=""):
        return results[f"lunar_lander_prodqn_agent{variant}_{key}"]

    toy = cases.LUNAR_LANDER_TOY  # |W| = 6 in batches of 3: 2 Adam steps per training step
    assert ll("adam_steps_per_train_step") == 2
    assert ll("train_step_ms") == pytest.approx(2 * ll("adam_step_ms"))
    assert ll("train_step_flops") == 2 * ll("adam_step_flops") == cases.prodqn_train_step_flops(toy)
    assert ll("train_step_flops", "_per_step_chain") == cases.prodqn_train_step_flops(toy, False)
    assert ll("train_step_flops", "_with_policy_refresh") == cases.prodqn_train_step_flops(toy, True, True)
    achieved = ll("adam_step_flops") / (ll("adam_step_ms") / 1e3) / 1e9
    assert ll("fraction_of_peak") == pytest.approx(achieved / results["matmul_gflops"])
    assert results["lunar_lander_prodqn_train_step_ms"] == ll("train_step_ms")

    c = cases.CAR_ON_HILL_TOY  # a training step is a pass: 60 transitions in batches of 20
    coh = results["car_on_hill_profqi_adam_steps_per_train_step"]
    assert coh == c.batches_per_pass == 3
    refresh = cases.profqi_refresh_flops(c, c.passes * 3)
    assert results["car_on_hill_profqi_train_step_flops"] == pytest.approx(refresh / c.passes)
    assert results["car_on_hill_profqi_adam_step_flops"] == pytest.approx(refresh / (c.passes * 3))
    assert results["car_on_hill_profqi_train_step_ms"] == pytest.approx(
        3 * results["car_on_hill_profqi_adam_step_ms"]
    )


def test_the_threads_case_children_run_the_pools_their_flags_name(monkeypatch):
    """A thread-count variable in the benchmark's environment (the suite's workers set one for the programs
    they launch) does not reach the threads case's children: the default child runs TensorFlow's defaults."""
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "2")
    monkeypatch.setenv("PBO_TF_SOMETHING", "kept")
    env = benchmark.threads_child_env()
    assert "TF_NUM_INTRAOP_THREADS" not in env and "TF_NUM_INTEROP_THREADS" not in env
    assert env["PBO_TF_SOMETHING"] == "kept"


def test_the_operator_scaling_case_reports_weights_times_and_exponents_at_toy_sizes(tmp_path, monkeypatch):
    """`--cases=operator_scaling --toy`: each operator's weights at each toy Q network (the deep PBO's the
    dense [2, 2, 2, 2] MLP's, the conv PBO's 249 whatever d, the equivariant one's the same for the two
    networks), a positive time per Adam step, the exponent of cost against d the slope of log ms against
    log d through the two sizes' times, and the deep over equivariant ratio the ratio of the reported times
    (`cases.log_log_slope` on hand-made points too)."""
    output = tmp_path / "scaling.json"
    run_main(benchmark, ["--toy", "--cases=operator_scaling", f"--output={output}"], monkeypatch)
    got = json.loads(output.read_text())
    shapes = cases.OPERATOR_SCALES_TOY
    assert [s.d for s in shapes] == [28, 113]  # (3 -> 3 -> 3 -> 1); (3 -> 8 -> 8 -> 1)
    for s in shapes:
        key = f"operator_scaling_{{}}_{s.name}"
        assert got[key.format("deep") + "_weights"] == cases.mlp_params([s.d, *[2 * s.d] * 4, s.d])
        assert got[key.format("conv") + "_weights"] == 249
        for kind in cases.OPERATOR_KINDS:
            assert got[key.format(kind) + "_d"] == s.d and got[key.format(kind) + "_adam_step_ms"] > 0
    assert (
        got["operator_scaling_equivariant_toy_3x3_weights"]
        == got["operator_scaling_equivariant_toy_8x8_weights"]
    )
    for kind in cases.OPERATOR_KINDS:
        small, large = (got[f"operator_scaling_{kind}_{s.name}_adam_step_ms"] for s in shapes)
        want = np.log(large / small) / np.log(113 / 28)  # two points: the line through them
        assert got[f"operator_scaling_{kind}_exponent"] == pytest.approx(want, rel=1e-9)
    assert got["operator_scaling_toy_8x8_deep_over_equivariant"] == pytest.approx(
        got["operator_scaling_deep_toy_8x8_adam_step_ms"]
        / got["operator_scaling_equivariant_toy_8x8_adam_step_ms"],
        rel=1e-12,
    )
    # the slope by least squares: cost = 3 d^1.5 exactly; one point has no slope
    d = np.array([10.0, 100.0, 1000.0])
    assert cases.log_log_slope(d, 3 * d**1.5) == pytest.approx(1.5)
    assert np.isnan(cases.log_log_slope([10], [1.0]))
    # the deep PBO is skipped where its weights and Adam state pass the memory limit
    assert cases.deep_pbo_bytes(1261) < cases.DEEP_PBO_MEMORY_LIMIT < cases.deep_pbo_bytes(4609)
