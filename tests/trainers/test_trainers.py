"""FQI and ProFQI trainers: least-squares ground truth, exact resume, target-chain caching, divergence."""

import re

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from pbo_tf.envs import chain_walk, lqr
from pbo_tf.operators import LinearPBO
from pbo_tf.optimizers import AnnealedAdam, linear_schedule, make_adam
from pbo_tf.q import LQRQ, TableQ
from pbo_tf.utils import DivergenceError
from tests.builders import fqi_trainer
from tests.builders import profqi_trainer as _profqi


def _lqr_data():
    data = lqr.collect_dataset()
    actions = lqr.mesh_actions()[data.action]
    return data, actions


def test_fqi_iteration_is_the_least_squares_projection_on_lqr():
    opt = lqr.optimal_params()
    q = LQRQ(opt["M"])
    data, actions = _lqr_data()
    from pbo_tf.data.transitions import Transitions

    data = Transitions.from_arrays(data.state, actions, data.reward, data.next_state, data.done)
    trainer = fqi_trainer(
        q_family=q,
        dataset=data.to_dataset(),
        initial_params=np.zeros(2),
        K=1,
        gamma=1.0,
        max_epochs=1500,
        patience=1500,
        batch_size=121,
        optimizer=AnnealedAdam(lr_start=3e-2, lr_end=1e-4),
        seed=0,
        log=None,
    )
    trainer.train()
    iterates = trainer.iterates.numpy()
    # Ground truth: ω_1 = argmin Σ (r + max_a' Q_0(s', a') − M a² − G s² − 2 I s a)², with Q_0 = M a'².
    grid = q.action_values[:, 0].astype(np.float64)
    s, a = data.state[:, 0].astype(np.float64), actions.astype(np.float64)
    y = data.reward + np.max(opt["M"] * grid**2) - opt["M"] * a**2
    features = np.stack([s**2, 2 * s * a], 1)
    expected, *_ = np.linalg.lstsq(features, y, rcond=None)
    np.testing.assert_allclose(iterates[0], [0.0, 0.0])
    np.testing.assert_allclose(iterates[1], expected, rtol=2e-3, atol=2e-3)


def _chain_trainer(ckpt, pbo_seed=0, **overrides):
    q = TableQ(20, 2)
    data = chain_walk.collect_dataset(0)
    tf.keras.utils.set_random_seed(pbo_seed)
    pbo, target = LinearPBO(40, init_std=1e-3), LinearPBO(40)
    kwargs = dict(
        passes_per_refresh=2,
        refreshes=3,
        batch_size=100,
        w_batch_size=5,
        optimizer=AnnealedAdam(lr_start=1e-2, lr_end=1e-4),
        seed=3,
        checkpoint_dir=ckpt,
        log=None,
    )
    kwargs.update(overrides)
    trainer = _profqi(
        pbo=pbo, target_pbo=target, q_family=q, dataset=data.to_dataset(), w_set=q.initial_params(10, 0), K=3,
        gamma=0.9, **kwargs,
    )  # fmt: skip
    return trainer, pbo


@pytest.mark.parametrize("jit", [False, "round"])
def test_profqi_resumes_exactly_after_interruption(tmp_path, jit):
    straight, pbo_a = _chain_trainer(str(tmp_path / "a"), jit_compile=jit)
    losses_a = straight.train()
    # Same run, "killed" after one training step, then continued by a fresh process-like trainer whose own
    # initialisation differs (pbo_seed): everything must come from the checkpoint.
    first, _ = _chain_trainer(str(tmp_path / "b"), jit_compile=jit)
    losses_b1 = first.train(max_rounds=1)
    resumed, pbo_b = _chain_trainer(str(tmp_path / "b"), pbo_seed=99, jit_compile=jit)
    assert resumed.rounds_done == 1
    # The training-time ledger carries over: the resumed run reports both processes' time.
    assert first.train_seconds > 0
    assert resumed.train_seconds == pytest.approx(first.train_seconds)
    losses_b2 = resumed.train()
    assert resumed.train_seconds > first.train_seconds
    np.testing.assert_allclose(losses_b1 + losses_b2, losses_a, rtol=1e-6)
    for wa, wb in zip(pbo_a.weights, pbo_b.weights, strict=True):
        np.testing.assert_allclose(wa.numpy(), wb.numpy(), rtol=1e-6, atol=1e-9)
    assert resumed.train() == []  # nothing left to do


def test_cached_targets_give_the_same_training_as_per_step_targets(tmp_path):
    cached, pbo_a = _chain_trainer(None, refreshes=2)
    per_step, pbo_b = _chain_trainer(None, refreshes=2, cache_targets=False)
    np.testing.assert_allclose(cached.train(), per_step.train(), rtol=1e-5)
    for wa, wb in zip(pbo_a.weights, pbo_b.weights, strict=True):
        np.testing.assert_allclose(wa.numpy(), wb.numpy(), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("jit", [False, "round"])
def test_fqi_cached_targets_give_the_same_iterates_as_per_step_targets(jit):
    from pbo_tf.data.transitions import Transitions
    from pbo_tf.q import FlatMLPQ

    rng = np.random.default_rng(0)
    n = 300
    data = Transitions.from_arrays(
        rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        rng.integers(0, 2, n),
        rng.normal(size=n).astype(np.float32),
        rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        (rng.uniform(size=n) < 0.1).astype(np.float32),
    )
    q = FlatMLPQ(2, [8], [-1.0, 1.0])
    start = q.initial_params(1, 0)[0]
    start[-9:] = rng.normal(0, 0.5, 9)  # a non-zero last layer: the targets depend on ω̄ from iteration 1

    def run(cache):
        trainer = fqi_trainer(
            q_family=q, dataset=data.to_dataset(), initial_params=start, K=3, gamma=0.9, max_epochs=4,
            patience=10, batch_size=100, optimizer=AnnealedAdam(lr_start=1e-2, lr_end=1e-3), seed=1, log=None,
            jit_compile=jit, cache_targets=cache,
        )  # fmt: skip
        trainer.train()
        return trainer.iterates.numpy()

    cached, per_step = run(True), run(False)
    assert np.abs(cached[3] - cached[0]).max() > 1e-2  # training moved the parameters
    np.testing.assert_allclose(cached, per_step, rtol=1e-4, atol=1e-6)


def test_divergence_is_reported_and_keeps_the_last_good_checkpoint(tmp_path):
    # A learning rate that grows linearly from 1e-2 to 1e3 over the run: the first refreshes train, then the
    # steps grow until the weights overflow (here in refresh 3 of 6; 1e2 never diverges, 1e4 in refresh 1).
    settings = dict(optimizer=AnnealedAdam(lr_start=1e-2, lr_end=1e3), refreshes=6, passes_per_refresh=5)
    settings.update(checkpoint_every_s=0.0)
    trainer, _ = _chain_trainer(str(tmp_path / "run"), **settings)
    with pytest.raises(DivergenceError, match="diverged.*refresh.*non-finite"):
        trainer.train()
    done = trainer.rounds_done  # the refreshes that finished with finite losses
    assert 1 <= done < 6, f"the run must diverge after at least one good refresh, not after {done}"
    # The kept checkpoint is the last good refresh's: its number, its counter and its (finite) weights,
    # equal to those of the same run stopped cleanly after `done` refreshes.
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith(f"ckpt-{done}")
    clean, pbo_clean = _chain_trainer(str(tmp_path / "clean"), **settings)
    clean.train(max_rounds=done)
    resumed, pbo = _chain_trainer(str(tmp_path / "run"), pbo_seed=99, **settings)
    assert resumed.rounds_done == done
    for got, want in zip(pbo.weights, pbo_clean.weights, strict=True):
        assert np.isfinite(got.numpy()).all()
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-9)


def test_trainer_errors_name_the_problem():
    q = TableQ(20, 2)
    data = chain_walk.collect_dataset(0)
    args = dict(
        passes_per_refresh=1, refreshes=1, batch_size=20, w_batch_size=5, seed=0,
        optimizer=AnnealedAdam(lr_start=1e-3, lr_end=1e-4), q_family=q, dataset=data.to_dataset(), gamma=0.9,
    )  # fmt: skip
    with pytest.raises(ValueError, match="d=3.*d=40"):
        _profqi(pbo=LinearPBO(3), target_pbo=LinearPBO(3), w_set=q.initial_params(5, 0), K=2, **args)
    with pytest.raises(ValueError, match="K"):
        _profqi(pbo=LinearPBO(40), target_pbo=LinearPBO(40), w_set=q.initial_params(5, 0), K=0, **args)
    with pytest.raises(ValueError, match="w_batch_size=5 must divide"):
        _profqi(pbo=LinearPBO(40), target_pbo=LinearPBO(40), w_set=q.initial_params(7, 0), K=2, **args)
    for bad in ("outer", "iteration", "rond", 1, None):  # a typo must not silently become per-step XLA
        with pytest.raises(ValueError, match=f"jit_compile must be one of .* got {re.escape(repr(bad))}"):
            _profqi(
                pbo=LinearPBO(40), target_pbo=LinearPBO(40), w_set=q.initial_params(5, 0), K=2, **args,
                jit_compile=bad,
            )  # fmt: skip
    fqi = dict(max_epochs=2, patience=1, batch_size=20, optimizer=AnnealedAdam(lr_start=1e-3, lr_end=1e-4))
    fqi.update(seed=0, log=None, q_family=q, dataset=data.to_dataset(), gamma=0.9)
    for bad in ("outer", "iteration", "rond", 1, None):
        with pytest.raises(ValueError, match=f"jit_compile must be one of .* got {re.escape(repr(bad))}"):
            fqi_trainer(initial_params=q.initial_params(1, 0)[0], K=2, jit_compile=bad, **fqi)


def _deep_profqi_trainer(seed, jit, cache=True, **extra):
    """A small deep-PBO ProFQI trainer on random car-on-hill-shaped transitions (MLP Q with a non-zero last
    layer, so the targets depend on the chain)."""
    from pbo_tf.data.transitions import Transitions
    from pbo_tf.operators import DeepPBO
    from pbo_tf.q import FlatMLPQ

    q = FlatMLPQ(2, [8], [-1.0, 1.0])
    rng = np.random.default_rng(seed)
    n = 200
    data = Transitions.from_arrays(
        rng.uniform(-1, 1, (n, 2)), rng.integers(0, 2, n), rng.normal(size=n),
        rng.uniform(-1, 1, (n, 2)), rng.uniform(size=n) < 0.1,
    )  # fmt: skip
    tf.keras.utils.set_random_seed(seed)
    pbo, target = (DeepPBO(q.d, hidden_multiples=[1, 1], init_std=0.05) for _ in range(2))
    params = q.initial_params(6, seed)
    params[:, -9:] = rng.normal(0, 0.5, (6, 9))
    kwargs = dict(passes_per_refresh=2, refreshes=2, batch_size=100, w_batch_size=3)
    kwargs.update(extra)
    return _profqi(
        pbo=pbo, target_pbo=target, q_family=q, dataset=data.to_dataset(), w_set=params, K=3, gamma=0.9,
        optimizer=AnnealedAdam(lr_start=1e-2, lr_end=1e-3), seed=seed, log=None, jit_compile=jit,
        cache_targets=cache, **kwargs,
    )  # fmt: skip


@pytest.fixture(scope="module")
def trained_deep_runs():
    """``get(seed, jit, cache)``: `_deep_profqi_trainer` ``(seed, jit, cache)`` trained, as ``(trainer, its
    initial weights, its losses)``; each one built and trained once for the module (an XLA run compiles for
    seconds, and the XLA and seed-axis tests below both need seed 0's)."""
    runs = {}

    def get(seed, jit, cache=True):
        if (seed, jit, cache) not in runs:
            trainer = _deep_profqi_trainer(seed, jit, cache)
            start = [w.numpy() for w in trainer.pbo.weights]
            runs[seed, jit, cache] = trainer, start, trainer.train()
        return runs[seed, jit, cache]

    return get


@pytest.mark.parametrize("cache", [True, False])
def test_profqi_whole_outer_step_under_xla_trains_as_graph_mode(cache, trained_deep_runs):
    """``jit_compile="round"`` (every pass of a refresh in one XLA program) and ``True`` (XLA on the
    step) give the graph-mode run's losses and weights."""
    runs = {jit: trained_deep_runs(0, jit, cache) for jit in (False, True, "round")}
    start = runs[False][1]
    for _, other_start, _ in runs.values():  # the same start
        for va, vb in zip(start, other_start, strict=True):
            np.testing.assert_array_equal(vb, va)
    trainers = {jit: run[0] for jit, run in runs.items()}
    losses = {jit: run[2] for jit, run in runs.items()}
    assert trainers["round"].compile_round and not trainers[True].compile_round
    assert np.abs(trainers["round"].pbo.weights[0].numpy() - start[0]).max() > 1e-3  # training moved them
    for jit in (True, "round"):
        np.testing.assert_allclose(losses[jit], losses[False], rtol=2e-5)
        for va, vb in zip(trainers[False].pbo.weights, trainers[jit].pbo.weights, strict=True):
            np.testing.assert_allclose(vb.numpy(), va.numpy(), rtol=1e-4, atol=1e-6)


def _fixed_point(**options) -> dict:
    """The loss terms of Eq. (3) and Eq. (4)'s term with ``options`` (`FixedPointTerm`), as a config field."""
    from pbo_tf.loss_terms import BellmanTerm, FixedPointTerm

    return {"loss_terms": (BellmanTerm(), FixedPointTerm(**options))}


FIXED_POINT = _fixed_point(iterations=4)


@pytest.mark.parametrize("jit", [False, "round"])
def test_the_deep_fixed_point_term_is_taken_at_the_target_iterates(jit):
    """With ``FixedPointTerm.iterations = N`` a step's loss is Eq. (3) plus the term at ``ω̄ = Λ̄^N(ω₀)``
    of the refresh's target: the first step, computed by hand from the initial operator (one step per
    pass: the whole dataset and all of W in one batch), and at the end of training ω̄ is the last
    target's N-th iterate of ω₀."""
    from pbo_tf.losses import pbo_loss, target_chain

    sizes = dict(refreshes=2, passes_per_refresh=1, batch_size=200, w_batch_size=6)
    omega0 = _deep_profqi_trainer(0, jit).w_set.numpy()[2]
    trainer = _deep_profqi_trainer(0, jit, omega0=omega0, **FIXED_POINT, **sizes)
    plain = _deep_profqi_trainer(0, jit, **sizes)
    for va, vb in zip(trainer.pbo.weights, plain.pbo.weights, strict=True):
        vb.assign(va)
    pbo, q, w = trainer.pbo, trainer.q_family, trainer.w_set
    estimate = pbo.iterate(tf.constant(omega0[None]), 4)[-1]
    batch = {name: tf.constant(value) for name, value in trainer.data.items()}
    want, extras = pbo_loss(
        pbo, q, w, batch, target_chain(pbo, w, 3), 0.9, fixed_point_term=True, fixed_point_input=estimate
    )
    assert float(extras.fixed_point) > 1e-3  # the term is there to see
    got, got_plain = trainer.train(), plain.train()
    np.testing.assert_allclose(got[0], float(want), rtol=1e-5)
    np.testing.assert_allclose(got_plain[0], float(want) - float(extras.fixed_point), rtol=1e-5)
    last = trainer.target_pbo.iterate(tf.constant(omega0[None]), 4)[-1].numpy()
    np.testing.assert_allclose(trainer.learner.fixed_point_estimate.value.numpy(), last, rtol=1e-6)
    assert not np.allclose(last, estimate.numpy())  # the target moved, and ω̄ with it


@pytest.mark.parametrize("jit", [False, "round"])
def test_the_fixed_point_term_s_study_options_give_their_hand_computed_first_losses(jit):
    """The options of the term, each run for 2 refreshes (one step per pass) and its first step's loss
    computed by hand from the initial operator (Eq. 3's part L₃, the term F at the given points):
    ``at="past_k"`` (N = 6, K = 3: F the mean over Λ^4..6(ω₀)), ``weight=0.3``
    (L₃ + 0.3 F), ``balance`` (L₃ + sg(L₃ / F) F = 2 L₃) and ``warmup=0.5`` with
    weight 0.3 (refresh 1 at progress 0: weight 0, L₃ alone; refresh 2 at progress 0.5: the full weight).
    Each writes what it chose into the learner's records."""
    from pbo_tf.losses import pbo_loss, target_chain

    sizes = dict(refreshes=2, passes_per_refresh=1, batch_size=200, w_batch_size=6)
    omega0 = _deep_profqi_trainer(0, jit).w_set.numpy()[2]
    cases = {
        "past_k": dict(iterations=6, at="past_k"),
        "weight": dict(iterations=4, weight=0.3),
        "balance": dict(iterations=4, balance=True),
        "warmup": dict(iterations=4, weight=0.3, warmup=0.5),
    }
    for name, options in cases.items():
        trainer = _deep_profqi_trainer(0, jit, omega0=omega0, **_fixed_point(**options), **sizes)
        pbo, q, w = trainer.pbo, trainer.q_family, trainer.w_set
        chain = pbo.iterate(tf.constant(omega0[None]), options["iterations"])[:, 0]
        points = chain[4:] if name == "past_k" else chain[-1:]
        batch = {key: tf.constant(value) for key, value in trainer.data.items()}
        plain, extras = pbo_loss(
            pbo, q, w, batch, target_chain(pbo, w, 3), 0.9, fixed_point_term=True, fixed_point_input=points
        )
        l3, term = float(plain) - float(extras.fixed_point), float(extras.fixed_point)
        assert term > 1e-3
        want = {"past_k": l3 + term, "weight": l3 + 0.3 * term, "balance": 2 * l3, "warmup": l3}[name]
        losses = trainer.train()
        np.testing.assert_allclose(losses[0], want, rtol=1e-5, err_msg=name)
        records = trainer.learner.records()
        assert records["loss_terms"] == ["bellman", "fixed_point"]
        for key, value in options.items():
            assert records[f"fixed_point_{key}"] == value, (name, key)
        if name == "past_k":
            assert trainer.learner.fixed_point_estimate.value.shape == (3, q.d)
        if name == "warmup":
            assert float(trainer.learner.terms[1]._scale.numpy()) == 1.0  # refresh 2: progress 0.5 / 0.5


def test_the_fixed_point_term_s_study_options_refuse_bad_values_in_one_line():
    bad = {
        "FixedPointTerm.weight must be a finite number >= 0, got -1": dict(weight=-1),
        "FixedPointTerm.at must be one of": dict(at="all"),
        "FixedPointTerm.at='past_k' takes the term at": dict(iterations=3, at="past_k"),
        "FixedPointTerm.warmup must be a fraction of the run in": dict(iterations=4, warmup=1.5),
    }
    omega0 = np.zeros(_deep_profqi_trainer(0, False).q_family.d, np.float32)
    for message, options in bad.items():
        with pytest.raises(ValueError, match=re.escape(message)) as error:
            _deep_profqi_trainer(0, False, omega0=omega0, **_fixed_point(**options))
        assert "\n" not in str(error.value)


@pytest.mark.parametrize("jit", [False, "round"])
def test_the_fixed_point_term_from_w_is_taken_at_every_member_s_target_iterates(jit):
    """``FixedPointTerm.start="w"``: the term at ``Λ̄^N(ω)`` for every ω of W, the mean over them; the first
    step's loss computed by hand from the initial operator, and at the end ω̄ is the last target's N-th
    iterate of each member of W (no ω₀ needed)."""
    from pbo_tf.losses import pbo_loss, target_chain

    sizes = dict(refreshes=2, passes_per_refresh=1, batch_size=200, w_batch_size=6)
    trainer = _deep_profqi_trainer(0, jit, **_fixed_point(iterations=4, start="w"), **sizes)
    pbo, q, w = trainer.pbo, trainer.q_family, trainer.w_set
    estimate = pbo.iterate(w, 4)[-1]  # [6, d]
    batch = {name: tf.constant(value) for name, value in trainer.data.items()}
    chain = target_chain(pbo, w, 3)
    want, extras = pbo_loss(pbo, q, w, batch, chain, 0.9, fixed_point_term=True, fixed_point_input=estimate)
    rows = [
        pbo_loss(pbo, q, w, batch, chain, 0.9, fixed_point_term=True, fixed_point_input=row)[1].fixed_point
        for row in estimate
    ]
    np.testing.assert_allclose(float(extras.fixed_point), np.mean(rows), rtol=1e-5)  # every member's term
    got = trainer.train()
    np.testing.assert_allclose(got[0], float(want), rtol=1e-5)
    last = trainer.target_pbo.iterate(w, 4)[-1].numpy()
    np.testing.assert_allclose(trainer.learner.fixed_point_estimate.value.numpy(), last, rtol=1e-6)
    assert trainer.learner.fixed_point_estimate.value.shape == (6, q.d)


def test_fixed_point_options_errors_name_the_problem():
    omega0 = np.zeros(_deep_profqi_trainer(0, False).q_family.d, np.float32)
    for bad, match in (
        (dict(), "no closed-form fixed point.*FixedPointTerm.iterations > 0"),
        (dict(iterations=-1), "integer >= 0, got -1"),
        (dict(iterations=2.5), "integer >= 0, got 2.5"),
        (dict(iterations=4), "needs omega0"),
        (dict(iterations=4, omega0=omega0[:3]), r"omega0 must be \[\d+\], got \[3\]"),
        (dict(iterations=4, omega0=omega0, radius=-2.0), "FixedPointTerm.radius must be a positive"),
        (dict(radius=10.0), "FixedPointTerm.radius bounds .* set FixedPointTerm.iterations > 0"),
        (dict(iterations=4, start="W"), r"FixedPointTerm.start must be one of .*'w'\), got 'W'"),
        (dict(start="w"), "FixedPointTerm.start='w' chooses .* set FixedPointTerm.iterations > 0"),
    ):
        with pytest.raises(ValueError, match=match):
            options = {key: value for key, value in bad.items() if key != "omega0"}
            _deep_profqi_trainer(
                0, False, **{k: v for k, v in bad.items() if k == "omega0"}, **_fixed_point(**options)
            )


def test_fixed_point_radius_bounds_the_estimate_by_the_largest_norm_in_w():
    """``FixedPointTerm.radius = r``: the estimate's bound is r · max ‖ω‖ over W, and the estimate is the last
    iterate of ω₀'s target chain inside it (here, by hand, from the chain's norms); the runner's record of
    the operator names the radius."""
    base = _deep_profqi_trainer(0, False)
    omega0 = base.w_set.numpy()[1]
    largest = np.linalg.norm(base.w_set.numpy(), axis=1).max()
    pbo = base.target_pbo
    norms = np.linalg.norm(pbo.iterate(tf.constant(omega0[None]), 4)[:, 0].numpy(), axis=1)
    radius = float(np.median(norms[1:]) / largest)  # a ball that some iterates leave, unless all are equal
    trainer = _deep_profqi_trainer(0, False, omega0=omega0, **_fixed_point(iterations=4, radius=radius))
    for va, vb in zip(base.target_pbo.weights, trainer.target_pbo.weights, strict=True):
        vb.assign(va)
    estimate = trainer.learner.fixed_point_estimate
    np.testing.assert_allclose(estimate.max_norm, radius * largest, rtol=1e-6)
    estimate.update()
    inside = norms <= radius * largest
    assert not inside.all()  # some iterate leaves the ball (the case the bound is for)
    n = int(np.argmin(inside)) - 1
    assert int(estimate.iterations_used.numpy()) == max(n, 0)
    want = pbo.iterate(tf.constant(omega0[None]), 4)[max(n, 0)].numpy()
    np.testing.assert_allclose(estimate.read().numpy(), want, rtol=1e-6)
    # the progress line says which iterate the term took, at every monitored refresh
    monitored = _deep_profqi_trainer(
        0, False, omega0=omega0, monitor=lambda pbo: ({}, "m"), refreshes=1,
        **_fixed_point(iterations=4, radius=radius),
    )  # fmt: skip
    monitored.train()
    used = int(monitored.learner.fixed_point_estimate.iterations_used.numpy())
    assert monitored.monitor_text == f"m; fixed point at Λ̄^{used}(ω₀) of 4"


@pytest.mark.parametrize("jit,fixed_point", [(True, False), ("round", False), ("round", True)])
def test_seeds_stacked_in_one_step_train_as_separate_single_seed_runs(jit, fixed_point, trained_deep_runs):
    """`train_seeds` on the seed axis (`seed_axis_rounds`: one XLA step for all seeds, deep-PBO kernels
    stacked over seeds; with ``"round"`` the seeds' whole refresh is one XLA program) gives each seed the
    losses and weights of its own single-seed run: seed 0 with cached targets, seed 1 with per-step
    targets (each seed follows its own trainer's setting); also with the deep fixed-point term. The
    single-seed runs train in graph mode, the reference the XLA modes match above (to the same
    tolerances)."""
    from pbo_tf.trainers import seed_axis_rounds, train_seeds

    def trainer(seed, mode=jit):
        extra = {}
        if fixed_point:  # the deep fixed-point term, each seed at its own ω₀
            extra = dict(FIXED_POINT, omega0=_deep_profqi_trainer(seed, False).w_set.numpy()[1])
        return _deep_profqi_trainer(seed, mode, cache=seed == 0, **extra)

    if fixed_point:
        singles = [trainer(s, False) for s in (0, 1)]
        starts = [[w.numpy() for w in t.pbo.weights] for t in singles]
        want = [t.train() for t in singles]
    else:  # (the single-seed runs trained once for the module)
        singles, starts, want = zip(*(trained_deep_runs(s, False, cache=s == 0) for s in (0, 1)), strict=True)
    stacked = [trainer(s) for s in (0, 1)]
    for start, b in zip(starts, stacked, strict=True):  # the same start, whatever the global RNG did
        for va, vb in zip(start, b.pbo.weights, strict=True):
            vb.assign(va)
    got = train_seeds(stacked, log=None, run_all=seed_axis_rounds(stacked))
    for s in (0, 1):
        np.testing.assert_allclose(got[s], want[s], rtol=2e-5)
        assert np.abs(singles[s].pbo.weights[0].numpy() - stacked[1 - s].pbo.weights[0].numpy()).max() > 1e-3
        for va, vb in zip(singles[s].pbo.weights, stacked[s].pbo.weights, strict=True):
            np.testing.assert_allclose(vb.numpy(), va.numpy(), rtol=1e-4, atol=1e-6)
        assert stacked[s].rounds_done == 2
    lines = []  # called again on finished trainers: one line, nothing trained
    assert train_seeds(stacked, log=lines.append, run_all=seed_axis_rounds(stacked)) == [[], []]
    assert lines == ["ProFQI: all 2 refreshes already done"]


def test_divergence_message_names_what_became_non_finite():
    """`diagnose` names the first non-finite piece: φ's weights, else the smallest k whose Λ^k(W) is not
    finite (a kernel of 1e30·I overflows float32 at the second application), else nothing."""
    trainer, pbo = _chain_trainer(None)
    assert trainer.diagnose() == ""
    kernel = [w for w in pbo.weights if len(w.shape) == 2][0]
    kernel.assign(np.eye(40, dtype=np.float32) * 1e30)
    assert trainer.diagnose() == "the operator's output Λ^2(W) is non-finite"
    kernel.assign(np.full((40, 40), np.nan, np.float32))
    assert trainer.diagnose() == "the operator's weights φ are non-finite"
    with pytest.raises(
        DivergenceError, match=r"step 1 of refresh 1 .*\(the operator's weights φ are non-finite\)"
    ):
        trainer.check_finite(np.array([1.0, np.nan]), "refresh 1 (seed 3)")
    # The deep fixed-point term: its estimate Λ̄^N(ω₀) blown up while the chain up to K is finite.
    deep = _deep_profqi_trainer(
        0, False, omega0=np.zeros(_deep_profqi_trainer(0, False).q_family.d), **FIXED_POINT
    )
    assert deep.diagnose() == ""
    estimate = deep.learner.fixed_point_estimate.value
    estimate.assign(np.full(estimate.shape, np.inf, np.float32))
    assert deep.diagnose().startswith("the fixed-point term's estimate Λ̄^4(ω₀) is non-finite")


WRONG_OPTIMIZER = "^optimizer must be an AnnealedAdam or a tf_keras optimizer, got {}$"


def _chain_fqi(optimizer):
    q = TableQ(20, 2)
    data = chain_walk.collect_dataset(0)
    return fqi_trainer(
        q_family=q, dataset=data.to_dataset(), initial_params=q.initial_params(1, 0)[0], K=2, gamma=0.9,
        max_epochs=3, patience=3, batch_size=100, optimizer=optimizer, seed=1, log=None,
    )  # fmt: skip


def test_fqi_takes_an_annealed_adam_or_the_keras_optimizer_it_makes_and_refuses_anything_else():
    """A tf_keras optimizer is stepped as given and reset at each iteration like the one an `AnnealedAdam`
    makes: the Adam of ``make_adam(linear_schedule(...))`` over one iteration's steps gives the same
    iterates bit for bit, and so (to float rounding) does the fused kernel."""
    annealed = _chain_fqi(AnnealedAdam(lr_start=1e-2, lr_end=1e-4))
    steps = annealed.max_epochs * annealed.batches_per_pass
    keras = _chain_fqi(make_adam(linear_schedule(1e-2, 1e-4, steps)))
    fused = _chain_fqi(AnnealedAdam(lr_start=1e-2, lr_end=1e-4, fused=True))
    for trainer in (annealed, keras, fused):
        trainer.train()
    want = annealed.iterates.numpy()
    assert np.abs(want[2] - want[0]).max() > 1e-3  # training moved the parameters
    np.testing.assert_array_equal(keras.iterates.numpy(), want)
    np.testing.assert_allclose(fused.iterates.numpy(), want, rtol=1e-5, atol=1e-7)
    assert int(keras.optimizer.iterations.numpy()) == int(annealed.optimizer.iterations.numpy()) == steps
    for wrong, name in ((AnnealedAdam()(10), "tuple"), ("adam", "str")):
        with pytest.raises(TypeError, match=WRONG_OPTIMIZER.format(name)):
            _chain_fqi(wrong)


def test_profqi_takes_an_annealed_adam_or_a_keras_optimizer_and_refuses_anything_else():
    """ProFQI with the Adam an `AnnealedAdam` makes for the run's schedule, given as a tf_keras optimizer,
    trains bit for bit as with the `AnnealedAdam`; its ``lr_schedule`` is then None (the optimizer's own)."""
    annealed, pbo_a = _chain_trainer(None)
    schedule = linear_schedule(1e-2, 1e-4, annealed.lr_schedule_steps)
    keras, pbo_b = _chain_trainer(None, optimizer=make_adam(schedule))
    a_losses, b_losses = annealed.train(), keras.train()
    assert annealed.lr_schedule is not None and keras.lr_schedule is None
    np.testing.assert_array_equal(b_losses, a_losses)
    for got, want in zip(pbo_b.get_weights(), pbo_a.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    sgd, _ = _chain_trainer(None, optimizer=tf_keras.optimizers.SGD(1e-3))
    assert sgd.optimizer is not None and np.isfinite(sgd.train()).all()
    for wrong, name in ((AnnealedAdam()(10), "tuple"), ("adam", "str")):
        with pytest.raises(TypeError, match=WRONG_OPTIMIZER.format(name)):
            _chain_trainer(None, optimizer=wrong)


def _hand_table_loss(rows, phi, phi_bar, data, K=3, gamma=0.9, n_actions=2):
    """Eq. (3) by hand (numpy, float64) for a table Q and a linear operator ``Λ(ω) = ω A + b``: for each
    row ω and k = 1..K, ``r + γ (1 − done) max_a' Q_{Λ̄^{k−1}(ω)}(s', a')`` against ``Q_{Λ^k(ω)}(s, a)``;
    the mean over rows and transitions of each k, summed over k, divided by K. ``phi`` and ``phi_bar`` are
    ``(A, b)``."""
    s, a, r, s2, done = (
        np.asarray(data[key], np.float64) for key in ("state", "action", "reward", "next_state", "done")
    )
    s, a, s2 = s.astype(int).reshape(-1), a.astype(int), s2.astype(int).reshape(-1)
    total = 0.0
    for omega in np.asarray(rows, np.float64):
        target, predicted = omega, omega
        for _ in range(K):
            predicted = predicted @ phi[0] + phi[1]
            y = r + gamma * (1 - done) * target.reshape(-1, n_actions)[s2].max(axis=1)
            total += np.mean((y - predicted.reshape(-1, n_actions)[s, a]) ** 2) / len(rows)
            target = target @ phi_bar[0] + phi_bar[1]
    return total / K


def _linear_weights(pbo):
    return tuple(v.numpy().astype(np.float64) for v in (pbo.dense.kernel, pbo.dense.bias))


def _iterates(weights, omega0, n):
    out = [np.asarray(omega0, np.float64)]
    for _ in range(n):
        out.append(out[-1] @ weights[0] + weights[1])
    return np.array(out[1:])


@pytest.mark.parametrize("jit,cache", [(False, True), (False, False), ("round", True), ("round", False)])
def test_omega0_chain_rows_join_every_w_batch_at_the_refresh_s_target(jit, cache):
    """``omega0_chain_rows = 3`` on chain-walk (table Q, linear operator, K = 3; one pass per refresh, the
    whole dataset in a batch). All of W in one batch, two refreshes: each refresh's one step is Eq. (3) by
    hand over W and the refresh's ``Λ̄^j(ω₀)``, j = 1..3, at φ = φ̄ (the start, then φ after refresh 1),
    and the learner's rows are the last target's. Two W batches of 5 with a zero learning rate: the pass's
    mean is the mean of each batch's hand loss, both batches with the three rows."""
    q = TableQ(20, 2)
    omega0 = np.random.default_rng(1).normal(0, 1, q.d).astype(np.float32)
    options = dict(omega0=omega0, omega0_chain_rows=3, jit_compile=jit, cache_targets=cache)
    options.update(passes_per_refresh=1, batch_size=400)
    trainer, pbo = _chain_trainer(None, refreshes=2, w_batch_size=10, **options)
    phi0, w = _linear_weights(pbo), trainer.w_set.numpy()
    data = {key: value.numpy() for key, value in trainer.data.items()}
    (first,) = trainer.train(max_rounds=1)
    want = _hand_table_loss(np.concatenate([w, _iterates(phi0, omega0, 3)]), phi0, phi0, data)
    np.testing.assert_allclose(first, want, rtol=1e-5)
    assert abs(want - _hand_table_loss(w, phi0, phi0, data)) > 1e-3 * want  # the rows count
    phi1 = _linear_weights(pbo)
    (second,) = trainer.train()
    rows1 = _iterates(phi1, omega0, 3)
    want = _hand_table_loss(np.concatenate([w, rows1]), phi1, phi1, data)
    np.testing.assert_allclose(second, want, rtol=1e-5)
    np.testing.assert_allclose(trainer.learner.chain_rows.numpy(), rows1, rtol=1e-5, atol=1e-7)
    assert not np.allclose(rows1, _iterates(phi0, omega0, 3), rtol=1e-3)  # the target moved, the rows too
    assert not np.allclose(rows1, _iterates(_linear_weights(pbo), omega0, 3), rtol=1e-3)  # φ̄'s, not φ's
    assert trainer.learner.records() == {"omega0_chain_rows": 3}

    frozen, pbo = _chain_trainer(
        None, refreshes=1, w_batch_size=5, optimizer=AnnealedAdam(lr_start=0.0, lr_end=0.0), **options
    )
    phi0 = _linear_weights(pbo)
    rows = _iterates(phi0, omega0, 3)
    batches = [w[frozen.w_batch_indices(tf.constant(0, tf.int64), b).numpy()] for b in range(2)]
    hands = [_hand_table_loss(np.concatenate([batch, rows]), phi0, phi0, data) for batch in batches]
    np.testing.assert_allclose(frozen.train(), [np.mean(hands)], rtol=1e-5)


def test_a_run_with_omega0_chain_rows_killed_after_a_refresh_resumes_exactly(tmp_path):
    """The rows are not checkpointed: each refresh's sync recomputes them from the restored target, so a run
    stopped after 2 of 4 refreshes and restored into a fresh trainer (another operator initialisation)
    gives the uninterrupted run's last two losses, weights and rows."""
    omega0 = np.random.default_rng(1).normal(0, 1, 40).astype(np.float32)
    options = dict(omega0=omega0, omega0_chain_rows=3, refreshes=4, passes_per_refresh=2, batch_size=100)
    options.update(w_batch_size=5, checkpoint_every_s=0.0)
    whole, pbo_whole = _chain_trainer(str(tmp_path / "whole"), **options)
    want = whole.train()
    first, _ = _chain_trainer(str(tmp_path / "split"), **options)
    first.train(max_rounds=2)
    resumed, pbo = _chain_trainer(str(tmp_path / "split"), pbo_seed=99, **options)
    assert resumed.rounds_done == 2
    np.testing.assert_allclose(resumed.train(), want[4:], rtol=1e-6)
    for got, ref in zip(pbo.weights, pbo_whole.weights, strict=True):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(
        resumed.learner.chain_rows.numpy(), whole.learner.chain_rows.numpy(), rtol=1e-6
    )


@pytest.mark.parametrize("jit", [True, "round"])
def test_seeds_stacked_with_omega0_chain_rows_train_as_single_seed_runs(jit):
    """The seed axis (`seed_axis_rounds`) with ``omega0_chain_rows = 2``, each seed at its own ω₀: each seed
    gets its own single-seed run's losses and weights (seed 0 with cached targets, seed 1 per-step; the
    single-seed runs in graph mode), and seeds with different numbers of rows are refused in one line."""
    from pbo_tf.trainers import seed_axis_rounds, train_seeds

    def trainer(seed, rows=2, mode=jit):
        omega0 = _deep_profqi_trainer(seed, False).w_set.numpy()[1]
        return _deep_profqi_trainer(seed, mode, cache=seed == 0, omega0=omega0, omega0_chain_rows=rows)

    singles = [trainer(s, mode=False) for s in (0, 1)]
    starts = [[w.numpy() for w in t.pbo.weights] for t in singles]
    want = [t.train() for t in singles]
    stacked = [trainer(s) for s in (0, 1)]
    for start, b in zip(starts, stacked, strict=True):
        for va, vb in zip(start, b.pbo.weights, strict=True):
            vb.assign(va)
    got = train_seeds(stacked, log=None, run_all=seed_axis_rounds(stacked))
    for s in (0, 1):
        np.testing.assert_allclose(got[s], want[s], rtol=2e-5)
        for va, vb in zip(singles[s].pbo.weights, stacked[s].pbo.weights, strict=True):
            np.testing.assert_allclose(vb.numpy(), va.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(
            stacked[s].learner.chain_rows.numpy(), singles[s].learner.chain_rows.numpy(), rtol=1e-4, atol=1e-6
        )
    with pytest.raises(ValueError, match=r"must share omega0_chain_rows, got \['0', '2'\]") as error:
        seed_axis_rounds([trainer(0), trainer(1, rows=0)])
    assert "\n" not in str(error.value)


def test_omega0_chain_rows_refuse_bad_values_in_one_line():
    """Negative or non-integer values name the config field; rows without ω₀ name the option; ProDQN's
    config has no such field (ProDQN takes no W batch of ω₀'s chain)."""
    from pbo_tf.configs import ProDQNConfig, ProFQIConfig

    for bad in (-1, 1.5, "2", True):
        message = f"ProFQIConfig.omega0_chain_rows must be an integer >= 0, got {bad!r}"
        with pytest.raises(ValueError, match=re.escape(message)) as error:
            ProFQIConfig(K=2, refreshes=1, omega0_chain_rows=bad)
        assert "\n" not in str(error.value)
    assert ProFQIConfig(K=2, refreshes=1, omega0_chain_rows=2.0).omega0_chain_rows == 2
    with pytest.raises(ValueError, match=re.escape("omega0_chain_rows > 0 adds ω₀'s chain points")) as error:
        _chain_trainer(None, omega0_chain_rows=2)
    assert "\n" not in str(error.value)
    with pytest.raises(TypeError, match="unexpected keyword argument 'omega0_chain_rows'"):
        ProDQNConfig(K=2, refreshes=1, omega0_chain_rows=2)
