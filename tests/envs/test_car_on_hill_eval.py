"""Tests of the compiled car-on-hill greedy rollouts (against the NumPy dynamics and the gymnasium env) and of
the count-weighted metrics."""

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.envs import car_on_hill as coh
from pbo_tf.envs.car_on_hill import evaluation as ev

GAMMA = coh.GAMMA


def greedy_fn(states):
    """Three hand-made policies on rows 0, 1, 2: always +4, the sign of v (+4 if v > 0), always -4."""
    right = tf.ones_like(states[0, :, 0], dtype=tf.int32)
    sign_of_v = tf.cast(states[1, :, 1] > 0.0, tf.int32)
    return tf.stack([right, sign_of_v, tf.zeros_like(right)])


def choose(policy, obs):
    return (1, int(obs[1] > 0.0), 0)[policy]


@pytest.fixture(scope="module")
def grid_values():
    # One compilation for the whole module: same callable, shapes and horizon.
    return ev.greedy_rollout_values(greedy_fn, coh.grid_centres(), n_policies=3)


def numpy_rollouts(starts, horizon=coh.HORIZON):
    """Plain NumPy reference: all (policy, start) pairs stepped together with the float64 dynamics."""
    states = np.stack([starts] * 3)
    returns, alive, discount = np.zeros(states.shape[:2]), np.ones(states.shape[:2], bool), 1.0
    for _ in range(horizon):
        obs = states.astype(np.float32)
        actions = np.stack(
            [np.ones(len(starts), int), (obs[1, :, 1] > 0).astype(int), np.zeros(len(starts), int)]
        )
        nxt = coh.step_states(states, actions)
        reward, terminated = coh.transition_outcome(nxt)
        returns += np.where(alive, discount * reward, 0.0)
        states = np.where(alive[..., None], nxt, states)
        alive &= ~terminated
        discount *= GAMMA
    return returns


def env_rollout(policy, start, horizon=coh.HORIZON):
    """Per-state reference with the gymnasium env."""
    env = coh.CarOnHillEnv()
    obs, _ = env.reset(options={"state": start})
    total, discount = 0.0, 1.0
    for _ in range(horizon):
        obs, reward, terminated, _, _ = env.step(choose(policy, obs))
        total += discount * reward
        discount *= GAMMA
        if terminated:
            break
    return total


def test_rollout_values_match_a_numpy_rollout_on_every_cell(grid_values):
    assert grid_values.shape == (3, 289) and grid_values.dtype == np.float64
    np.testing.assert_allclose(grid_values, numpy_rollouts(coh.grid_centres()), rtol=0, atol=1e-12)
    # The three policies give different, non-trivial value maps.
    for values in grid_values:
        assert np.any(values > 0) and np.any(values < 0)
    assert not np.allclose(grid_values[0], grid_values[1]) and not np.allclose(grid_values[1], grid_values[2])


def test_rollout_values_match_per_state_env_rollouts(grid_values):
    centres = coh.grid_centres()
    cells = [0, 8, 40, 100, 144, 152, 200, 250, 288]
    for policy in range(3):
        for cell in cells:
            assert grid_values[policy, cell] == pytest.approx(
                env_rollout(policy, centres[cell]), abs=1e-12
            ), (policy, cell)


def test_returns_are_discounted_and_stop_at_termination(grid_values):
    centres = coh.grid_centres()
    values = set()
    for policy in range(3):
        for cell in range(289):
            v = grid_values[policy, cell]
            values.add(round(v, 12))
            # A deterministic episode pays one terminal reward: 0 (no termination), or ±gamma^(t - 1).
            if v != 0:
                t = 1 + np.log(abs(v)) / np.log(GAMMA)
                assert abs(t - round(t)) < 1e-9 and 1 <= round(t) <= coh.HORIZON, (policy, cell, v)
    assert len(values) > 10
    # Hand-checked cases: (1, 3) is past the top after one step of +4 but too fast: -1; (-1, -3) leaves at
    # once; (1, 0) with +4 reaches the top at step 1 (V = 1) but with -4 rolls back and takes longer.
    top_right = int(np.flatnonzero((centres[:, 0] == 1.0) & (centres[:, 1] == 0.0))[0])
    assert grid_values[0, 288] == -1.0 and grid_values[2, 0] == -1.0
    assert grid_values[0, top_right] == 1.0 and grid_values[2, top_right] < 1.0


def test_rollout_argument_validation():
    with pytest.raises(ValueError, match="starts"):
        ev.greedy_rollout_values(greedy_fn, np.zeros((5, 3)), 3)
    with pytest.raises(ValueError, match="n_policies"):
        ev.greedy_rollout_values(greedy_fn, np.zeros((5, 2)), 0)


# ------------------------------------------------------------------------------------------ metrics
def test_metrics_on_a_hand_computed_case():
    counts = np.array([1, 3, 0, 2])
    v_star = np.array([1.0, 1.0, 1.0, 1.0])
    q_star = np.array([[1.0, 0.5], [1.0, 0.0], [0.0, 1.0], [0.5, 1.0]])
    values = np.array([[1.0, -1.0, 5.0, 0.5], v_star])
    q_values = np.stack([q_star + np.array([[0.0, 1.0], [2.0, 0.0], [9.0, 9.0], [0.0, -1.0]]), q_star])
    first, second = ev.car_on_hill_metrics(values, q_values, counts, v_star, q_star)
    # J = mean(V * count) = (1 - 3 + 0 + 1) / 4; normalised by sum(count) = 6.
    assert first["J"] == pytest.approx(-0.25) and first["J_normalised"] == pytest.approx(-1 / 6)
    # v_error = sqrt(mean(count (V* - V)^2)) = sqrt((0 + 3*4 + 0 + 2*0.25) / 4).
    assert first["v_error"] == pytest.approx(np.sqrt(12.5 / 4))
    # q_error = sqrt(mean over 8 entries of count (Q* - Q)^2) = sqrt((1*1 + 3*4 + 0 + 2*1) / 8).
    assert first["q_error"] == pytest.approx(np.sqrt(15 / 8))
    # A policy whose V equals V* and whose Q equals Q*: J = optimal J, zero errors.
    reference = ev.reference_metrics(v_star, counts)
    assert second == pytest.approx(
        {"J": reference["optimal_J"], "J_normalised": 1.0, "q_error": 0.0, "v_error": 0.0}
    )
    assert reference == pytest.approx(
        {
            "optimal_J": 6 / 4,
            "optimal_J_normalised": 1.0,
            "optimal_v_grid_mean": 1.0,
            "optimal_v_grid_positive_fraction": 1.0,
        }
    )


def test_reference_metrics_summaries():
    v_star = np.array([0.5, -1.0, 0.0, 0.9])
    counts = np.array([2, 1, 5, 0])
    ref = ev.reference_metrics(v_star, counts)
    assert ref["optimal_J"] == pytest.approx((1.0 - 1.0) / 4)
    assert ref["optimal_v_grid_mean"] == pytest.approx(0.1)
    assert ref["optimal_v_grid_positive_fraction"] == 0.5
    assert ref["optimal_J_normalised"] == pytest.approx(0.0)


def test_metrics_on_the_grid_with_dataset_counts(grid_values):
    # Raw counts from a (small) dataset; the policies' own rollout values as "V*" give zero v_error.
    data = coh.collect_dataset(seed=0, n_random=400, n_oriented=100)
    counts = coh.state_counts(data.state)
    assert counts.sum() == 500
    q = np.zeros((3, 289, 2))
    metrics = ev.car_on_hill_metrics(grid_values, q, counts, grid_values[1], np.zeros((289, 2)))
    assert len(metrics) == 3 and metrics[1]["v_error"] == 0.0 and metrics[1]["q_error"] == 0.0
    for i, m in enumerate(metrics):
        assert m["J"] == pytest.approx(np.sum(grid_values[i] * counts) / 289)
        assert m["J_normalised"] == pytest.approx(np.sum(grid_values[i] * counts) / 500)
    assert metrics[0]["v_error"] > 0


def test_metrics_validate_shapes():
    with pytest.raises(ValueError, match="q_values"):
        ev.car_on_hill_metrics(np.zeros((2, 4)), np.zeros((2, 4)), np.ones(4), np.zeros(4), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="counts"):
        ev.car_on_hill_metrics(
            np.zeros((2, 4)), np.zeros((2, 4, 2)), np.ones(3), np.zeros(4), np.zeros((4, 2))
        )
    with pytest.raises(ValueError, match="counts"):
        ev.reference_metrics(np.zeros(4), np.ones(5))
