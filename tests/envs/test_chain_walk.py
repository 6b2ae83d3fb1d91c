"""Tests of the chain-walk model, its exact solution, the gymnasium env, the dataset and the registration."""

import re
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import pbo_tf  # noqa: F401  (registers the ids)
from pbo_tf import envs
from pbo_tf.envs import chain_walk as cw

N = cw.N_STATES


def test_transition_model_shapes_and_rows_sum_to_one():
    P, R = cw.transition_model()
    assert P.shape == (2 * N, N) and P.dtype == np.float64
    assert R.shape == (2 * N,) and R.dtype == np.float64
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-15)
    assert np.all(P >= 0.0)


def test_ends_self_loop_and_pay_one():
    P, R = cw.transition_model()
    for s in (0, N - 1):
        for a in (0, 1):
            assert P[2 * s + a, s] == 1.0
            assert R[2 * s + a] == 1.0
    assert np.all(R[2:-2] == 0.0)


def test_interior_moves_succeed_with_prob_point_nine_else_stay():
    P, _ = cw.transition_model()
    left, right = P[2 * 5 + 0], P[2 * 5 + 1]
    assert left[4] == pytest.approx(0.9) and left[5] == pytest.approx(0.1)
    assert right[6] == pytest.approx(0.9) and right[5] == pytest.approx(0.1)
    assert np.count_nonzero(left) == 2 and np.count_nonzero(right) == 2
    # Moving into an absorbing end from its neighbour.
    assert P[2 * 1 + 0, 0] == pytest.approx(0.9) and P[2 * (N - 2) + 1, N - 1] == pytest.approx(0.9)


def test_optimal_q_satisfies_bellman_optimality_and_ends_are_worth_ten():
    P, R = cw.transition_model()
    q = cw.optimal_q()
    assert q.shape == (N, 2)
    backup = (R + cw.GAMMA * P @ q.max(axis=1)).reshape(N, 2)
    np.testing.assert_allclose(backup, q, atol=1e-10, rtol=0)
    np.testing.assert_allclose(q[[0, N - 1]], 10.0, atol=1e-10)


def test_optimal_q_matches_exact_policy_evaluation_of_its_greedy_policy():
    P, R = cw.transition_model()
    q = cw.optimal_q()
    policy = q.argmax(axis=1)
    rows = np.arange(N) * 2 + policy
    v = np.linalg.solve(np.eye(N) - cw.GAMMA * P[rows], R[rows])
    q_pi = (R + cw.GAMMA * P @ v).reshape(N, 2)
    np.testing.assert_allclose(q_pi, q, atol=1e-9, rtol=0)


def test_optimal_q_next_to_an_end_has_closed_form():
    # Q*(1, left) = gamma (0.9 * 10 + 0.1 * Q*(1, left))  =>  Q*(1, left) = 8.1 / (1 - 0.09).
    q = cw.optimal_q()
    assert q[1, 0] == pytest.approx(8.1 / 0.91, abs=1e-10)
    assert q[N - 2, 1] == pytest.approx(8.1 / 0.91, abs=1e-10)


def test_greedy_policy_points_toward_the_nearer_end():
    q = cw.optimal_q()
    for s in range(1, N - 1):
        expected = cw.LEFT if s < (N - 1) - s else cw.RIGHT
        assert q[s].argmax() == expected, s
        assert q[s, expected] > q[s, 1 - expected]


def test_check_env_passes_on_raw_and_registered_env():
    check_env(cw.ChainWalkEnv(), skip_render_check=True)
    env = gymnasium.make(envs.ENV_IDS["chain_walk"])
    check_env(env.unwrapped)
    assert isinstance(env.unwrapped, cw.ChainWalkEnv)
    assert env.spec.max_episode_steps == 100


def test_reset_from_given_state_and_invalid_states():
    env = cw.ChainWalkEnv()
    obs, info = env.reset(seed=0, options={"state": 3})
    assert obs == 3 and env.observation_space.contains(obs) and info == {}
    assert env.reset(options={"state": np.int64(19)})[0] == 19
    for bad in (20, -1, 2.5, "3", True):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            env.reset(options={"state": bad})


def test_seeded_reset_and_steps_are_reproducible():
    def rollout(seed):
        env = cw.ChainWalkEnv()
        obs, _ = env.reset(seed=seed)
        out = [obs]
        for t in range(50):
            obs, reward, terminated, truncated, _ = env.step(t % 2)
            assert not terminated and not truncated
            out.append(obs)
        return out

    assert rollout(123) == rollout(123)
    starts = {cw.ChainWalkEnv().reset(seed=seed)[0] for seed in range(40)}
    assert len(starts) > 5  # uniform start, not a constant


def test_step_reward_is_that_of_the_current_state():
    env = cw.ChainWalkEnv()
    env.reset(seed=1, options={"state": 0})
    obs, reward, *_ = env.step(1)
    assert obs == 0 and reward == 1.0
    env.reset(options={"state": 1})
    _, reward, *_ = env.step(0)
    assert reward == 0.0  # even when the step lands in the rewarding end


def test_step_validates_action_and_requires_reset():
    env = cw.ChainWalkEnv()
    with pytest.raises(RuntimeError):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="2"):
        env.step(2)


def test_empirical_transition_frequencies_match_the_model():
    env = cw.ChainWalkEnv()
    env.reset(seed=2024)
    trials = 2000  # binomial std of a frequency <= 0.0112: the tolerance is > 3.5 std
    for s, a in ((5, 0), (5, 1), (1, 0), (N - 2, 1), (0, 1), (N - 1, 0)):
        counts = np.zeros(N)
        for _ in range(trials):
            env.reset(options={"state": s})
            counts[env.step(a)[0]] += 1
        np.testing.assert_allclose(
            counts / trials, env.P[2 * s + a], atol=0.04, err_msg=f"(s, a) = ({s}, {a})"
        )


def test_registered_env_truncates_after_100_steps():
    env = envs.make(envs.ENV_IDS["chain_walk"])
    env.reset(seed=0)
    for t in range(100):
        _, _, terminated, truncated, _ = env.step(1)
        assert not terminated
        assert truncated == (t == 99)


def test_dataset_covers_every_pair_ten_times_with_model_consistent_next_states():
    data = cw.collect_dataset(seed=0)
    P, R = cw.transition_model()
    assert len(data) == 400
    assert data.state.shape == (400,) and data.state.dtype == np.int32
    assert data.next_state.shape == (400,) and data.next_state.dtype == np.int32
    assert data.action.dtype == np.int32
    pairs, counts = np.unique(np.stack([data.state, data.action], axis=1), axis=0, return_counts=True)
    assert len(pairs) == 2 * N and np.all(counts == 10)
    rows = data.state * 2 + data.action
    assert np.all(P[rows, data.next_state] > 0)  # every sampled move is possible
    np.testing.assert_array_equal(data.reward, R[rows].astype(np.float32))
    np.testing.assert_array_equal(data.done, 0.0)
    # Successful moves happen about 90% of the time among interior pairs.
    interior = (data.state > 0) & (data.state < N - 1)
    moved = data.next_state[interior] != data.state[interior]
    assert 0.8 < moved.mean() < 0.97


def test_dataset_is_reproducible_from_the_seed_and_differs_across_seeds():
    a, b, c = cw.collect_dataset(seed=3), cw.collect_dataset(seed=3), cw.collect_dataset(seed=4)
    np.testing.assert_array_equal(a.next_state, b.next_state)
    assert not np.array_equal(a.next_state, c.next_state)
    np.testing.assert_array_equal(a.state, c.state)


def test_make_rejects_unknown_ids_and_registration_is_idempotent():
    with pytest.raises(ValueError, match="pbo_tf/Nope-v0") as excinfo:
        envs.make("pbo_tf/Nope-v0")
    assert "pbo_tf/ChainWalk-v0" in str(excinfo.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # re-registering would warn about overriding an id
        envs.register_all()
        envs.register_all()
    assert set(envs.ENV_IDS.values()) <= set(gymnasium.registry)
    assert isinstance(envs.make("pbo_tf/LQR-v0").unwrapped, gymnasium.Env)
