"""DeepPBO's options against NumPy forward passes done by hand: the residual form is the identity at
initialisation, the standardisation round-trips W's statistics through a checkpoint, every activation and
initialisation is the one named, and a dead layer freezes the paper's operator but not a residual one."""

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.evaluation.operator_activity import constant_map_message, operator_activity
from pbo_tf.operators import DeepPBO
from pbo_tf.operators.base import apply_stacked, chain_stacked, composed_chain
from pbo_tf.operators.deep import STANDARDISE_MIN_STD
from pbo_tf.operators.factory import make_pbo
from pbo_tf.q import FlatMLPQ, TableQ

D, HIDDEN = 5, [7, 6]

NUMPY_ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "leaky_relu": lambda x: np.where(x > 0, x, 0.01 * x),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1.0 + np.vectorize(__import__("math").erf)(x / np.sqrt(2.0))),
}


def _randomise(pbo, rng, scale=0.5):
    pbo.ensure_built()
    for layer in [*pbo.hidden_layers, pbo.output_layer]:
        layer.kernel.assign(scale * rng.normal(size=layer.kernel.shape).astype(np.float32))
        layer.bias.assign(0.2 * rng.normal(size=layer.bias.shape).astype(np.float32))


def _numpy_forward(pbo, omega):
    """``Λ(ω)`` from the layer weights in NumPy (float64), as `DeepPBO`'s docstring defines it."""
    act = NUMPY_ACTIVATIONS[pbo.activation]
    omega = np.asarray(omega, np.float64)
    mean = pbo.input_mean.numpy() if pbo.standardise else np.zeros(pbo.d)
    scale = pbo.input_scale.numpy() if pbo.standardise else np.ones(pbo.d)
    h = (omega - mean) / scale
    for layer in pbo.hidden_layers:
        h = act(h @ layer.kernel.numpy() + layer.bias.numpy())
    f = (h @ pbo.output_layer.kernel.numpy() + pbo.output_layer.bias.numpy()) * scale
    if pbo.residual:
        return omega + f
    return mean + f if pbo.standardise else f


@pytest.mark.parametrize("activation", ["relu", "leaky_relu", "silu", "gelu"])
def test_each_activation_is_the_one_named(activation):
    rng = np.random.default_rng(0)
    pbo = DeepPBO(D, hidden_units=HIDDEN, activation=activation)
    _randomise(pbo, rng)
    omega = rng.normal(size=(4, D)).astype(np.float32)
    np.testing.assert_allclose(pbo(omega).numpy(), _numpy_forward(pbo, omega), rtol=1e-5, atol=1e-5)


def test_residual_operator_is_exactly_the_identity_at_initialisation():
    rng = np.random.default_rng(1)
    for kernel_init in ("truncated_normal", "glorot_uniform", "he_normal"):
        pbo = DeepPBO(D, hidden_units=HIDDEN, residual=True, kernel_init=kernel_init, standardise=True)
        pbo.ensure_built()
        pbo.adapt(rng.normal(size=(8, D)))
        omega = rng.normal(size=(6, D)).astype(np.float32) * 3.0
        np.testing.assert_array_equal(pbo(omega).numpy(), omega)
        np.testing.assert_array_equal(pbo.chain(omega, 4).numpy(), np.broadcast_to(omega, (4, 6, D)))
    # once trained (weights not zero) it is ω + f(ω)
    _randomise(pbo, rng)
    np.testing.assert_allclose(pbo(omega).numpy(), _numpy_forward(pbo, omega), rtol=1e-5, atol=1e-5)


def test_kernel_initialisations_have_their_scales():
    d = 200
    tiny = DeepPBO(d, hidden_units=[300], init_std=5e-7)
    glorot = DeepPBO(d, hidden_units=[300], kernel_init="glorot_uniform")
    he = DeepPBO(d, hidden_units=[300], kernel_init="he_normal")
    for pbo in (tiny, glorot, he):
        pbo.ensure_built()
    k = [p.hidden_layers[0].kernel.numpy() for p in (tiny, glorot, he)]
    assert np.max(np.abs(k[0])) <= 2 * 5e-7  # truncated at 2 std
    limit = np.sqrt(6.0 / (d + 300))  # Glorot-uniform: U(±√(6 / (fan_in + fan_out)))
    assert np.max(np.abs(k[1])) <= limit and np.std(k[1]) == pytest.approx(limit / np.sqrt(3), rel=0.05)
    assert np.std(k[2]) == pytest.approx(np.sqrt(2.0 / d), rel=0.05)  # He: std √(2 / fan_in)
    assert np.all(glorot.hidden_layers[0].bias.numpy() == 0)


def test_standardisation_is_w_statistics_and_round_trips_through_a_checkpoint(tmp_path):
    rng = np.random.default_rng(2)
    w = rng.normal(loc=3.0, scale=2.0, size=(30, D))
    w[:, -1] = 0.7  # a coordinate W does not vary: scale 1, not 0
    pbo = DeepPBO(D, hidden_units=HIDDEN, standardise=True, kernel_init="glorot_uniform")
    pbo.ensure_built()
    pbo.adapt(w)
    np.testing.assert_allclose(pbo.input_mean.numpy(), w.mean(axis=0), rtol=1e-6)
    expected_scale = w.std(axis=0)
    expected_scale[-1] = 1.0
    np.testing.assert_allclose(pbo.input_scale.numpy(), expected_scale, rtol=1e-6)
    assert STANDARDISE_MIN_STD > 0
    assert not pbo.input_mean.trainable
    assert all(v is not pbo.input_mean for v in pbo.trainable_variables)
    omega = rng.normal(size=(4, D)).astype(np.float32)
    np.testing.assert_allclose(pbo(omega).numpy(), _numpy_forward(pbo, omega), rtol=1e-5, atol=1e-5)
    path = tf.train.Checkpoint(pbo=pbo).write(str(tmp_path / "pbo"))
    other = DeepPBO(D, hidden_units=HIDDEN, standardise=True)
    other.ensure_built()
    tf.train.Checkpoint(pbo=other).read(path).assert_existing_objects_matched()
    np.testing.assert_array_equal(other.input_mean.numpy(), pbo.input_mean.numpy())
    np.testing.assert_array_equal(other.input_scale.numpy(), pbo.input_scale.numpy())
    np.testing.assert_allclose(other(omega).numpy(), pbo(omega).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="standardise=True"):
        DeepPBO(D, hidden_units=HIDDEN).adapt(w)
    with pytest.raises(ValueError, match=r"\[n_W, 5\]"):
        pbo.adapt(w[:, :3])


def test_paper_operator_keeps_its_checkpoint_keys():
    pbo = DeepPBO(D, hidden_units=HIDDEN)
    pbo.ensure_built()
    assert len(pbo.weights) == 2 * (len(HIDDEN) + 1)  # no standardisation variables unless asked for
    assert pbo.paper_form and pbo.dead_layer_is_constant


@pytest.mark.parametrize(
    "options",
    [
        dict(residual=True),
        dict(standardise=True),
        dict(activation="silu"),
        dict(activation="leaky_relu"),
        dict(activation="gelu"),
        dict(residual=True, standardise=True, activation="silu"),
        dict(standardise=True, activation="silu", stop_gradient_between=True),
        dict(residual=True, standardise=True, activation="leaky_relu", stop_gradient_between=True),
    ],
)
def test_written_out_chain_with_options_matches_tensorflows_gradient(options):
    """`DeepPBO.chain`'s hand-written backward pass against TensorFlow's gradient of the composed
    applications, for the weights and for ω, and its values against the NumPy forward pass."""
    options = dict(options)
    stop = options.pop("stop_gradient_between", False)
    rng = np.random.default_rng(3)
    pbo = DeepPBO(D, hidden_units=HIDDEN, **options)
    _randomise(pbo, rng)
    if pbo.standardise:
        pbo.adapt(rng.normal(loc=1.0, scale=3.0, size=(10, D)))
    omega = tf.constant(rng.normal(size=(3, D)).astype(np.float32))
    weights = rng.normal(size=(3, 3, D)).astype(np.float32)  # a loss that weighs every output differently
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(omega)
        fast = pbo.chain(omega, 3, stop_gradient_between=stop)
        slow = composed_chain(pbo.apply, omega, 3, stop_gradient_between=stop)
        loss_fast, loss_slow = tf.reduce_sum(weights * fast**2), tf.reduce_sum(weights * slow**2)
    np.testing.assert_allclose(fast.numpy(), slow.numpy(), rtol=1e-5, atol=1e-6)
    x = omega.numpy()
    for k in range(3):
        x = _numpy_forward(pbo, x)
        np.testing.assert_allclose(fast.numpy()[k], x, rtol=1e-4, atol=1e-5)
    g_fast = tape.gradient(loss_fast, [*pbo.trainable_variables, omega])
    g_slow = tape.gradient(loss_slow, [*pbo.trainable_variables, omega])
    for a, b in zip(g_fast, g_slow, strict=True):
        if b is None:  # no gradient into ω when it is stopped between applications
            assert a is None or not np.any(a.numpy())
            continue
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-4, atol=1e-5)
    assert any(np.abs(g.numpy()).max() > 1e-3 for g in g_fast[:-1])  # the comparison is not of zeros


def test_stacked_operators_with_options_equal_each_seed_alone():
    rng = np.random.default_rng(4)
    pbos = []
    for _ in range(3):
        pbo = DeepPBO(D, hidden_units=HIDDEN, residual=True, standardise=True, activation="silu")
        _randomise(pbo, rng)
        pbo.adapt(rng.normal(size=(10, D)))
        pbos.append(pbo)
    params = rng.normal(size=(3, 4, D)).astype(np.float32)
    stacked = apply_stacked(pbos, params).numpy()
    chains = chain_stacked(pbos, params, 2).numpy()
    for i, pbo in enumerate(pbos):
        np.testing.assert_allclose(stacked[i], pbo(params[i]).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(chains[:, i], pbo.chain(params[i], 2).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="same options"):
        apply_stacked([pbos[0], DeepPBO(D, hidden_units=HIDDEN)], params[:2])


def test_a_dead_layer_is_a_constant_map_only_for_the_papers_operator():
    rng = np.random.default_rng(5)
    omegas, fresh = rng.normal(size=(8, D)), rng.normal(size=(9, D))
    for residual, expect_constant in ((False, True), (True, False)):
        pbo = DeepPBO(D, hidden_units=HIDDEN, residual=residual)
        _randomise(pbo, rng)
        pbo.hidden_layers[1].bias.assign(np.full(HIDDEN[1], -1e3, np.float32))  # layer 2 never fires
        activity = operator_activity(pbo, omegas, fresh)
        assert activity["W"]["active_units"][1] == 0 and activity["fresh"]["active_units"][1] == 0
        assert activity["constant"] is expect_constant
        if residual:  # Λ(ω) = ω + c: the spread of Λ is the spread of its inputs, f has none
            assert activity["W"]["relative_spread"] == pytest.approx(1.0, rel=1e-5)
            assert activity["W"]["update_relative_spread"] < 1e-6 and activity["translation"] is True
            assert "a translation ω + c" in constant_map_message(activity)
        else:
            assert activity["W"]["spread"] == 0.0 and "translation" not in activity
    live = DeepPBO(D, hidden_units=HIDDEN, residual=True)
    _randomise(live, rng)
    activity = operator_activity(live, omegas, fresh)
    assert activity["translation"] is False and activity["W"]["update_relative_spread"] > 0.01
    assert constant_map_message(activity) is None


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown PBO activation 'tanhh'"):
        DeepPBO(D, hidden_units=HIDDEN, activation="tanhh")
    with pytest.raises(ValueError, match="unknown PBO kernel_init 'ortho'"):
        DeepPBO(D, hidden_units=HIDDEN, kernel_init="ortho")
    q = TableQ(3, 2)
    with pytest.raises(ValueError, match="make_pbo.residual is an option of the deep PBO"):
        make_pbo(None, q, kind="linear", residual=True)


def test_make_pbo_adapts_a_standardised_operator_to_w():
    q = FlatMLPQ(2, [4], [-1.0, 1.0])
    w = q.initial_params(6, 0)
    pbo = make_pbo(None, q, kind="deep", hidden_multiples=[1], standardise=True, w_set=w)
    np.testing.assert_allclose(pbo.input_mean.numpy(), w.mean(axis=0), rtol=1e-6, atol=1e-7)
