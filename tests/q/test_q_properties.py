"""Property tests of the Q families (hypothesis): evaluating a stack of parameter vectors equals evaluating
each one, the state batch can be split, ``q_sa`` and the paired evaluation agree with ``q_all``, and the
MLP family's flat vector round-trips through its layers."""

import numpy as np
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pbo_tf.q import LQRQ, FlatMLPQ, TableQ

FLOATS = st.floats(-3.0, 3.0, allow_nan=False, width=32)
TOL = dict(rtol=1e-5, atol=1e-5)


@st.composite
def family_params_states(draw):
    """A small Q family of each kind, ``params [n_w, d]`` and matching ``states [B, ...]``."""
    kind = draw(st.sampled_from(["table", "lqr", "mlp"]))
    n_w, batch = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    if kind == "table":
        n_states, n_actions = draw(st.integers(1, 6)), draw(st.integers(1, 3))
        q = TableQ(n_states, n_actions)
        states = draw(hnp.arrays(np.int32, (batch,), elements=st.integers(0, n_states - 1)))
    elif kind == "lqr":
        actions = draw(hnp.arrays(np.float32, (draw(st.integers(1, 5)),), elements=FLOATS))
        q = LQRQ(draw(st.floats(-2.0, -0.1)), actions)
        states = draw(hnp.arrays(np.float32, (batch, 1), elements=FLOATS))
    else:
        state_dim = draw(st.integers(1, 3))
        hidden = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
        actions = draw(hnp.arrays(np.float32, (draw(st.integers(1, 3)),), elements=FLOATS))
        q = FlatMLPQ(state_dim, hidden, actions)
        states = draw(hnp.arrays(np.float32, (batch, state_dim), elements=FLOATS))
    params = draw(hnp.arrays(np.float32, (n_w, q.d), elements=FLOATS))
    return q, params, states


@given(family_params_states())
def test_evaluating_a_stack_of_parameters_equals_evaluating_each(case):
    q, params, states = case
    stacked = q.q_all(params, states).numpy()
    assert stacked.shape == (len(params), len(states), q.n_actions)
    for i in range(len(params)):
        np.testing.assert_allclose(stacked[i], q.q_all(params[i : i + 1], states).numpy()[0], **TOL)
    half = len(states) // 2  # ... and splitting the batch of states changes nothing
    if half:
        parts = [q.q_all(params, states[:half]).numpy(), q.q_all(params, states[half:]).numpy()]
        np.testing.assert_allclose(np.concatenate(parts, axis=1), stacked, **TOL)


@given(family_params_states(), st.data())
def test_q_sa_and_the_paired_evaluation_agree_with_q_all(case, data):
    q, params, states = case
    all_q = q.q_all(params, states).numpy()
    actions = data.draw(hnp.arrays(np.int32, (len(states),), elements=st.integers(0, q.n_actions - 1)))
    picked = np.take_along_axis(all_q, np.broadcast_to(actions[None, :, None], all_q.shape[:2] + (1,)), -1)
    np.testing.assert_allclose(q.q_sa(params, states, actions).numpy(), picked[..., 0], **TOL)
    paired_states = np.broadcast_to(states[None], (len(params),) + states.shape)
    np.testing.assert_allclose(q.q_all_paired(params, paired_states).numpy(), all_q, **TOL)
    greedy = q.greedy_actions(params, states).numpy()
    np.testing.assert_array_equal(np.take_along_axis(all_q, greedy[..., None], -1)[..., 0], all_q.max(-1))


@given(
    st.integers(1, 3),
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
    st.integers(1, 3),
    st.integers(0, 2**16),
)
def test_the_mlp_flat_vector_round_trips_through_its_layers(state_dim, hidden, n_actions, seed):
    q = FlatMLPQ(state_dim, hidden, np.linspace(-1.0, 1.0, n_actions))
    params = np.random.default_rng(seed).normal(size=(1, q.d)).astype(np.float32)
    layers = q.unflatten(tf.constant(params))
    assert [tuple(k.shape[1:]) for k, _ in layers] == q.layer_shapes
    weights = [w for kernel, bias in layers for w in (kernel.numpy()[0], bias.numpy()[0])]
    np.testing.assert_array_equal(q.flatten(weights), params[0])
    # The tf_keras model of a flat vector computes the family's Q values (random weights: its own
    # initialisation has a zero last layer, Q ≡ 0 whatever the hidden layers).
    model = q.keras_model(seed)
    rng = np.random.default_rng(seed + 2)
    model.set_weights([rng.normal(size=w.shape).astype(np.float32) for w in model.get_weights()])
    flat = q.flatten(model.get_weights())
    states = np.random.default_rng(seed + 1).normal(size=(4, state_dim)).astype(np.float32)
    inputs = np.concatenate(
        [np.repeat(states, n_actions, 0), np.tile(q.action_values, (len(states), 1))], axis=1
    )
    keras_q = model(inputs).numpy().reshape(len(states), n_actions)
    np.testing.assert_allclose(q.q_all(flat[None], states).numpy()[0], keras_q, rtol=1e-4, atol=1e-5)
