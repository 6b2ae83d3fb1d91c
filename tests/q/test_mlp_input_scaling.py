"""`FlatMLPQ`'s optional input scaling: every forward path and ``q_sa``'s hand-written gradient equal,
exactly, the unscaled family fed ``(s - shift) * scale`` by hand; without it nothing changes."""

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.q import FlatMLPQ

SHIFT = np.array([0.5, 0.0, -2.0], np.float32)
SCALE = np.array([2.0, 1.0, 0.25], np.float32)


def _families():
    plain = FlatMLPQ(3, [5, 4], [-1.0, 0.0, 1.0])
    scaled = FlatMLPQ(3, [5, 4], [-1.0, 0.0, 1.0], state_shift=SHIFT, state_scale=SCALE)
    return plain, scaled


def _data():
    rng = np.random.default_rng(0)
    plain, _ = _families()
    params = rng.normal(0.0, 0.8, (4, plain.d)).astype(np.float32)  # non-zero last layer: Q varies
    states = rng.normal(0.0, 3.0, (7, 3)).astype(np.float32)
    actions = rng.integers(0, 3, 7).astype(np.int32)
    by_hand = (states - SHIFT) * SCALE  # float32 arithmetic, the same two roundings as the family's
    return params, states, actions, by_hand


def test_the_scaled_family_equals_the_unscaled_one_on_scaled_inputs_exactly():
    plain, scaled = _families()
    params, states, actions, by_hand = _data()
    assert scaled.d == plain.d and scaled.layer_shapes == plain.layer_shapes  # the layout is unchanged
    np.testing.assert_array_equal(scaled.q_all(params, states).numpy(), plain.q_all(params, by_hand).numpy())
    np.testing.assert_array_equal(
        scaled.q_sa(params, states, actions).numpy(), plain.q_sa(params, by_hand, actions).numpy()
    )
    paired = np.stack([states, states[::-1], states * 0.5, states + 1.0]).astype(np.float32)  # [4, 7, 3]
    paired_by_hand = (paired - SHIFT) * SCALE
    np.testing.assert_array_equal(
        scaled.q_all_paired(params, paired).numpy(), plain.q_all_paired(params, paired_by_hand).numpy()
    )
    np.testing.assert_array_equal(
        scaled.greedy_actions(params, states).numpy(), plain.greedy_actions(params, by_hand).numpy()
    )
    # q_sa's gradient (the hand-written backward pass) sees the scaled inputs
    targets = tf.constant(np.linspace(-1.0, 1.0, 7, dtype=np.float32))

    def gradient(q, inputs):
        p = tf.constant(params)
        with tf.GradientTape() as tape:
            tape.watch(p)
            loss = tf.reduce_sum((q.q_sa(p, inputs, actions) - targets[None]) ** 2)
        return tape.gradient(loss, p).numpy()

    got = gradient(scaled, states)
    np.testing.assert_array_equal(got, gradient(plain, by_hand))
    assert np.abs(got - gradient(plain, states)).max() > 1e-3  # and the scaling does change it


def test_the_scaling_is_in_the_config_and_defaults_to_none():
    plain, scaled = _families()
    assert plain.state_shift is None and not plain.scales_inputs
    assert (plain.get_config()["state_shift"], plain.get_config()["state_scale"]) == (None, None)
    config = scaled.get_config()
    assert config["state_shift"] == SHIFT.tolist() and config["state_scale"] == SCALE.tolist()
    rebuilt = FlatMLPQ.from_config(config)
    params, states, _, _ = _data()
    np.testing.assert_array_equal(rebuilt.q_all(params, states).numpy(), scaled.q_all(params, states).numpy())
    # one of the two alone: the other is the identity's
    shift_only = FlatMLPQ(3, [5, 4], [-1.0, 0.0, 1.0], state_shift=SHIFT)
    np.testing.assert_array_equal(shift_only.state_scale, np.ones(3, np.float32))
    scale_only = FlatMLPQ(3, [5, 4], [-1.0, 0.0, 1.0], state_scale=SCALE)
    np.testing.assert_array_equal(scale_only.state_shift, np.zeros(3, np.float32))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(state_shift=[0.0, 1.0]), r"state_shift must have shape \[3\] \(state_dim\), got \[2\]"),
        (dict(state_scale=[1.0, np.inf, 1.0]), "state_scale must be finite"),
        (dict(state_scale=[1.0, 0.0, 1.0]), "state_scale must be non-zero"),
    ],
)
def test_a_bad_scaling_is_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FlatMLPQ(3, [5], [0.0, 1.0], **kwargs)
