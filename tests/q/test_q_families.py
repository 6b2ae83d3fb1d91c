"""Q families against plain NumPy evaluations."""

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.q import LQRQ, FlatMLPQ, ShapeMismatchError, TableQ, first_argmax


def test_table_q_matches_numpy_indexing():
    q = TableQ(n_states=5, n_actions=3)
    assert q.d == 15
    rng = np.random.default_rng(0)
    params = rng.normal(size=(4, 15)).astype(np.float32)
    states = np.array([0, 4, 2, 2], np.int32)
    actions = np.array([1, 0, 2, 1], np.int32)
    table = params.reshape(4, 5, 3)
    np.testing.assert_allclose(q.q_all(params, states).numpy(), table[:, states, :])
    np.testing.assert_allclose(q.q_sa(params, states, actions).numpy(), table[:, states, actions])
    np.testing.assert_allclose(q.max_q(params, states).numpy(), table[:, states, :].max(-1))


def test_bellman_targets_use_max_and_done():
    q = TableQ(n_states=2, n_actions=2)
    params = np.array([[1.0, 3.0, -2.0, 5.0]], np.float32)  # Q(0)=(1,3), Q(1)=(-2,5)
    targets = q.bellman_targets(params, [1.0, 2.0], np.array([0, 1]), [0.0, 1.0], gamma=0.5).numpy()
    np.testing.assert_allclose(targets, [[1.0 + 0.5 * 3.0, 2.0]])


def test_first_argmax_picks_first_on_ties():
    values = tf.constant([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [0.0, -1.0, 5.0]])
    np.testing.assert_array_equal(first_argmax(values).numpy(), [1, 0, 2])


def test_lqr_q_formula_and_discrete_max():
    actions = np.linspace(-8, 8, 200)
    q = LQRQ(M=-1.2, action_values=actions)
    params = np.array([[-0.5, 0.3], [0.2, -1.0]], np.float32)
    s = np.array([[1.5], [-2.0], [0.0]], np.float32)
    a = np.array([0.5, -3.0, 2.0], np.float32)
    g, i = params[:, :1], params[:, 1:]
    expected = g * s[:, 0] ** 2 + 2 * i * s[:, 0] * a + -1.2 * a**2
    np.testing.assert_allclose(q.q_sa(params, s, a).numpy(), expected, rtol=1e-5)
    grid = (
        g[:, :, None] * s[None, :, 0, None] ** 2
        + 2 * i[:, :, None] * s[None, :, 0, None] * actions
        - 1.2 * actions**2
    )
    np.testing.assert_allclose(q.max_q(params, s).numpy(), grid.max(-1), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="M < 0"):
        LQRQ(M=0.5)


def _numpy_mlp(weights, x, slope=0.0):
    """The MLP on ``x`` with hidden units ``max(h, slope·h)`` (ReLU at slope 0), written out in numpy."""
    h = x
    for j in range(0, len(weights), 2):
        h = h @ weights[j] + weights[j + 1]
        if j < len(weights) - 2:
            h = np.maximum(h, slope * h)
    return h[..., 0]


@pytest.mark.parametrize(
    "state_dim,hidden,actions,d,slope",
    [
        (2, [30], [-1.0, 1.0], 151, 0.0),
        (8, [30, 30], [0, 1, 2, 3], 1261, 0.0),
        (8, [30, 30], [0, 1, 2, 3], 1261, 0.1),
    ],
)
def test_mlp_q_matches_numpy_forward_and_sizes(state_dim, hidden, actions, d, slope):
    q = FlatMLPQ(state_dim, hidden, actions, negative_slope=slope)
    assert q.d == d
    rng = np.random.default_rng(1)
    model = q.keras_model(seed=3)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    model.set_weights(weights)
    params = np.stack([q.flatten(weights), q.flatten([w * 0.5 for w in weights])])
    states = rng.normal(size=(6, state_dim)).astype(np.float32)
    acts = rng.integers(0, len(actions), size=6).astype(np.int32)
    enc = np.asarray(actions, np.float32)[:, None]
    x_all = np.concatenate(
        [np.repeat(states[:, None], len(actions), 1), np.broadcast_to(enc, (6, len(actions), 1))], -1
    )
    for n, scale in enumerate([1.0, 0.5]):
        w = [v * scale for v in weights]
        np.testing.assert_allclose(
            q.q_all(params, states).numpy()[n], _numpy_mlp(w, x_all, slope), rtol=2e-4, atol=2e-4
        )
        x_sa = np.concatenate([states, enc[acts]], -1)
        np.testing.assert_allclose(
            q.q_sa(params, states, acts).numpy()[n], _numpy_mlp(w, x_sa, slope), rtol=2e-4, atol=2e-4
        )
    if slope:  # the leaky units matter here: the ReLU network differs
        assert not np.allclose(_numpy_mlp(weights, x_all, slope), _numpy_mlp(weights, x_all), atol=1e-2)
    # The tf_keras model agrees with the flat evaluation.
    keras_out = model(np.concatenate([states, enc[acts]], -1)).numpy()[:, 0]
    np.testing.assert_allclose(q.q_sa(params[:1], states, acts).numpy()[0], keras_out, rtol=2e-4, atol=2e-4)


def test_mlp_q_single_parameter_vector_on_a_large_batch():
    # TF 2.21's einsum segfaulted on [1, 500, 2, 30] × [1, 30, 1] (FQI's shapes on car-on-hill).
    q = FlatMLPQ(2, [30], [-1.0, 1.0])
    rng = np.random.default_rng(2)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in q.keras_model(seed=0).get_weights()]
    states = rng.normal(size=(500, 2)).astype(np.float32)
    x_all = np.concatenate(
        [np.repeat(states[:, None], 2, 1), np.broadcast_to([[[-1.0], [1.0]]], (500, 2, 1))], -1
    )
    got = q.q_all(q.flatten(weights)[None], states).numpy()
    assert got.shape == (1, 500, 2)
    np.testing.assert_allclose(got[0], _numpy_mlp(weights, x_all), rtol=2e-4, atol=2e-4)


def _q_sa_autodiff(q, params, states, actions):
    """Test oracle of `FlatMLPQ.q_sa`: ``Q(s, a)`` read off `q_all` (the batched-matmul layout, all actions)
    and differentiated by TensorFlow itself, not by the hand-written backward pass."""
    q_all = q.q_all(params, states)  # [n, B, |A|]
    return tf.reduce_sum(q_all * tf.one_hot(actions, q.n_actions)[None], axis=-1)


@pytest.mark.parametrize(
    "state_dim,hidden,actions,n,slope",
    [
        (2, [30], [-1.0, 1.0], 7, 0.0),
        (2, [30], [-1.0, 1.0], 1, 0.0),
        (3, [5, 4, 6], [[0.0, 1.0], [1.0, 0.0]], 3, 0.0),
        (3, [5, 4, 6], [[0.0, 1.0], [1.0, 0.0]], 3, 0.2),
    ],
)
@pytest.mark.parametrize("jit", [False, True])
def test_mlp_q_sa_hand_written_gradient_matches_autodiff(state_dim, hidden, actions, n, slope, jit):
    """`q_sa`'s custom backward pass against TensorFlow's gradient of the plain batched form
    (`_q_sa_autodiff`), and against central finite differences (float64 numpy forward), with ReLU and
    with leaky hidden units."""
    q = FlatMLPQ(state_dim, hidden, actions, negative_slope=slope)
    rng = np.random.default_rng(4)
    params = tf.constant(rng.normal(0, 0.5, (n, q.d)).astype(np.float32))
    states = tf.constant(rng.normal(size=(40, state_dim)).astype(np.float32))
    acts = tf.constant(rng.integers(0, len(actions), 40).astype(np.int32))
    weights_out = tf.constant(rng.normal(size=(n, 40)).astype(np.float32))  # a generic scalar loss

    def value_and_grad(fn):
        @tf.function(jit_compile=jit)
        def run(p):
            with tf.GradientTape() as tape:
                tape.watch(p)
                out = fn(p, states, acts)
                loss = tf.reduce_sum(weights_out * out + 0.1 * out**2)
            return out, tape.gradient(loss, p)

        return [x.numpy() for x in run(params)]

    out, grad = value_and_grad(q.q_sa)
    ref_out, ref_grad = value_and_grad(lambda p, s, a: _q_sa_autodiff(q, p, s, a))
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=1e-5)
    assert np.abs(grad).max() > 1e-2  # the check is not vacuous

    # Finite differences of the float64 numpy forward on a few coordinates of every layer.
    p64 = params.numpy().astype(np.float64)
    enc = np.asarray(actions, np.float64).reshape(len(actions), -1)[acts.numpy()]
    x = np.concatenate([states.numpy().astype(np.float64), enc], -1)

    shapes = [shape for n_in, n_out in q.layer_shapes for shape in ((n_in, n_out), (n_out,))]

    def loss64(p):
        total = 0.0
        for i in range(n):
            pieces = np.split(p[i], np.cumsum(q._split_sizes)[:-1])
            o = _numpy_mlp([w.reshape(shape) for w, shape in zip(pieces, shapes, strict=True)], x, slope)
            total += np.sum(weights_out.numpy()[i] * o + 0.1 * o**2)
        return total

    eps = 1e-5
    for i in range(n):
        for c in rng.choice(q.d, 12, replace=False):
            plus, minus = p64.copy(), p64.copy()
            plus[i, c] += eps
            minus[i, c] -= eps
            fd = (loss64(plus) - loss64(minus)) / (2 * eps)
            np.testing.assert_allclose(grad[i, c], fd, rtol=2e-3, atol=2e-3)


def test_mlp_initial_params_zero_output_distinct_features():
    q = FlatMLPQ(2, [30], [-1.0, 1.0])
    w = q.initial_params(4, seed=7)
    assert w.shape == (4, 151)
    states = np.random.default_rng(0).normal(size=(10, 2)).astype(np.float32)
    np.testing.assert_array_equal(q.q_all(w, states).numpy(), 0.0)  # zero last layer: Q = 0
    assert not np.allclose(w[0], w[1])  # different hidden features
    np.testing.assert_array_equal(q.initial_params(4, seed=7), w)  # seeded
    np.testing.assert_array_equal(q.initial_params(1, seed=7)[0], w[0])  # W[0] = the seed's network


@pytest.mark.parametrize("hidden", [[30], [30, 30]])
def test_mlp_initial_params_are_the_keras_models_weights(hidden):
    # initial_params skips building the Keras models; it must give exactly their initial weights.
    q = FlatMLPQ(3, hidden, [0.0, 1.0, 2.0])
    keras = [q.flatten(q.keras_model(seed=5 * 100_003 + i).get_weights()) for i in range(3)]
    np.testing.assert_array_equal(q.initial_params(3, seed=5), np.stack(keras))


def test_shape_mismatch_names_shapes():
    q = TableQ(n_states=20, n_actions=2)
    with pytest.raises(ShapeMismatchError, match=r"\[n_w, 40\].*\[3, 7\]"):
        q.q_all(np.zeros((3, 7), np.float32), np.array([0]))


def test_paired_evaluation_gives_each_parameter_vector_its_own_states():
    rng = np.random.default_rng(4)
    for q in (FlatMLPQ(2, [5], [-1.0, 1.0]), TableQ(4, 2)):
        params = rng.normal(size=(3, q.d)).astype(np.float32)
        if isinstance(q, TableQ):
            states = rng.integers(0, 4, size=(3, 6)).astype(np.int32)
        else:
            states = rng.normal(size=(3, 6, 2)).astype(np.float32)
        got = q.q_all_paired(params, states).numpy()
        for i in range(3):
            np.testing.assert_allclose(got[i], q.q_all(params[i : i + 1], states[i]).numpy()[0], rtol=1e-5)
        np.testing.assert_array_equal(q.greedy_actions_paired(params, states).numpy(), got.argmax(-1))
