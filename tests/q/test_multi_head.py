"""MultiHeadQ: each head is its base family on its slice of the flat vector, exactly."""

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.q import FlatMLPQ, TableQ
from pbo_tf.q.multi_head import MultiHeadQ


def _mlp():
    return FlatMLPQ(2, [5, 3], [-1.0, 1.0])


def _random_params(q, n, seed):
    return np.random.default_rng(seed).normal(size=(n, q.d)).astype(np.float32)


def test_each_head_is_the_base_family_on_its_slice_exactly():
    base = _mlp()
    multi = MultiHeadQ(base, 4)
    assert multi.d == 4 * base.d
    params = _random_params(multi, 3, 0)
    states = np.random.default_rng(1).normal(size=(7, 2)).astype(np.float32)
    actions = np.array([0, 1, 1, 0, 1, 0, 0])
    q_all = multi.q_all_heads(params, states).numpy()
    q_sa = multi.q_sa_heads(params, states, actions).numpy()
    assert q_all.shape == (3, 4, 7, 2) and q_sa.shape == (3, 4, 7)
    for k in range(4):
        omega_k = params[:, k * base.d : (k + 1) * base.d]  # the documented head-major layout
        np.testing.assert_array_equal(multi.head_params(params, k).numpy(), omega_k)
        np.testing.assert_array_equal(q_all[:, k], base.q_all(omega_k, states).numpy())
        np.testing.assert_array_equal(q_sa[:, k], base.q_sa(omega_k, states, actions).numpy())
    # as a QFamily it is its last head (the policy's)
    last = params[:, 3 * base.d :]
    np.testing.assert_array_equal(multi.q_all(params, states).numpy(), base.q_all(last, states).numpy())
    np.testing.assert_array_equal(
        multi.greedy_actions(params, states).numpy(), base.greedy_actions(last, states).numpy()
    )
    paired = np.random.default_rng(2).normal(size=(3, 5, 2)).astype(np.float32)
    np.testing.assert_array_equal(
        multi.q_all_paired(params, paired).numpy(), base.q_all_paired(last, paired).numpy()
    )
    np.testing.assert_array_equal(multi.stack_heads(multi.heads(params).numpy()), params)


def test_bellman_targets_per_head_by_hand_on_a_table():
    base = TableQ(3, 2)
    multi = MultiHeadQ(base, 2)
    head0 = np.array([0.0, 1.0, 2.0, -1.0, 0.5, 0.5])  # Q(s, a) = head0[2 s + a]
    head1 = np.array([3.0, 0.0, 0.0, 0.0, -2.0, -4.0])
    params = np.concatenate([head0, head1])[None].astype(np.float32)
    rewards = np.array([1.0, 0.0, 2.0], np.float32)
    next_states = np.array([1, 2, 0])
    dones = np.array([0.0, 0.0, 1.0], np.float32)
    got = multi.bellman_targets_heads(params, rewards, next_states, dones, 0.5).numpy()
    # head 0: max_a Q(1, ·) = 2, max Q(2, ·) = 0.5; head 1: max Q(1, ·) = 0, max Q(2, ·) = -2;
    # the third transition is terminal
    np.testing.assert_allclose(got, [[[1 + 0.5 * 2, 0 + 0.5 * 0.5, 2.0], [1 + 0.0, 0.5 * -2, 2.0]]])


def test_initial_params_start_head_zero_at_the_base_start():
    base = _mlp()
    multi = MultiHeadQ(base, 3)
    w = multi.initial_params(2, seed=5)
    assert w.shape == (2, multi.d)
    np.testing.assert_array_equal(multi.heads(w)[0, 0].numpy(), base.initial_params(1, 5)[0])
    heads = multi.heads(w).numpy().reshape(6, base.d)
    assert len({h.tobytes() for h in heads}) == 6  # independent initialisations
    # the zero last layer: every head is Q = 0 at the start
    q = multi.q_all_heads(w, np.ones((4, 2), np.float32)).numpy()
    np.testing.assert_array_equal(q, 0.0)


def test_bad_heads_and_shapes_are_one_line_errors():
    with pytest.raises(ValueError, match="n_heads must be >= 2"):
        MultiHeadQ(_mlp(), 1)
    multi = MultiHeadQ(_mlp(), 3)
    with pytest.raises(ValueError, match=r"head 3 does not exist: the family has heads 0..2"):
        multi.head_params(multi.initial_params(1, 0), 3)
    with pytest.raises(ValueError, match="expects parameters of shape"):
        multi.heads(tf.zeros([1, multi.d - 1]))
    with pytest.raises(ValueError, match="head parameters must be"):
        multi.stack_heads(np.zeros((1, 2, multi.base.d)))
