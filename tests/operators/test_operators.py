"""PBO layers: closed forms, fixed points and their gradients, oracles against the exact operators."""

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.envs import chain_walk, lqr
from pbo_tf.operators import LQRPBO, DeepPBO, LinearPBO, TabularPBO, oracle_lqr_pbo, oracle_tabular_pbo
from pbo_tf.operators.base import composed_chain
from pbo_tf.operators.linear import linear_fixed_point
from pbo_tf.q import ShapeMismatchError


def _set_linear(pbo, W, b):
    pbo.ensure_built()
    pbo.dense.kernel.assign(np.asarray(W, np.float32).T)
    pbo.dense.bias.assign(np.asarray(b, np.float32))


def test_linear_pbo_closed_form_and_fixed_point():
    rng = np.random.default_rng(0)
    d = 6
    W = 0.3 * rng.normal(size=(d, d)) / np.sqrt(d)
    b = rng.normal(size=d)
    pbo = LinearPBO(d)
    _set_linear(pbo, W, b)
    omega = rng.normal(size=(3, d)).astype(np.float32)
    np.testing.assert_allclose(pbo(omega).numpy(), omega @ W.T + b, rtol=1e-5, atol=1e-5)
    star = pbo.fixed_point().numpy()
    np.testing.assert_allclose(star, np.linalg.solve(np.eye(d) - W, b), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pbo(star[None]).numpy()[0], star, rtol=1e-4, atol=1e-5)  # ω* = Λ(ω*)
    # Iterates of a contraction converge to the fixed point.
    far = pbo.iterate(omega, 200).numpy()
    assert far.shape == (201, 3, d)
    np.testing.assert_allclose(far[-1], np.broadcast_to(star, (3, d)), atol=1e-4)


def test_linear_fixed_point_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    kernel = tf.constant(0.2 * rng.normal(size=(4, 4)), tf.float64)
    bias = tf.constant(rng.normal(size=4), tf.float64)
    theoretical, numerical = tf.test.compute_gradient(linear_fixed_point, [kernel, bias], delta=1e-6)
    for t, n in zip(theoretical, numerical, strict=True):
        np.testing.assert_allclose(t, n, rtol=1e-6, atol=1e-8)


def test_deep_pbo_widths_and_tiny_init():
    pbo = DeepPBO(151, hidden_multiples=[2, 2, 2, 2], init_std=5e-7)
    out = pbo(tf.random.normal([5, 151]))
    assert out.shape == (5, 151)
    assert [layer.units for layer in pbo.hidden_layers] == [302] * 4
    assert float(tf.reduce_max(tf.abs(out))) < 1e-6  # Λ(ω) ≈ 0 at the start
    kernels = [layer.kernel.numpy() for layer in pbo.hidden_layers[1:]]
    assert not np.allclose(kernels[0], kernels[1])  # independent draws per layer
    assert DeepPBO(2, hidden_units=[8]).hidden_units == [8]
    with pytest.raises(ValueError, match="exactly one"):
        DeepPBO(2, hidden_units=[8], hidden_multiples=[2])


def test_pbo_rejects_wrong_parameter_size():
    with pytest.raises(ShapeMismatchError, match=r"\[n_w, 40\].*\[2, 151\]"):
        LinearPBO(40)(tf.zeros([2, 151]))


def test_oracle_tabular_is_the_exact_bellman_operator():
    P, R = chain_walk.transition_model()
    pbo = oracle_tabular_pbo(R, P, 2, 0.9)
    assert not pbo.trainable_variables
    rng = np.random.default_rng(2)
    q = rng.normal(size=(3, 40))
    expected = R[None] + 0.9 * (q.reshape(3, 20, 2).max(-1) @ P.T)
    np.testing.assert_allclose(pbo(q.astype(np.float32)).numpy(), expected, rtol=1e-5, atol=1e-5)
    # Value iteration through the operator reaches Q*.
    q_star = chain_walk.optimal_q()
    final = pbo.iterate(np.zeros((1, 40), np.float32), 300).numpy()[-1, 0]
    np.testing.assert_allclose(final, q_star.reshape(-1), atol=1e-4)


def _chain_walk_bellman(q, n=20, success=0.9, gamma=0.9):
    """The exact optimal Bellman operator of the chain-walk, written from its definition with loops: the
    move (left, right) succeeds with probability ``success``, else the walker stays; the ends self-loop and
    pay 1 for both actions. ``q`` ``[n_w, 2n]`` row-major tables."""
    out = np.zeros_like(q, dtype=np.float64)
    for i, table in enumerate(q.reshape(len(q), n, 2)):
        v = table.max(axis=1)
        for s in range(n):
            for a, step in enumerate((-1, 1)):
                if s in (0, n - 1):
                    out[i, 2 * s + a] = 1.0 + gamma * v[s]
                else:
                    out[i, 2 * s + a] = gamma * (success * v[s + step] + (1 - success) * v[s])
    return out


def test_learnable_tabular_pbo_has_r_and_p():
    pbo = TabularPBO(20, 2, 0.9, init_std=5e-6)
    pbo.ensure_built()
    shapes = {v.name.split("/")[-1].split(":")[0]: v.shape.as_list() for v in pbo.trainable_variables}
    assert shapes == {"reward": [40], "transitions": [40, 20]}
    # With R̂ and P̂ set to the chain-walk's R and P, Λ is the exact operator R + γ P max_a Q(·, a).
    P, R = chain_walk.transition_model()
    pbo.reward.assign(R.astype(np.float32))
    pbo.transitions.assign(P.astype(np.float32))
    q = np.random.default_rng(3).normal(size=(3, 40)).astype(np.float32)
    np.testing.assert_allclose(pbo(q).numpy(), _chain_walk_bellman(q), rtol=1e-5, atol=1e-5)
    # ... and after one gradient step on R̂ and P̂ they are still what Λ applies.
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(pbo(q)))
    grads = tape.gradient(loss, [pbo.reward, pbo.transitions])
    pbo.reward.assign_sub(1e-3 * grads[0])
    pbo.transitions.assign_sub(1e-3 * grads[1])
    r, p = pbo.reward.numpy().astype(np.float64), pbo.transitions.numpy().astype(np.float64)
    expected = r[None] + 0.9 * q.reshape(3, 20, 2).max(-1) @ p.T
    np.testing.assert_allclose(pbo(q).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_oracle_lqr_matches_closed_form_and_fixed_point():
    opt = lqr.optimal_params()
    pbo = oracle_lqr_pbo(lqr.A, lqr.B, lqr.Q, lqr.S, opt["M"])
    omega = np.array([[0.0, 0.0], [-1.0, 0.4]], np.float32)
    g, i = lqr.oracle_operator(omega[:, 0].astype(np.float64), omega[:, 1].astype(np.float64), opt["M"])
    np.testing.assert_allclose(pbo(omega).numpy(), np.stack([g, i], 1), rtol=1e-5)
    star = np.array([[opt["G"], opt["I"]]], np.float32)
    np.testing.assert_allclose(pbo(star).numpy(), star, rtol=1e-5, atol=1e-6)
    # The learnable version has exactly slope and bias.
    learn = LQRPBO(opt["M"])
    learn.ensure_built()
    assert sorted(v.name.split("/")[-1].split(":")[0] for v in learn.trainable_variables) == ["bias", "slope"]


def test_mixed_precision_deep_pbo_keeps_the_loss_and_gradients_within_tolerance():
    """bfloat16 compute (float32 variables) against float32 on the car-on-hill shape (d = 151, K = 9,
    deep [2,2,2,2]) with weights large enough for Λ to matter: same loss to 2%, same gradient direction."""
    from pbo_tf.losses import pbo_loss, target_chain
    from pbo_tf.q import FlatMLPQ

    q = FlatMLPQ(2, [30], [-1.0, 1.0])
    rng = np.random.default_rng(0)
    batch = {
        "state": tf.constant(rng.uniform(-1, 1, (200, 2)), tf.float32),
        "action": tf.constant(rng.integers(0, 2, 200), tf.int32),
        "reward": tf.constant(rng.choice([-1.0, 0.0, 1.0], 200), tf.float32),
        "next_state": tf.constant(rng.uniform(-1, 1, (200, 2)), tf.float32),
        "done": tf.constant(rng.integers(0, 2, 200), tf.float32),
    }
    params = tf.constant(q.initial_params(6, 0))
    full = DeepPBO(q.d, hidden_multiples=[2, 2, 2, 2], init_std=0.05)
    mixed = DeepPBO(q.d, hidden_multiples=[2, 2, 2, 2], init_std=0.05, compute_dtype="bfloat16")
    full(params), mixed(params)
    mixed.set_weights(full.get_weights())
    assert all(w.dtype == tf.float32 for w in mixed.weights)  # variables stay float32
    assert mixed(params).dtype == tf.float32
    chain = target_chain(full, params, 9)

    def loss_and_grads(pbo):
        with tf.GradientTape() as tape:
            loss, _ = pbo_loss(pbo, q, params, batch, chain, 0.95)
        grads = tape.gradient(loss, pbo.trainable_weights)
        return float(loss), tf.concat([tf.reshape(g, [-1]) for g in grads], 0)

    loss32, grad32 = loss_and_grads(full)
    loss16, grad16 = loss_and_grads(mixed)
    assert loss32 > 1e-3  # a loss that is not trivially zero
    assert abs(loss16 - loss32) <= 0.02 * loss32, (loss16, loss32)
    cosine = float(tf.reduce_sum(grad16 * grad32) / (tf.norm(grad16) * tf.norm(grad32)))
    assert cosine > 0.99, cosine
    with pytest.raises(ValueError, match="compute_dtype"):
        DeepPBO(q.d, hidden_units=[4], compute_dtype="float16")


@pytest.mark.parametrize(
    "make", [lambda: DeepPBO(5, hidden_units=[7, 3], init_std=0.3), lambda: LinearPBO(5, init_std=0.3)]
)
def test_apply_stacked_is_each_seeds_own_operator_with_its_own_gradients(make):
    """S operators applied at once (batched matmuls over seeds for the deep PBO) give each seed its own
    operator's output and each operator the gradient it gets alone."""
    from pbo_tf.operators import apply_stacked

    tf.keras.utils.set_random_seed(4)
    pbos = [make() for _ in range(3)]
    for pbo in pbos:
        pbo.ensure_built()
        for v in pbo.trainable_variables:  # non-zero biases, so they are checked too
            v.assign(v + tf.random.normal(v.shape, stddev=0.3))
    params = tf.constant(np.random.default_rng(0).normal(size=(3, 4, 5)), tf.float32)
    weights = tf.constant(np.random.default_rng(1).normal(size=(3, 4, 5)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        stacked = apply_stacked(pbos, params)
        stacked_loss = tf.reduce_sum(weights * stacked**2)
        alone = [tf.reduce_sum(weights[i] * pbo(params[i]) ** 2) for i, pbo in enumerate(pbos)]
    for i, pbo in enumerate(pbos):
        np.testing.assert_allclose(stacked[i].numpy(), pbo(params[i]).numpy(), rtol=1e-5, atol=1e-6)
        got = tape.gradient(stacked_loss, pbo.trainable_variables)
        want = tape.gradient(alone[i], pbo.trainable_variables)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match=r"params must be \[S=3, n_w, d=5\]"):
        apply_stacked(pbos, params[:2])
    with pytest.raises(ValueError, match="operators of one class"):
        apply_stacked([DeepPBO(5, hidden_units=[2]), LinearPBO(5)], params[:2])
    if isinstance(pbos[0], DeepPBO):
        with pytest.raises(ValueError, match="deep PBOs of one shape"):
            apply_stacked([pbos[0], DeepPBO(5, hidden_units=[2])], params[:2])


def test_deep_pbo_active_units_finds_the_dead_layer_that_makes_it_a_constant_map():
    pbo = DeepPBO(3, hidden_units=[4, 4])
    pbo.ensure_built()
    x = tf.constant(np.random.default_rng(0).normal(size=(10, 3)), tf.float32)
    first, second = pbo.hidden_layers
    first.kernel.assign(np.eye(3, 4, dtype=np.float32))  # units 1-3 copy the inputs (+1), unit 4 is 1
    first.bias.assign(np.ones(4, np.float32))
    second.kernel.assign(np.full((4, 4), 1e-3, np.float32))
    second.bias.assign(np.full(4, -10.0, np.float32))  # pre-activations <= -10 + 1e-2: all dead
    pbo.output_layer.bias.assign(np.arange(3, dtype=np.float32))
    assert pbo.active_units(x) == [4, 0]
    out = pbo(x).numpy()
    np.testing.assert_array_equal(out, np.tile(np.arange(3, dtype=np.float32), (10, 1)))  # Λ is constant
    second.bias.assign(np.zeros(4, np.float32))  # alive again: Λ depends on its input
    assert pbo.active_units(x) == [4, 4]
    assert np.ptp(pbo(x).numpy(), axis=0).max() > 0


def _deep_pbo(d, hidden, seed, **kwargs):
    """A deep PBO with random weights (std 0.5, non-zero biases), so the chain's ReLUs both fire and not."""
    pbo = DeepPBO(d, hidden_units=hidden, **kwargs)
    rng = np.random.default_rng(seed)
    for v in _built(pbo):
        v.assign(rng.normal(size=v.shape, scale=0.5).astype(np.float32))
    return pbo


def _autodiff_chain(pbo, params, K, stop_gradient_between=False):
    """Test oracle of `DeepPBO.chain`: the operator applied K times (`composed_chain`, the base class's
    chain) and differentiated by TensorFlow itself, not by the written-out backward pass."""
    return composed_chain(pbo, params, K, stop_gradient_between)


def _built(pbo):
    pbo.ensure_built()
    return pbo.trainable_variables


@pytest.mark.parametrize("stop_between", [False, True])
@pytest.mark.parametrize("compile_mode", ["eager", "graph", "xla"])
def test_deep_pbo_merged_chain_gradient_equals_autodiff_through_every_composition(stop_between, compile_mode):
    """`DeepPBO.chain`'s written-out backward pass (one weight-gradient product per layer over all K
    applications) gives TensorFlow's gradient of the composed layers, for the weights and for ω, with and
    without stopping the gradient between compositions, eagerly, in a graph and under XLA; a directional
    finite difference of the loss agrees too."""
    d, K = 5, 4
    merged = _deep_pbo(d, [7, 6], seed=3)
    omega = tf.constant(np.random.default_rng(0).normal(size=(3, d)), tf.float32)
    weights = tf.constant(np.random.default_rng(1).normal(size=(K, 3, d)), tf.float32)

    def loss_and_grads(chain_fn, omega):
        with tf.GradientTape() as tape:
            tape.watch(omega)
            chain = chain_fn(omega, K, stop_between)
            loss = tf.reduce_sum(weights * tf.tanh(chain))
        return chain, loss, tape.gradient(loss, [omega, *merged.trainable_variables])

    if compile_mode != "eager":
        loss_and_grads = tf.function(loss_and_grads, jit_compile=compile_mode == "xla")
    chain_m, loss_m, grads_m = loss_and_grads(merged.chain, omega)
    chain_a, loss_a, grads_a = loss_and_grads(lambda *args: _autodiff_chain(merged, *args), omega)
    np.testing.assert_allclose(chain_m.numpy(), chain_a.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(chain_m.numpy()[0], merged(omega).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        chain_m.numpy()[-1], merged.iterate(omega, K).numpy()[-1], rtol=1e-5, atol=1e-6
    )
    if stop_between:  # the gradient stops before the first application too: none reaches ω
        assert grads_m[0] is None and grads_a[0] is None
        grads_m, grads_a = grads_m[1:], grads_a[1:]
    for g_m, g_a in zip(grads_m, grads_a, strict=True):
        assert np.abs(g_a.numpy()).max() > 1e-3  # every gradient is exercised, not zero
        np.testing.assert_allclose(g_m.numpy(), g_a.numpy(), rtol=1e-4, atol=1e-5)
    # Some ReLUs are off on these inputs and some on, so the masks matter.
    first = merged.hidden_layers[0]
    pre = (omega @ first.kernel + first.bias).numpy()
    assert (pre > 0).any() and (pre < 0).any()

    if not stop_between:  # the full gradient is the derivative of the loss: a central difference checks it
        rng = np.random.default_rng(2)
        directions = [rng.normal(size=v.shape).astype(np.float32) for v in merged.trainable_variables]
        original = [v.numpy() for v in merged.trainable_variables]
        values = []
        for sign in (1.0, -1.0):
            for v, o, u in zip(merged.trainable_variables, original, directions, strict=True):
                v.assign(o + sign * 1e-3 * u)
            values.append(float(tf.reduce_sum(weights * tf.tanh(merged.chain(omega, K)))))
        for v, o in zip(merged.trainable_variables, original, strict=True):
            v.assign(o)
        numeric = (values[0] - values[1]) / 2e-3
        analytic = sum(
            float(np.sum(g.numpy() * u)) for g, u in zip(grads_m[-len(directions) :], directions, strict=True)
        )
        np.testing.assert_allclose(numeric, analytic, rtol=2e-2)


def test_deep_pbo_merged_chain_stacked_over_seeds_and_in_bfloat16():
    """`chain_stacked` of S deep PBOs gives each seed its own chain and gradient (against `_autodiff_chain`
    of each seed alone); bfloat16 mixed precision keeps the gradient within bfloat16 rounding of the
    oracle's; operators of another dtype are not stacked."""
    from pbo_tf.operators import chain_stacked

    K = 3
    pbos = [_deep_pbo(4, [6, 5], seed=s) for s in range(3)]
    params = tf.constant(np.random.default_rng(0).normal(size=(3, 2, 4)), tf.float32)
    weights = tf.constant(np.random.default_rng(1).normal(size=(K, 3, 2, 4)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        stacked = chain_stacked(pbos, params, K)
        stacked_loss = tf.reduce_sum(weights * tf.tanh(stacked))
        alone = [
            tf.reduce_sum(weights[:, s] * tf.tanh(_autodiff_chain(pbo, params[s], K)))
            for s, pbo in enumerate(pbos)
        ]
    for s, pbo in enumerate(pbos):
        np.testing.assert_allclose(
            stacked[:, s].numpy(), _autodiff_chain(pbo, params[s], K).numpy(), rtol=1e-5, atol=1e-6
        )
        got = tape.gradient(stacked_loss, pbo.trainable_variables)
        want = tape.gradient(alone[s], pbo.trainable_variables)
        for g, w in zip(got, want, strict=True):
            assert np.abs(w.numpy()).max() > 1e-3  # every gradient is exercised, not zero
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5)

    bf16 = _deep_pbo(4, [6, 5], seed=7, compute_dtype="bfloat16")
    grads = []
    for chain_fn in (bf16.chain, lambda p, k: _autodiff_chain(bf16, p, k)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(weights[:, 0] * tf.tanh(chain_fn(params[0], K)))
        grads.append(tape.gradient(loss, bf16.trainable_variables))
    for g_m, g_a in zip(*grads, strict=True):
        assert g_m.dtype == tf.float32
        np.testing.assert_allclose(g_m.numpy(), g_a.numpy(), rtol=5e-2, atol=5e-2 * np.abs(g_a.numpy()).max())
    with pytest.raises(ValueError, match="one shape and dtype"):
        chain_stacked([pbos[0], bf16], params[:2], K)
