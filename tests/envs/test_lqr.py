"""Tests of the LQR constants, Riccati solution, closed-form PBO, gymnasium env and mesh dataset."""

import math
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from scipy import optimize

import pbo_tf  # noqa: F401  (registers the ids)
from pbo_tf import envs
from pbo_tf.envs import lqr

A, B, Q, R, S = lqr.A, lqr.B, lqr.Q, lqr.R, lqr.S

# Warnings check_env emits by design for this env: unbounded observations and a [-8, 8] action box.
EXPECTED_CHECKER_WARNINGS = ("infinity", "symmetric and normalized")


def test_constants_match_the_paper():
    assert abs(2 * S - -0.62723827) < 1e-12
    assert (round(A, 2), round(B, 2), round(Q, 2), round(R, 2), round(2 * S, 2)) == (
        -0.46,
        0.54,
        -0.73,
        -0.93,
        -0.63,
    )
    assert lqr.GAMMA == 1.0 and lqr.M_PAPER == -1.20 and lqr.N_ACTIONS == 200
    actions = lqr.discrete_actions()
    assert actions.shape == (200,) and actions[0] == -8.0 and actions[-1] == 8.0


def test_riccati_p_solves_the_riccati_equation():
    p = lqr.riccati_p()
    residual = Q + A**2 * p - (S + A * B * p) ** 2 / (R + B**2 * p) - p
    assert abs(residual) < 1e-10
    assert R + B**2 * p < 0  # the greedy action is a maximum
    gain = -(S + A * B * p) / (R + B**2 * p)
    assert abs(A + B * gain) < 1  # the greedy policy is stabilising
    assert p < 0  # negative-definite rewards


def test_riccati_p_equals_value_iteration_from_zero():
    # V_{k+1}(s) = max_a r(s, a) + V_k(A s + B a) with V_k = p_k s², maximised numerically at s = 1.
    p = 0.0
    for _ in range(60):
        best = optimize.minimize_scalar(lambda a, p=p: -(Q + 2 * S * a + R * a * a + p * (A + B * a) ** 2))
        p = -best.fun
    assert p == pytest.approx(lqr.riccati_p(), abs=1e-8)


def test_riccati_p_of_another_system_picks_the_stabilising_root():
    # An open-loop unstable system (|A| > 1) with a plain quadratic cost.
    a, b, q, r, s = 1.5, 1.0, -1.0, -1.0, 0.0
    p = lqr.riccati_p(A=a, B=b, Q=q, R=r, S=s)
    assert abs(q + a * a * p - (s + a * b * p) ** 2 / (r + b * b * p) - p) < 1e-10
    gain = -(s + a * b * p) / (r + b * b * p)
    assert abs(a + b * gain) < 1 and r + b * b * p < 0


def test_optimal_params_formulas():
    params = lqr.optimal_params()
    p = lqr.riccati_p()
    assert params["P"] == p
    assert params["G"] == pytest.approx(Q + A**2 * p, abs=1e-15)
    assert params["I"] == pytest.approx(S + A * B * p, abs=1e-15)
    assert params["M"] == pytest.approx(R + B**2 * p, abs=1e-15)
    # Q*(s, a) = G s² + 2 I s a + M a² must equal r(s, a) + P (A s + B a)² everywhere.
    s, a = np.meshgrid(np.linspace(-4, 4, 9), np.linspace(-8, 8, 9))
    q_star = params["G"] * s**2 + 2 * params["I"] * s * a + params["M"] * a**2
    np.testing.assert_allclose(q_star, lqr.reward(s, a) + p * lqr.next_state(s, a) ** 2, atol=1e-12)
    # And M* is close to the paper's chosen M.
    assert params["M"] == pytest.approx(lqr.M_PAPER, abs=0.01)


def test_greedy_gain_of_optimal_params_is_the_riccati_gain_with_value_p():
    params = lqr.optimal_params()
    gain = lqr.greedy_gain(params["G"], params["I"], params["M"])
    # Independent Riccati gain: the numerical argmax of r(1, a) + P (A + B a)².
    best = optimize.minimize_scalar(lambda a: -(Q + 2 * S * a + R * a * a + params["P"] * (A + B * a) ** 2))
    assert gain == pytest.approx(best.x, abs=1e-6)
    assert lqr.policy_value(gain) == pytest.approx(params["P"], abs=1e-12)


def test_greedy_gain_is_elementwise():
    np.testing.assert_allclose(
        lqr.greedy_gain(np.array([1.0, 2.0]), np.array([0.5, -1.0]), -2.0), [0.25, -0.5]
    )


def test_optimal_gain_is_best_among_linear_gains():
    p = lqr.riccati_p()
    gains = np.linspace(-3.0, 3.0, 1201)
    values = np.array([lqr.policy_value(g) for g in gains])
    assert np.all(values <= p + 1e-12)
    assert values.max() == pytest.approx(p, abs=1e-5)
    assert np.isneginf(values).any()  # gains that destabilise the loop


def test_policy_value_matches_a_rollout():
    gain, s0 = 0.5, 2.0
    env = lqr.LQREnv()
    obs, _ = env.reset(options={"state": s0})
    total = 0.0
    state = s0
    for _ in range(60):
        obs, reward, *_ = env.step(np.array([gain * state], dtype=np.float32))
        state = float(env._state)  # follow the float64 internal state, not the float32 observation
        total += reward
    assert total == pytest.approx(lqr.policy_value(gain) * s0**2, rel=1e-5)
    assert lqr.policy_value(3.0) == -math.inf


def test_oracle_operator_fixed_point_and_convergence_from_zero():
    params = lqr.optimal_params()
    g_star, i_star, m_star = params["G"], params["I"], params["M"]
    g_fixed, i_fixed = lqr.oracle_operator(g_star, i_star, m_star)
    assert g_fixed == pytest.approx(g_star, abs=1e-12) and i_fixed == pytest.approx(i_star, abs=1e-12)
    g, i = 0.0, 0.0
    errors = []
    for _ in range(40):
        g, i = lqr.oracle_operator(g, i, m_star)
        errors.append(math.hypot(g - g_star, i - i_star))
    assert errors[-1] < 1e-12
    assert errors[5] < errors[0]  # converges rather than merely ending near the optimum


def test_oracle_operator_is_the_exact_bellman_update_of_g_and_i():
    # Γ Q_ω(s, a) = r(s, a) + max_a' Q_ω(s', a') = G' s² + 2 I' s a + (R + B² c) a², c = G − I²/M:
    # the oracle returns (G', I'); only the a² coefficient differs from the fixed M of the family.
    m = lqr.M_PAPER
    rng = np.random.default_rng(0)
    for g, i in rng.normal(size=(3, 2)):
        g_new, i_new = lqr.oracle_operator(g, i, m)
        c = g - i * i / m
        for s, a in rng.uniform(-4, 4, size=(4, 2)):
            s_next = lqr.next_state(s, a)
            best = optimize.minimize_scalar(
                lambda b, s_next=s_next, g=g, i=i: -(g * s_next**2 + 2 * i * s_next * b + m * b * b)
            )
            bellman = lqr.reward(s, a) - best.fun
            assert bellman == pytest.approx(
                g_new * s**2 + 2 * i_new * s * a + (R + B**2 * c) * a**2, abs=1e-9
            )


def test_oracle_operator_is_elementwise_on_arrays():
    g, i = np.array([0.0, -1.0, 0.5]), np.array([0.0, 0.2, -0.3])
    g_new, i_new = lqr.oracle_operator(g, i, lqr.M_PAPER)
    assert g_new.shape == (3,) and i_new.shape == (3,)
    for k in range(3):
        np.testing.assert_allclose((g_new[k], i_new[k]), lqr.oracle_operator(g[k], i[k], lqr.M_PAPER))


def _check_env_with_expected_warnings(env, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, **kwargs)
    unexpected = [
        str(w.message) for w in caught if not any(e in str(w.message) for e in EXPECTED_CHECKER_WARNINGS)
    ]
    assert not unexpected


def test_check_env_passes_on_raw_and_registered_env():
    _check_env_with_expected_warnings(lqr.LQREnv(), skip_render_check=True)
    env = gymnasium.make(envs.ENV_IDS["lqr"])
    assert isinstance(env.unwrapped, lqr.LQREnv) and env.spec.max_episode_steps == 100
    _check_env_with_expected_warnings(env.unwrapped)


def test_step_matches_the_formulas():
    env = lqr.LQREnv()
    obs, _ = env.reset(seed=0, options={"state": 1.5})
    assert obs.shape == (1,) and obs.dtype == np.float32 and obs[0] == 1.5
    obs, reward, terminated, truncated, info = env.step(np.array([-2.0], dtype=np.float32))
    assert reward == pytest.approx(Q * 2.25 + 2 * S * 1.5 * -2.0 + R * 4.0, abs=1e-12)
    assert obs[0] == pytest.approx(np.float32(A * 1.5 + B * -2.0))
    assert isinstance(reward, float) and not terminated and not truncated and info == {}


def test_actions_are_clipped_and_validated():
    env = lqr.LQREnv()
    env.reset(options={"state": 0.0})
    obs, reward, *_ = env.step(np.array([100.0], dtype=np.float32))
    assert obs[0] == pytest.approx(B * 8.0) and reward == pytest.approx(R * 64.0)
    with pytest.raises(ValueError):
        env.step(np.array([1.0, 2.0]))
    with pytest.raises(RuntimeError):
        lqr.LQREnv().step(np.zeros(1))


def test_reset_from_given_state_and_random_starts():
    env = lqr.LQREnv()
    obs, _ = env.reset(options={"state": 2.0})
    assert obs.shape == (1,) and obs[0] == 2.0
    assert env.reset(options={"state": np.array([-3.0])})[0][0] == -3.0
    for bad in (np.array([1.0, 2.0]), float("nan"), "x"):
        with pytest.raises(ValueError):
            env.reset(options={"state": bad})
    starts = np.array([lqr.LQREnv().reset(seed=seed)[0][0] for seed in range(200)])
    assert starts.min() >= -4.0 and starts.max() <= 4.0 and starts.std() > 1.5  # U[-4, 4] has std 2.31
    np.testing.assert_array_equal(env.reset(seed=5)[0], env.reset(seed=5)[0])


def test_dataset_is_the_121_point_mesh_with_correct_rewards_and_next_states():
    data = lqr.collect_dataset()
    mesh = np.linspace(-4.0, 4.0, 11)
    assert len(data) == 121
    assert data.state.shape == (121, 1) and data.state.dtype == np.float32
    assert data.next_state.shape == (121, 1) and data.next_state.dtype == np.float32
    assert data.action.dtype == np.int32 and data.action.min() == 0 and data.action.max() == 10
    np.testing.assert_allclose(lqr.mesh_actions(), mesh, atol=1e-6)
    s = data.state[:, 0].astype(np.float64)
    a = lqr.mesh_actions()[data.action].astype(np.float64)
    pairs = {(round(x, 4), round(y, 4)) for x, y in zip(s, a, strict=True)}
    assert pairs == {(round(x, 4), round(y, 4)) for x in mesh for y in mesh}
    np.testing.assert_allclose(data.reward, Q * s**2 + 2 * S * s * a + R * a**2, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(data.next_state[:, 0], A * s + B * a, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(data.done, 0.0)
    # The same transition through the env (a corner of the mesh).
    env = lqr.LQREnv()
    env.reset(options={"state": -4.0})
    obs, reward, *_ = env.step(np.array([4.0], dtype=np.float32))
    k = int(np.flatnonzero((s == -4.0) & (a == 4.0))[0])
    assert reward == pytest.approx(float(data.reward[k]), rel=1e-6)
    assert obs[0] == pytest.approx(float(data.next_state[k, 0]), rel=1e-6)
