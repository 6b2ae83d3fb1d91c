"""The PBO loss on hand-computed cases, its options, and its gradient against finite differences."""

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.fixed_point import FixedPointEstimate, check_fixed_point_radius
from pbo_tf.losses import (
    chain_targets,
    fqi_loss,
    pbo_loss,
    prediction_chain,
    target_chain,
)
from pbo_tf.operators import DeepPBO, LinearPBO
from pbo_tf.operators.base import PBO
from pbo_tf.q import TableQ

# Tiny case worked by hand: 2 states, 1 action (d = 2), gamma = 0.5,
#   Λ(ω) = ω Wᵀ + b with W = 0.5 I, b = (1, 0); ω = (0, 0); K = 2; target operator = Λ.
#   transitions: (s=0, r=1, s'=1, not done) and (s=1, r=0, s'=0, done).
#   chain: ω̄0 = (0, 0), ω̄1 = Λ(ω̄0) = (1, 0); predictions Λ(ω) = (1, 0), Λ²(ω) = (1.5, 0).
#   k=1: targets (1 + 0.5·Q_ω̄0(1) = 1, 0) vs (1, 0)        -> mean residual 0
#   k=2: targets (1 + 0.5·Q_ω̄1(1) = 1, 0) vs (1.5, 0)      -> mean residual 0.25 / 2 = 0.125
#   loss = (0 + 0.125) / 2 = 0.0625 ("mean"), 0.125 / 3 ("reference").
#   fixed point ω* = (I − W)⁻¹ b = (2, 0): targets (1 + 0.5·0, 0) vs (2, 0) -> (1 + 0) / 2 = 0.5.
BATCH = {
    "state": tf.constant([0, 1]),
    "action": tf.constant([0, 0]),
    "reward": tf.constant([1.0, 0.0]),
    "next_state": tf.constant([1, 0]),
    "done": tf.constant([0.0, 1.0]),
}


def _tiny_linear():
    pbo = LinearPBO(2)
    pbo.ensure_built()
    pbo.dense.kernel.assign(0.5 * np.eye(2, dtype=np.float32))
    pbo.dense.bias.assign([1.0, 0.0])
    return pbo


def test_hand_computed_loss_values():
    q, pbo = TableQ(2, 1), _tiny_linear()
    omega = tf.zeros([1, 2])
    chain = target_chain(pbo, omega, 2)
    np.testing.assert_allclose(chain.numpy()[:, 0], [[0, 0], [1, 0]])
    loss, extras = pbo_loss(pbo, q, omega, BATCH, chain, gamma=0.5)
    np.testing.assert_allclose(extras.per_k.numpy(), [0.0, 0.125])
    np.testing.assert_allclose(loss.numpy(), 0.0625)
    ref, _ = pbo_loss(pbo, q, omega, BATCH, chain, gamma=0.5, normalisation="reference")
    np.testing.assert_allclose(ref.numpy(), 0.125 / 3, rtol=1e-6)
    with_fp, extras = pbo_loss(pbo, q, omega, BATCH, chain, gamma=0.5, fixed_point_term=True)
    np.testing.assert_allclose(extras.fixed_point.numpy(), 0.5, rtol=1e-6)
    np.testing.assert_allclose(with_fp.numpy(), 0.5625, rtol=1e-6)


def test_fixed_point_term_at_an_estimate_by_hand():
    """The deep form of Eq. (4)'s term, ‖ΓQ_ω̄ − Q_Λ(ω̄)‖² at a given ω̄ (the tiny case above):
    at ω̄ = ω* = (2, 0), a fixed point, it equals the closed form (0.5); at ω̄ = (1, 1): targets
    (1 + 0.5·1, 0) = (1.5, 0) against Λ(ω̄) = (1.5, 0.5) → (0 + 0.25) / 2 = 0.125."""
    q, pbo = TableQ(2, 1), _tiny_linear()
    omega = tf.zeros([1, 2])
    chain = target_chain(pbo, omega, 2)
    for estimate, term in (([2.0, 0.0], 0.5), ([1.0, 1.0], 0.125)):
        loss, extras = pbo_loss(
            pbo,
            q,
            omega,
            BATCH,
            chain,
            gamma=0.5,
            fixed_point_term=True,
            fixed_point_input=tf.constant(estimate),
        )
        np.testing.assert_allclose(extras.fixed_point.numpy(), term, rtol=1e-6)
        np.testing.assert_allclose(loss.numpy(), 0.0625 + term, rtol=1e-6)
    # A deep operator (no closed form) takes the term at an estimate.
    deep = DeepPBO(2, hidden_units=[4], init_std=0.3)
    _, extras = pbo_loss(
        deep, q, omega, BATCH, chain, 0.5, fixed_point_term=True, fixed_point_input=tf.ones([1, 2])
    )
    out = deep(tf.ones([1, 2])).numpy()[0]
    np.testing.assert_allclose(extras.fixed_point.numpy(), ((1.5 - out[0]) ** 2 + out[1] ** 2) / 2, rtol=1e-5)


def test_fixed_point_term_at_an_estimate_differentiates_the_operator_only():
    """Finite differences of the term in the operator's kernel, the estimate ω̄ held fixed; and the
    gradient does not reach ω̄ (its targets and input are constants of the step)."""
    q = TableQ(4, 2)
    rng = np.random.default_rng(5)
    omega = tf.constant(rng.normal(size=(2, 8)), tf.float32)
    chain = target_chain(_FunctionalLinear(tf.zeros([8, 8]), tf.zeros([8])), omega, 2)
    batch, bias = _chain_walk_batch(2), tf.constant(rng.normal(size=8), tf.float32)
    estimate = tf.constant(rng.normal(size=(1, 8)), tf.float32)

    def term_of_kernel(kernel):
        _, extras = pbo_loss(
            _FunctionalLinear(kernel, bias), q, omega, batch, chain, 0.9, fixed_point_term=True,
            fixed_point_input=estimate,
        )  # fmt: skip
        return extras.fixed_point

    kernel0 = tf.constant(0.2 * rng.normal(size=(8, 8)), tf.float32)
    theoretical, numerical = tf.test.compute_gradient(term_of_kernel, [kernel0], delta=1e-3)
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=2e-2, atol=2e-3)
    with tf.GradientTape() as tape:
        tape.watch(estimate)
        _, extras = pbo_loss(
            _FunctionalLinear(kernel0, bias), q, omega, batch, chain, 0.9, fixed_point_term=True,
            fixed_point_input=estimate,
        )  # fmt: skip
    assert tape.gradient(extras.fixed_point, estimate) is None


def _scaling_pbo(scale: float, bias=(0.0, 0.0)):
    pbo = LinearPBO(2)
    pbo.ensure_built()
    pbo.dense.kernel.assign(scale * np.eye(2, dtype=np.float32))
    pbo.dense.bias.assign(np.asarray(bias, np.float32))
    return pbo


def test_the_fixed_point_estimate_stops_where_the_chain_leaves_the_ball():
    """`FixedPointEstimate` on operators whose chains are known: Λ(ω) = 2ω from ω₀ = (1, 0) has
    ‖Λ^k(ω₀)‖ = 2^k; unbounded, N = 6 gives (64, 0); with max_norm 10 the chain's last iterate inside is
    Λ³(ω₀) = (8, 0) (16 > 10), with max_norm 8 also (the sphere is inside), with 0.5 ω₀ itself (n = 0)."""
    omega0 = np.array([1.0, 0.0], np.float32)
    doubling = _scaling_pbo(2.0)
    for max_norm, n in ((None, 6), (10.0, 3), (8.0, 3), (0.5, 0), (1e9, 6)):
        estimate = FixedPointEstimate(doubling, omega0, 6, max_norm=max_norm)
        estimate.update()
        assert int(estimate.iterations_used.numpy()) == n
        np.testing.assert_array_equal(estimate.read().numpy(), [[2.0**n, 0.0]])


def test_an_estimate_from_several_starts_cuts_each_chain_where_it_leaves():
    """``starts`` [m, d]: one chain per row. Λ(ω) = 2ω, N = 6, rows (1, 0), (0, 0.25), (0, 0): unbounded,
    ω̄ = 64 · starts; with max_norm 10 row 0 stops at Λ³ = (8, 0) (16 > 10), row 1 at Λ⁵ = (0, 8), row 2
    (norm 0 throughout) at Λ⁶ = 0; iterations_used is the least n, 3."""
    starts = np.array([[1.0, 0.0], [0.0, 0.25], [0.0, 0.0]], np.float32)
    doubling = _scaling_pbo(2.0)
    free = FixedPointEstimate(doubling, None, 6, starts=starts)
    free.update()
    np.testing.assert_array_equal(free.read().numpy(), 64.0 * starts)
    bounded = FixedPointEstimate(doubling, None, 6, max_norm=10.0, starts=starts)
    bounded.update()
    np.testing.assert_array_equal(bounded.read().numpy(), [[8.0, 0.0], [0.0, 8.0], [0.0, 0.0]])
    assert int(bounded.iterations_used.numpy()) == 3
    assert bounded.progress()[1] == "fixed point at Λ̄^≥3(W) of 6"
    for kwargs, match in (
        (dict(omega0=starts[0], starts=starts), "omega0 or starts, not both"),
        (dict(omega0=None, starts=starts[0]), r"starts must be \[m, 2\] with m >= 1, got \[2\]"),
        (dict(omega0=None, starts=np.zeros((0, 2))), r"starts must be \[m, 2\] with m >= 1, got \[0, 2\]"),
    ):
        with pytest.raises(ValueError, match=match):
            FixedPointEstimate(doubling, iterations=6, **kwargs)


def test_the_fixed_point_term_at_several_estimates_is_their_mean():
    """With ``fixed_point_input`` [m, d] the term is the mean of the rows' terms (the tiny case above:
    0.5 at ω* = (2, 0) and 0.125 at (1, 1), so 0.3125 for both rows), and the loss Eq. (3) + that."""
    q, pbo = TableQ(2, 1), _tiny_linear()
    omega = tf.zeros([1, 2])
    chain = target_chain(pbo, omega, 2)
    loss, extras = pbo_loss(
        pbo, q, omega, BATCH, chain, gamma=0.5, fixed_point_term=True,
        fixed_point_input=tf.constant([[2.0, 0.0], [1.0, 1.0]]),
    )  # fmt: skip
    np.testing.assert_allclose(extras.fixed_point.numpy(), 0.3125, rtol=1e-6)
    np.testing.assert_allclose(loss.numpy(), 0.0625 + 0.3125, rtol=1e-6)


def test_a_bounded_estimate_of_a_contracting_chain_is_the_unbounded_one():
    """Λ(ω) = 0.5 ω + (1, 0) contracts to ω* = (2, 0): every iterate from ω₀ = 0 has norm < 2, so a bound
    of 3 changes nothing (bit for bit), and ω̄ = Λ^N(ω₀) = (2 − 2^{1−N}, 0)."""
    pbo, omega0 = _scaling_pbo(0.5, (1.0, 0.0)), np.zeros(2, np.float32)
    free, bounded = FixedPointEstimate(pbo, omega0, 12), FixedPointEstimate(pbo, omega0, 12, max_norm=3.0)
    free.update(), bounded.update()
    np.testing.assert_array_equal(bounded.read().numpy(), free.read().numpy())
    np.testing.assert_allclose(free.read().numpy(), [[2.0 - 2.0**-11, 0.0]], rtol=1e-6)
    assert int(bounded.iterations_used.numpy()) == 12


def test_a_bounded_estimate_stops_before_a_non_finite_iterate():
    """Λ(ω) = 10²⁰ ω from ω₀ = (1, 0): Λ(ω₀) = (10²⁰, 0) is finite, Λ²(ω₀) overflows float32; with a bound
    larger than 10²⁰ the estimate is Λ(ω₀) (its norm, 10²⁰, is measured without overflow), without a
    bound it is non-finite."""
    pbo, omega0 = _scaling_pbo(1e20), np.array([1.0, 0.0], np.float32)
    bounded, free = FixedPointEstimate(pbo, omega0, 4, max_norm=1e30), FixedPointEstimate(pbo, omega0, 4)
    bounded.update(), free.update()
    assert int(bounded.iterations_used.numpy()) == 1
    np.testing.assert_allclose(bounded.read().numpy(), [[1e20, 0.0]], rtol=1e-6)
    assert not np.all(np.isfinite(free.read().numpy()))


def test_fixed_point_radius_sets_the_bound_from_w_and_errors_name_the_problem():
    w = np.array([[3.0, 4.0], [0.0, 1.0]], np.float32)  # largest norm 5
    assert check_fixed_point_radius(30, 2.0, w) == 10.0
    assert check_fixed_point_radius(30, None, w) is None
    assert check_fixed_point_radius(0, None, w) is None
    for bad, match in (
        (-1.0, "positive number or None, got -1.0"),
        (0, "positive number or None, got 0"),
        (True, "positive number or None, got True"),
        ("10", "positive number or None, got '10'"),
        (float("inf"), "must be finite, got inf"),
    ):
        with pytest.raises(ValueError, match=match):
            check_fixed_point_radius(30, bad, w)
    with pytest.raises(ValueError, match="set FixedPointTerm.iterations > 0"):
        check_fixed_point_radius(0, 2.0, w)
    with pytest.raises(ValueError, match="max_norm must be a positive number or None, got -3"):
        FixedPointEstimate(_scaling_pbo(1.0), np.zeros(2, np.float32), 3, max_norm=-3)


def test_hand_computed_fqi_loss():
    q = TableQ(2, 1)
    # Q_ω = (1, 0), target ω̄ = (0, 3): targets (1 + 0.5·3, 0) = (2.5, 0) -> ((2.5−1)² + 0) / 2.
    loss = fqi_loss(q, tf.constant([[1.0, 0.0]]), tf.constant([[0.0, 3.0]]), BATCH, gamma=0.5)
    np.testing.assert_allclose(loss.numpy(), 1.125)


class _FunctionalLinear(PBO):
    """Λ(ω) = ω·kernel + bias with kernel/bias plain tensors (so compute_gradient can vary them)."""

    has_fixed_point = True

    def __init__(self, kernel, bias):
        super().__init__(int(bias.shape[0]))
        self.kernel, self.bias_ = kernel, bias

    def apply(self, params):
        return tf.matmul(params, self.kernel) + self.bias_

    def fixed_point(self):
        from pbo_tf.operators.linear import linear_fixed_point

        return linear_fixed_point(self.kernel, self.bias_)


def _chain_walk_batch(seed=0, n=12):
    rng = np.random.default_rng(seed)
    return {
        "state": tf.constant(rng.integers(0, 4, n)),
        "action": tf.constant(rng.integers(0, 2, n)),
        "reward": tf.constant(rng.normal(size=n), tf.float32),
        "next_state": tf.constant(rng.integers(0, 4, n)),
        "done": tf.constant((rng.random(n) < 0.2).astype(np.float32)),
    }


@pytest.mark.parametrize("fixed_point_term", [False, True])
def test_loss_gradient_matches_finite_differences(fixed_point_term):
    q = TableQ(4, 2)
    rng = np.random.default_rng(3)
    omega = tf.constant(rng.normal(size=(5, 8)), tf.float32)
    target = _FunctionalLinear(tf.constant(0.3 * rng.normal(size=(8, 8)), tf.float32), tf.zeros([8]))
    chain = target_chain(target, omega, 3)
    batch = _chain_walk_batch()
    bias = tf.constant(rng.normal(size=8), tf.float32)

    def loss_of_kernel(kernel):
        loss, _ = pbo_loss(
            _FunctionalLinear(kernel, bias), q, omega, batch, chain, 0.9, fixed_point_term=fixed_point_term
        )
        return loss

    kernel0 = tf.constant(0.2 * rng.normal(size=(8, 8)), tf.float32)
    theoretical, numerical = tf.test.compute_gradient(loss_of_kernel, [kernel0], delta=1e-3)
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=2e-2, atol=2e-3)


def test_stop_gradient_between_differentiates_only_the_last_application():
    q = TableQ(4, 2)
    rng = np.random.default_rng(4)
    omega = tf.constant(rng.normal(size=(3, 8)), tf.float32)
    batch = _chain_walk_batch(1)
    pbo = LinearPBO(8, init_std=0.1)
    pbo.ensure_built()
    chain = target_chain(pbo, omega, 2)
    variables = pbo.trainable_variables
    with tf.GradientTape() as tape:
        loss, _ = pbo_loss(pbo, q, omega, batch, chain, 0.9, stop_gradient_between=True)
    grads = tape.gradient(loss, variables)
    # Ground truth: the same two terms with the input of the second application given as a constant.
    omega1 = tf.constant(pbo(omega).numpy())
    with tf.GradientTape() as tape:
        t1 = q.bellman_targets(chain[0], batch["reward"], batch["next_state"], batch["done"], 0.9)
        t2 = q.bellman_targets(chain[1], batch["reward"], batch["next_state"], batch["done"], 0.9)
        r1 = tf.reduce_mean(tf.square(t1 - q.q_sa(pbo(omega), batch["state"], batch["action"])))
        r2 = tf.reduce_mean(tf.square(t2 - q.q_sa(pbo(omega1), batch["state"], batch["action"])))
        manual = (r1 + r2) / 2
    expected = tape.gradient(manual, variables)
    np.testing.assert_allclose(loss.numpy(), manual.numpy(), rtol=1e-6)
    for g, e in zip(grads, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-7)
    # Full backpropagation through the composition gives a different gradient.
    with tf.GradientTape() as tape:
        full, _ = pbo_loss(pbo, q, omega, batch, chain, 0.9)
    assert not np.allclose(tape.gradient(full, variables)[0].numpy(), grads[0].numpy())


def test_loss_errors_name_the_problem():
    q = TableQ(2, 1)
    omega = tf.zeros([1, 2])
    deep = DeepPBO(2, hidden_units=[4])
    chain = target_chain(deep, omega, 1)
    with pytest.raises(ValueError, match="no closed-form fixed point.*FixedPointTerm.iterations"):
        pbo_loss(deep, q, omega, BATCH, chain, 0.5, fixed_point_term=True)
    with pytest.raises(ValueError, match="normalisation"):
        pbo_loss(deep, q, omega, BATCH, chain, 0.5, normalisation="sum")
    with pytest.raises(ValueError, match="d=3.*d=2"):
        pbo_loss(LinearPBO(3), q, omega, BATCH, chain, 0.5)
    with pytest.raises(ValueError, match="K"):
        target_chain(deep, omega, 0)
    with pytest.raises(ValueError, match=r"predicted must be the chain \[K=1, n_w, d=2\]"):
        pbo_loss(deep, q, omega, BATCH, chain, 0.5, predicted=tf.zeros([2, 1, 2]))
    # A given prediction chain is the one the loss uses: the table (0.25, -0.5) predicts Q(s, 0) = table[s].
    table = tf.constant([[[0.25, -0.5]]])
    targets = chain_targets(q, chain, BATCH, 0.5).numpy()[0, 0]
    np.testing.assert_allclose(
        pbo_loss(deep, q, omega, BATCH, chain, 0.5, predicted=table)[0].numpy(),
        np.mean((targets - np.array([0.25, -0.5])) ** 2),
        rtol=1e-6,
    )
    own = prediction_chain(deep, omega, 1)
    np.testing.assert_allclose(
        pbo_loss(deep, q, omega, BATCH, chain, 0.5, predicted=own)[0].numpy(),
        pbo_loss(deep, q, omega, BATCH, chain, 0.5)[0].numpy(),
    )
