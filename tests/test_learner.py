"""The PBO learner (target, frozen chain, loss terms, fixed-point estimate, monitor, records) on operators
whose every output is known by hand."""

import re

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.learner import PBOLearner
from pbo_tf.loss_terms import BellmanTerm, FixedPointTerm, LossContext, combine_terms
from pbo_tf.losses import pbo_loss, target_chain
from pbo_tf.operators import DeepPBO, LinearPBO
from pbo_tf.q import TableQ
from tests.test_losses import BATCH

# The hand-worked case of tests/test_losses.py (BATCH): 2 states, 1 action, γ = 0.5, Λ(ω) = 0.5 ω + (1, 0); at
# ω = 0 with K = 2 the loss is 0.0625 ("mean"), 0.125 / 3 ("reference"), + 0.5 with Eq. (4)'s term.


def _linear(scale: float, bias=(0.0, 0.0)) -> LinearPBO:
    pbo = LinearPBO(2)
    pbo.ensure_built()
    pbo.dense.kernel.assign(scale * np.eye(2, dtype=np.float32))
    pbo.dense.bias.assign(np.asarray(bias, np.float32))
    return pbo


def _learner(scale=0.5, target_scale=0.5, w_set=((0.0, 0.0),), **options) -> PBOLearner:
    return PBOLearner(
        pbo=_linear(scale, (1.0, 0.0)),
        target_pbo=_linear(target_scale, (1.0, 0.0)),
        q_family=TableQ(2, 1),
        w_set=np.asarray(w_set, np.float32),
        K=2,
        gamma=0.5,
        **options,
    )


def _terms_loss(terms, pbo, q, omega, chain):
    """The terms' sum and metrics on the hand case's batch (`combine_terms` on one context)."""
    context = LossContext(pbo=pbo, q_family=q, params=omega, batch=BATCH, gamma=0.5, target_params=chain)
    return combine_terms(terms, context)


def test_the_terms_are_pbo_loss_term_by_term_and_name_their_metrics():
    """The hand case's terms: Eq. (3)'s per-k residuals (0, 0.125), so 0.0625 ("mean") or 0.125 / 3
    ("reference"), + F = 0.5 with Eq. (4)'s term; the same numbers as `pbo_loss` with the same options,
    and every metric under its term's name."""
    q, pbo = TableQ(2, 1), _linear(0.5, (1.0, 0.0))
    omega = tf.zeros([1, 2])
    chain = target_chain(pbo, omega, 2)
    for terms, options, want in (
        ([BellmanTerm()], {}, 0.0625),
        ([BellmanTerm(normalisation="reference")], {"normalisation": "reference"}, 0.125 / 3),
        ([BellmanTerm(), FixedPointTerm()], {"fixed_point_term": True}, 0.5625),
    ):
        loss, metrics = _terms_loss(terms, pbo, q, omega, chain)
        np.testing.assert_allclose(loss.numpy(), want, rtol=1e-6)
        direct, extras = pbo_loss(pbo, q, omega, BATCH, chain, gamma=0.5, **options)
        np.testing.assert_allclose(loss.numpy(), direct.numpy(), rtol=0)
        np.testing.assert_allclose(extras.per_k.numpy(), [0.0, 0.125], rtol=1e-6)
        np.testing.assert_allclose([metrics["bellman/k1"], metrics["bellman/k2"]], [0.0, 0.125], rtol=1e-6)
        np.testing.assert_allclose(metrics["bellman"], want if len(terms) == 1 else 0.0625, rtol=1e-6)
        assert sorted(metrics) == sorted(
            ["bellman", "bellman/k1", "bellman/k2"] + ["fixed_point"] * (len(terms) > 1)
        )
        if len(terms) > 1:
            np.testing.assert_allclose(metrics["fixed_point"], 0.5, rtol=1e-6)
    with pytest.raises(ValueError, match="BellmanTerm.normalisation must be one of"):
        BellmanTerm(normalisation="sum")
    with pytest.raises(ValueError, match="BellmanTerm.weight must be a finite number >= 0, got -1"):
        BellmanTerm(weight=-1)


def test_the_learner_loss_uses_the_frozen_target_chain():
    """φ: Λ(ω) = 0.5 ω + (1, 0); φ̄: 0.9 ω + (1, 0) until a sync copies φ. At W = {(1, 1)} the frozen chain is
    (ω, Λ̄(ω)) = ((1, 1), (1.9, 0.9)) before the sync and ((1, 1), (1.5, 0.5)) after it, computed or cached
    (the cache filled from φ̄ by `refresh_cached_chain`, then by the sync), and the learner's loss is
    Eq. (3) by hand (`_table_loss`) on that chain: the target operator's, not the online one's."""
    omega, bias = (1.0, 1.0), np.array([1.0, 0.0])
    for cache in (False, True):
        learner = _learner(target_scale=0.9, w_set=(omega,), cache_chain=cache)
        learner.refresh_cached_chain()  # (nothing without the cache)
        for target_scale, second in ((0.9, [1.9, 0.9]), (0.5, [1.5, 0.5])):
            if target_scale == 0.5:
                learner.sync_target()  # φ̄ ← φ
            chain = learner.frozen_chain()
            np.testing.assert_allclose(chain.numpy()[:, 0], [omega, second], rtol=1e-6)
            loss, _ = learner.loss(learner.w_set, BATCH, chain)
            want = _table_loss([omega], 0.5 * np.eye(2), bias, target_scale * np.eye(2), bias)
            np.testing.assert_allclose(loss.numpy(), want, rtol=1e-6)


def test_sync_target_is_a_hard_copy_or_polyak_and_refreshes_the_cache():
    """φ̄ ← τ φ + (1 − τ) φ̄ on the kernels 0.5 I (φ) and 0.9 I (φ̄), biases (1, 0) both: τ = 0.25 gives
    0.8 I; the cached chain of W = {(1, 1), (2, 0)} is then (ω, 0.8 ω + (1, 0)) and rows gather from it."""
    w = ((1.0, 1.0), (2.0, 0.0))
    learner = _learner(target_scale=0.9, w_set=w, cache_chain=True)
    learner.sync_target(tau=0.25)
    np.testing.assert_allclose(learner.target_pbo.dense.kernel.numpy(), 0.8 * np.eye(2), rtol=1e-6)
    np.testing.assert_allclose(learner.target_pbo.dense.bias.numpy(), [1.0, 0.0], rtol=1e-6)
    want = np.array([w, [[1.8, 0.8], [2.6, 0.0]]], np.float32)  # [K, n_W, d]
    np.testing.assert_allclose(learner.cached_chain.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(learner.frozen_chain(tf.constant([1])).numpy(), want[:, 1:], rtol=1e-6)
    learner.sync_target()
    np.testing.assert_allclose(learner.target_pbo.dense.kernel.numpy(), 0.5 * np.eye(2), rtol=1e-6)
    np.testing.assert_allclose(learner.frozen_chain().numpy()[1], [[1.5, 0.5], [2.0, 0.0]], rtol=1e-6)
    uncached = _learner(target_scale=0.9, w_set=w)
    assert uncached.cached_chain is None
    uncached.sync_target(tau=0.25)
    np.testing.assert_allclose(uncached.frozen_chain().numpy(), want, rtol=1e-6)


def test_the_fixed_point_estimate_follows_each_sync_and_the_learner_records_it():
    """Λ̄(ω) = 2ω from ω₀ = (1, 0) with N = 6: ω̄ = (64, 0) unbounded; with radius 5 and max ‖W‖ = 2 the
    ball is 10 and ω̄ = Λ̄³(ω₀) = (8, 0). The records name only the choices that differ from the paper's."""
    options = {"gamma": 0.5, "omega0": np.array([1.0, 0.0], np.float32)}
    w = ((2.0, 0.0),)
    free = PBOLearner(
        pbo=_linear(2.0), target_pbo=_linear(1.0), q_family=TableQ(2, 1), w_set=np.asarray(w, np.float32),
        K=2, loss_terms=[BellmanTerm(), FixedPointTerm(iterations=6)], **options,
    )  # fmt: skip
    free.sync_target()
    np.testing.assert_array_equal(free.fixed_point_estimate.read().numpy(), [[64.0, 0.0]])
    terms = ["bellman", "fixed_point"]
    assert free.records() == {"loss_terms": terms, "fixed_point_iterations": 6}
    bounded = PBOLearner(
        pbo=_linear(2.0), target_pbo=_linear(1.0), q_family=TableQ(2, 1), w_set=np.asarray(w, np.float32),
        K=2, loss_terms=[BellmanTerm(), FixedPointTerm(iterations=6, radius=5.0)],
        monitor=lambda pbo: ({"units": 1.0}, "1 unit"), **options,
    )  # fmt: skip
    bounded.sync_target()
    np.testing.assert_array_equal(bounded.fixed_point_estimate.read().numpy(), [[8.0, 0.0]])
    assert bounded.records() == {"loss_terms": terms, "fixed_point_iterations": 6, "fixed_point_radius": 5.0}
    scalars, text = bounded.monitor()
    assert scalars == {"units": 1.0, "operator/fixed_point_iterations_used": 3}
    assert text == "1 unit; fixed point at Λ̄^3(ω₀) of 6"
    assert free.monitor() is None  # no monitor given
    paper = _learner()
    assert paper.records() == {} and paper.fixed_point_estimate is None and paper.diagnose(None) == ""


def test_learner_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"the set W must be \[n_W, 2\], got \[3\]"):
        _learner(w_set=(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="takes pbo_tf.loss_terms.LossTerm objects, got {'gamma': 0.5}"):
        _learner(loss_terms=[{"gamma": 0.5}])
    with pytest.raises(ValueError, match="has two loss terms named 'bellman'"):
        _learner(loss_terms=[BellmanTerm(), BellmanTerm(weight=0.5)])
    with pytest.raises(ValueError, match="needs at least one loss term"):
        _learner(loss_terms=[])
    with pytest.raises(ValueError, match="set FixedPointTerm.iterations > 0"):
        FixedPointTerm(start="w")
    with pytest.raises(ValueError, match="FixedPointTerm.start must be one of"):
        FixedPointTerm(iterations=3, start="W")
    with pytest.raises(
        ValueError, match="DeepPBO has no closed-form fixed point.*FixedPointTerm.iterations > 0"
    ):
        PBOLearner(
            pbo=DeepPBO(2, hidden_units=[4]), target_pbo=DeepPBO(2, hidden_units=[4]), q_family=TableQ(2, 1),
            w_set=np.zeros([1, 2]), K=2, gamma=0.5,
            loss_terms=[BellmanTerm(), FixedPointTerm()],
        )  # fmt: skip
    with pytest.raises(ValueError, match="PBO size mismatch"):
        PBOLearner(
            pbo=LinearPBO(3), target_pbo=LinearPBO(3), q_family=TableQ(2, 1), w_set=np.zeros([1, 2]), K=2,
            gamma=0.5,
        )  # fmt: skip


def test_the_term_s_weight_and_balance_on_the_hand_case():
    """L₃ = 0.0625 and F = 0.5 at ω = 0 (the hand case): weight 0.3 gives 0.0625 + 0.15; balanced, the
    term is scaled to L₃'s size, 0.0625 + 0.0625, and its gradient is (L₃ / F) = 0.125 times its own: the
    same gradient as weight 0.125 unbalanced."""
    q, pbo = TableQ(2, 1), _linear(0.5, (1.0, 0.0))
    omega = tf.zeros([1, 2])
    chain = target_chain(pbo, omega, 2)

    def value_and_gradient(term):
        with tf.GradientTape() as tape:
            value, metrics = _terms_loss([BellmanTerm(), term], pbo, q, omega, chain)
        return float(value), [g.numpy() for g in tape.gradient(value, pbo.trainable_variables)], metrics

    weighted, _, metrics = value_and_gradient(FixedPointTerm(weight=0.3))
    np.testing.assert_allclose(weighted, 0.2125, rtol=1e-6)
    np.testing.assert_allclose(metrics["fixed_point"], 0.5, rtol=1e-6)  # before its weight
    balanced, balanced_grad, metrics = value_and_gradient(FixedPointTerm(balance=True))
    np.testing.assert_allclose(balanced, 0.125, rtol=1e-6)
    np.testing.assert_allclose(
        [metrics["fixed_point"], metrics["fixed_point/unscaled"], metrics["fixed_point/scale"]],
        [0.0625, 0.5, 0.125],
        rtol=1e-6,
    )
    _, same_grad, _ = value_and_gradient(FixedPointTerm(weight=0.125))
    for got, want in zip(balanced_grad, same_grad, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert np.abs(balanced_grad[0]).max() > 1e-3


def test_an_estimate_of_several_chain_points_and_the_warmup_s_weight():
    """``fixed_point_at="past_k"``: Λ̄(ω) = 2ω from ω₀ = (1, 0), K = 2, N = 6: ω̄ = Λ̄^3..6(ω₀) = (8, 16, 32,
    64) · (1, 0); bounded to 40 (radius 20, max ‖W‖ = 2) the chain is cut at Λ̄^5 = (32, 0), which stands in
    for Λ̄^6. Warm-up 0.5: at progress 0.25 the term's weight is halved (L₃ + 0.5 F), from 0.5 on full."""
    w = np.array([[2.0, 0.0]], np.float32)
    for radius, want in ((None, [8, 16, 32, 64]), (20.0, [8, 16, 32, 32])):
        learner = PBOLearner(
            pbo=_linear(2.0), target_pbo=_linear(1.0), q_family=TableQ(2, 1), w_set=w, K=2, gamma=0.5,
            loss_terms=[BellmanTerm(), FixedPointTerm(iterations=6, radius=radius, at="past_k")],
            omega0=np.array([1.0, 0.0], np.float32),
        )  # fmt: skip
        learner.sync_target()
        np.testing.assert_array_equal(learner.fixed_point_estimate.read().numpy()[:, 0], want)
        np.testing.assert_array_equal(learner.fixed_point_estimate.read().numpy()[:, 1], 0.0)
    hand = _learner(loss_terms=[BellmanTerm(), FixedPointTerm(warmup=0.5)])  # linear: ω*
    with pytest.raises(ValueError, match="FixedPointTerm.warmup needs the run's progress"):
        hand.sync_target()
    for progress, want in ((0.0, 0.0625), (0.25, 0.0625 + 0.25), (0.5, 0.5625), (0.9, 0.5625)):
        hand.sync_target(progress=progress)
        loss, _ = hand.loss(hand.w_set, BATCH, hand.frozen_chain())
        np.testing.assert_allclose(loss.numpy(), want, rtol=1e-6)
    assert hand.records() == {"loss_terms": ["bellman", "fixed_point"], "fixed_point_warmup": 0.5}


def _table_loss(rows, kernel, bias, target_kernel, target_bias, K=2, gamma=0.5):
    """Eq. (3) by hand (numpy) on the 2-state, 1-action table of BATCH: for every row ω and k = 1..K, the
    target ``r + γ (1 − done) Q_{Λ̄^{k−1}(ω)}(s')`` against ``Q_{Λ^k(ω)}(s)``; the mean over rows and
    transitions of each k, summed over k and divided by K."""
    s, r, s2, done = np.array([0, 1]), np.array([1.0, 0.0]), np.array([1, 0]), np.array([0.0, 1.0])
    per_k = np.zeros(K)
    for omega in np.asarray(rows, np.float64):
        target, predicted = omega, omega
        for k in range(K):
            predicted = kernel @ predicted + bias  # Λ^{k+1}(ω)
            y = r + gamma * (1 - done) * target[s2]
            per_k[k] += np.mean((y - predicted[s]) ** 2) / len(rows)
            target = target_kernel @ target + target_bias  # Λ̄^{k+1}(ω)
    return per_k.sum() / K


def test_omega0_chain_rows_join_every_w_batch_at_each_sync_s_target():
    """``omega0_chain_rows = 2`` from ω₀ = (1, 1): after a sync to Λ̄(ω) = 0.5 ω + (1, 0) the training rows are
    W, then Λ̄(ω₀) = (1.5, 0.5) and Λ̄²(ω₀) = (1.75, 0.25); every W batch gets both, their frozen chain is
    Λ̄^{j+k−1}(ω₀) and the loss is Eq. (3) over the batch's rows and the two (by hand). After φ changes to
    0.8 I and a second sync, the rows are the new target's: Λ̄(ω₀) = (1.8, 0.8), Λ̄²(ω₀) = (2.44, 0.64)."""
    w = ((0.0, 0.0), (2.0, -1.0), (0.5, 0.5))
    omega0 = np.array([1.0, 1.0], np.float32)
    for cache in (False, True):
        learner = _learner(target_scale=0.9, w_set=w, omega0=omega0, omega0_chain_rows=2, cache_chain=cache)
        learner.sync_target()
        chain_rows = [[1.5, 0.5], [1.75, 0.25]]
        np.testing.assert_allclose(learner.chain_rows.numpy(), chain_rows, rtol=1e-6)
        np.testing.assert_allclose(
            learner.training_rows().numpy(), np.concatenate([w, chain_rows]), rtol=1e-6
        )
        rows = learner.batch_rows(tf.constant([2, 0]))
        np.testing.assert_array_equal(rows.numpy(), [2, 0, 3, 4])
        chain = learner.frozen_chain(rows)  # [K, 4, d]
        np.testing.assert_allclose(chain.numpy()[1, 2:], [[1.75, 0.25], [1.875, 0.125]], rtol=1e-6)
        batch = tf.gather(learner.training_rows(), rows)
        loss, _ = learner.loss(batch, BATCH, chain)
        hand = _table_loss(
            [w[2], w[0], *chain_rows], 0.5 * np.eye(2), [1.0, 0.0], 0.5 * np.eye(2), [1.0, 0.0]
        )
        np.testing.assert_allclose(loss.numpy(), hand, rtol=1e-6)
        without = _table_loss([w[2], w[0]], 0.5 * np.eye(2), [1.0, 0.0], 0.5 * np.eye(2), [1.0, 0.0])
        assert abs(hand - without) > 1e-2  # the chain rows count
        learner.pbo.dense.kernel.assign(0.8 * np.eye(2, dtype=np.float32))
        learner.sync_target()
        np.testing.assert_allclose(learner.chain_rows.numpy(), [[1.8, 0.8], [2.44, 0.64]], rtol=1e-6)
        np.testing.assert_allclose(
            learner.frozen_chain().numpy()[:, 3], [[1.8, 0.8], [2.44, 0.64]], rtol=1e-6
        )
        assert learner.records() == {"omega0_chain_rows": 2}
    paper = _learner(w_set=w)
    assert paper.training_rows() is paper.w_set and paper.rows_size == 3
    indices = tf.constant([1, 2])
    assert paper.batch_rows(indices) is indices


def test_diagnose_names_omega0_s_chain_rows_when_they_blow_up():
    """Synced to Λ̄(ω) = 1e30 ω + (1, 0) from ω₀ = (1, 1): Λ̄(ω₀) is finite (1e30 in float32), Λ̄²(ω₀)
    overflows to inf, and `diagnose` names the rows (this learner has no fixed-point estimate, so the rows
    are all it can name); after a sync to Λ̄(ω) = 0.5 ω + (1, 0) the rows are finite again and nothing
    is named."""
    omega0 = np.array([1.0, 1.0], np.float32)
    learner = _learner(scale=1e30, omega0=omega0, omega0_chain_rows=2)
    learner.sync_target()  # φ̄ ← φ
    rows = learner.chain_rows.numpy()
    assert np.all(np.isfinite(rows[0])) and not np.all(np.isfinite(rows[1]))
    message = learner.diagnose(lambda params, label: f"Q at {label}")
    assert message == (
        "ω₀'s chain rows Λ̄^j(ω₀), j = 1..2, are non-finite: the target operator's iterates of ω₀ blow up "
        "(try fewer omega0_chain_rows)"
    )
    learner.pbo.dense.kernel.assign(0.5 * np.eye(2, dtype=np.float32))
    learner.sync_target()
    np.testing.assert_allclose(learner.chain_rows.numpy(), [[1.5, 0.5], [1.75, 0.25]], rtol=1e-6)
    assert learner.diagnose(lambda params, label: f"Q at {label}") == ""


def test_omega0_chain_rows_refuse_bad_values_in_one_line():
    omega0 = np.zeros(2, np.float32)
    for bad, message in (
        (dict(omega0_chain_rows=-1, omega0=omega0), "omega0_chain_rows must be an integer >= 0, got -1"),
        (dict(omega0_chain_rows=1.5, omega0=omega0), "omega0_chain_rows must be an integer >= 0, got 1.5"),
        (dict(omega0_chain_rows=True, omega0=omega0), "omega0_chain_rows must be an integer >= 0, got True"),
        (dict(omega0_chain_rows=2), "omega0_chain_rows > 0 adds ω₀'s chain points Λ̄^j(ω₀) to the W batches"),
        (dict(omega0_chain_rows=2, omega0=np.zeros(3)), "omega0_chain_rows > 0 needs omega0 of size d=2"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)) as error:
            _learner(**bad)
        assert "\n" not in str(error.value)
