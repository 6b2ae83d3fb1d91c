"""`PerActionMLPQ`, the MLP with one output per action: hand-worked values, its layout against the tf_keras
model, the paired and single-action paths, the input scaling and its use as a DQN network."""

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec

from pbo_tf.agents.networks import FlatQNetwork
from pbo_tf.q import PerActionMLPQ
from pbo_tf.q.base import first_argmax

# state_dim 2, hidden [2], 3 actions: kernel0 [[1, 0], [0, -1]], bias0 [0, 0.5],
# kernel1 [[1, 2, 3], [4, 5, 6]], bias1 [0.1, 0.2, 0.3] (the flat layout: kernel0 row-major, bias0, kernel1
# row-major, bias1).
HAND = np.array([1, 0, 0, -1, 0, 0.5, 1, 2, 3, 4, 5, 6, 0.1, 0.2, 0.3], np.float32)
# s = (1, 2): first layer [1, -2 + 0.5] -> ReLU [1, 0] -> [1.1, 2.2, 3.3]
# s = (-1, -1): [-1, 1 + 0.5] -> [0, 1.5] -> [1.5 · 4 + 0.1, 1.5 · 5 + 0.2, 1.5 · 6 + 0.3] = [6.1, 7.7, 9.3]
STATES = np.array([[1.0, 2.0], [-1.0, -1.0]], np.float32)
WANT = np.array([[1.1, 2.2, 3.3], [6.1, 7.7, 9.3]], np.float32)


def test_hand_worked_values_of_every_path():
    q = PerActionMLPQ(2, [2], 3)
    assert q.d == 15 and q.n_actions == 3 and q.layer_shapes == [(2, 2), (2, 3)]
    params = np.stack([HAND, 2 * HAND])  # doubling every weight: first layer ×2, output 4·h + 2·bias
    second = np.array([[4.2, 8.4, 12.6], [24.2, 30.4, 36.6]], np.float32)
    np.testing.assert_allclose(q.q_all(params, STATES).numpy(), [WANT, second], rtol=1e-6)
    np.testing.assert_allclose(q.q_sa(params, STATES, [2, 0]).numpy(), [[3.3, 6.1], [12.6, 24.2]], rtol=1e-6)
    np.testing.assert_allclose(q.max_q(params, STATES).numpy(), [[3.3, 9.3], [12.6, 36.6]], rtol=1e-6)
    paired = q.q_all_paired(params, np.stack([STATES, STATES[::-1]])).numpy()
    np.testing.assert_allclose(paired, [WANT, second[::-1]], rtol=1e-6)
    np.testing.assert_array_equal(q.greedy_actions_paired(params[:1], STATES[None]).numpy(), [[2, 2]])


def test_input_scaling_feeds_the_network_the_shifted_and_scaled_state():
    # shift (1, 0), scale (2, -1): the raw states (1.5, -2) and (0.5, 1) are the hand-worked (1, 2), (-1, -1)
    q = PerActionMLPQ(2, [2], 3, state_shift=[1.0, 0.0], state_scale=[2.0, -1.0])
    raw = np.array([[1.5, -2.0], [0.5, 1.0]], np.float32)
    np.testing.assert_allclose(q.q_all(HAND[None], raw).numpy()[0], WANT, rtol=1e-6)


@pytest.mark.parametrize("hidden", [[8], [16, 8]])
def test_layout_and_initialisation_are_the_keras_models(hidden):
    q = PerActionMLPQ(4, hidden, 2)
    model = q.keras_model(seed=3)
    omega = q.flatten(model.get_weights())
    assert omega.shape == (q.d,)
    np.testing.assert_array_equal(q.initial_params(1, 3)[0], q._initial_vector(3 * 100_003))
    np.testing.assert_array_equal(q._initial_vector(3), omega)  # the same initializer calls
    states = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_array_equal(q.q_all(omega[None], states).numpy()[0], 0.0)  # zero last layer
    rng = np.random.default_rng(1)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    model.set_weights(weights)
    np.testing.assert_allclose(
        q.q_all(q.flatten(weights)[None], states).numpy()[0], model(states).numpy(), rtol=1e-5, atol=1e-5
    )
    # ten fresh vectors differ in their hidden features, all with Q ≡ 0
    w = q.initial_params(10, 0)
    assert len({row.tobytes() for row in w}) == 10 and not np.any(w[:, -(hidden[-1] * 2 + 2) :])


def test_gradient_of_q_sa_reaches_only_the_chosen_actions_output():
    q = PerActionMLPQ(2, [2], 3)
    params = tf.constant(HAND[None])
    with tf.GradientTape() as tape:
        tape.watch(params)
        value = tf.reduce_sum(q.q_sa(params, STATES, [2, 2]))
    grad = tape.gradient(value, params).numpy()[0]
    kernel1 = grad[6:12].reshape(2, 3)
    # d/d kernel1[:, 2] = the hidden activations summed over the two states, (1, 0) + (0, 1.5)
    np.testing.assert_allclose(kernel1, [[0, 0, 1.0], [0, 0, 1.5]], rtol=1e-6)
    np.testing.assert_allclose(grad[12:], [0, 0, 2.0])  # bias1: one per state, action 2 only


def test_a_flat_q_network_over_it_outputs_one_value_per_action():
    q = PerActionMLPQ(2, [2], 3)
    spec = tensor_spec.TensorSpec([2], tf.float32)
    net = FlatQNetwork(spec, q, initial_params=HAND)
    out, _ = net(tf.constant(STATES))
    assert out.shape == (2, 3)
    np.testing.assert_allclose(out.numpy(), WANT, rtol=1e-6)
    np.testing.assert_array_equal(first_argmax(out).numpy(), [2, 2])
    assert PerActionMLPQ.from_config(q.get_config()).d == q.d


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="n_actions must be >= 1, got 0"):
        PerActionMLPQ(2, [4], 0)
    with pytest.raises(ValueError, match="hidden must be a non-empty list"):
        PerActionMLPQ(2, [], 2)
    with pytest.raises(ValueError, match=r"negative_slope must be in \[0, 1\) \(0: ReLU\), got 1.5"):
        PerActionMLPQ(2, [4], 2, negative_slope=1.5)


def test_leaky_hidden_units_by_hand_and_against_the_keras_model():
    # negative_slope 0.5 on HAND: s = (1, 2): first layer [1, -1.5] -> [1, -0.75] ->
    # [1 - 3 + 0.1, 2 - 3.75 + 0.2, 3 - 4.5 + 0.3]; s = (-1, -1): [-1, 1.5] -> [-0.5, 1.5] ->
    # [-0.5 + 6 + 0.1, -1 + 7.5 + 0.2, -1.5 + 9 + 0.3]
    q = PerActionMLPQ(2, [2], 3, negative_slope=0.5)
    want = np.array([[-1.9, -1.55, -1.2], [5.6, 6.7, 7.8]], np.float32)
    np.testing.assert_allclose(q.q_all(HAND[None], STATES).numpy()[0], want, rtol=1e-6)
    np.testing.assert_allclose(q.q_sa(HAND[None], STATES, [1, 2]).numpy()[0], [-1.55, 7.8], rtol=1e-6)
    assert PerActionMLPQ.from_config(q.get_config()).negative_slope == 0.5
    model = q.keras_model(seed=0)
    model.set_weights([HAND[:4].reshape(2, 2), HAND[4:6], HAND[6:12].reshape(2, 3), HAND[12:]])
    np.testing.assert_allclose(model(STATES).numpy(), want, rtol=1e-6)
