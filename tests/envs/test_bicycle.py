"""Tests of the bicycle dynamics (against a literal transcription of Randløv & Alstrøm's equations), the env
and the dataset."""

import math
import warnings

import numpy as np
import pytest
from gymnasium.utils import seeding
from gymnasium.utils.env_checker import check_env

from pbo_tf.envs import bicycle as bk

DEG = math.pi / 180.0

# ------------------------------------------------------------------------------------------------------
# A literal, scalar transcription of the equations in `pbo_tf.envs.bicycle.mdp`'s docstring (its own
# constants, reciprocal radii, sign(θ) and the θ = 0 special case), independent of the vectorised branch-free
# form of `bicycle_step`.
_C, _D_CM, _H, _L, _M_C, _M_D, _M_P, _R, _V, _G, _DT = (
    0.66,
    0.30,
    0.94,
    1.11,
    15,
    1.7,
    60,
    0.34,
    10 / 3.6,
    9.82,
    0.01,
)
_ACTIONS = [(-0.02, 0.0), (0.0, 0.0), (0.02, 0.0), (0.0, -2.0), (0.0, 2.0)]


def literal_step(state, action, eps):
    omega, omega_dot, theta, theta_dot = (float(x) for x in state)
    d, torque = _ACTIONS[int(action)]
    d += float(eps)
    m = _M_C + _M_P
    i_bc = 13 / 3 * _M_C * _H**2 + _M_P * (_H + _D_CM) ** 2
    i_dc, i_dv, i_dl = _M_D * _R**2, 1.5 * _M_D * _R**2, 0.5 * _M_D * _R**2
    sigma_dot = _V / _R
    phi = omega + math.atan(d / _H)
    if theta == 0.0:
        inv_rf = inv_rb = inv_rcm = 0.0
        sign = 0.0
    else:
        inv_rf = abs(math.sin(theta)) / _L
        inv_rb = abs(math.tan(theta)) / _L
        inv_rcm = ((_L - _C) ** 2 + _L**2 / math.tan(theta) ** 2) ** -0.5
        sign = math.copysign(1.0, theta)
    omega_ddot = (
        m * _H * _G * math.sin(phi)
        - math.cos(phi)
        * (
            i_dc * sigma_dot * theta_dot
            + sign * _V**2 * (_M_D * _R * inv_rf + _M_D * _R * inv_rb + m * _H * inv_rcm)
        )
    ) / i_bc
    theta_ddot = (torque - i_dv * sigma_dot * omega_dot) / i_dl
    new = [omega + _DT * omega_dot, omega_dot + _DT * omega_ddot, theta + _DT * theta_dot]
    new.append(theta_dot + _DT * theta_ddot)
    if abs(new[2]) > 80 * DEG:
        new[3] = 0.0
        new[2] = math.copysign(80 * DEG, new[2])
    fell = abs(new[0]) > 12 * DEG
    reward = -1.0 if fell else 1e4 * (abs(omega) - abs(new[0]))
    return np.array(new), reward, fell


def _random_states(rng, n):
    states = rng.uniform(-1.0, 1.0, size=(n, 4)) * np.array([0.2, 2.0, 80 * DEG, 6.0])
    states[:20, 2] = 0.0  # θ = 0 exactly: 1/r_CM = 0 and sign(θ) = 0
    states[20:30, 2] = 80 * DEG  # at the handlebar clip
    states[30:40, 2] = -80 * DEG
    return states


# ------------------------------------------------------------------------------------------------ model
def test_constants_and_inertias():
    computed = [bk.I_BC, bk.I_DC, bk.I_DV, bk.I_DL, bk.SIGMA_DOT, bk.OMEGA_BOUND, bk.THETA_BOUND]
    by_hand = [
        13 / 3 * 15 * 0.94**2 + 60 * 1.24**2,
        1.7 * 0.34**2,
        1.5 * 1.7 * 0.34**2,
        0.5 * 1.7 * 0.34**2,
        10 / 3.6 / 0.34,
        math.radians(12),
        math.radians(80),
    ]
    np.testing.assert_allclose(computed, by_hand, rtol=1e-14)
    assert abs(bk.I_BC - 149.690) < 1e-9  # 65 · 0.8836 + 60 · 1.5376
    np.testing.assert_array_equal(bk.ACTIONS, np.array(_ACTIONS))
    assert (bk.GAMMA, bk.NOISE, bk.DT, bk.N_ACTIONS) == (0.99, 0.002, 0.01, 5)


def test_hand_computed_euler_steps():
    zero = np.zeros(4)
    # Torque +2 from upright: only θ̇ moves, by dt T / I_dl.
    s, r, fell = bk.bicycle_step(zero, np.array(4), np.array(0.0))
    np.testing.assert_array_equal(s[[0, 1, 2]], 0.0)
    assert s[3] == pytest.approx(0.01 * 2 / (0.5 * 1.7 * 0.34**2), rel=1e-14) and r == 0.0 and not fell
    # Shifting the centre of mass by d (+ noise) from upright tilts through φ = atan(d / h).
    s, r, _ = bk.bicycle_step(zero, np.array(2), np.array(0.001))
    expected = 0.01 * 75 * 0.94 * 9.82 * math.sin(math.atan(0.021 / 0.94)) / bk.I_BC
    assert s[1] == pytest.approx(expected, rel=1e-13) and s[0] == 0.0 and r == 0.0
    # A tilted bicycle without steering: ω keeps its value (old rate 0), ω̇ grows by dt M h g sin ω / I_bc.
    omega0 = 3 * DEG
    s, r, _ = bk.bicycle_step(np.array([omega0, 0, 0, 0]), np.array(1), np.array(0.0))
    assert s[0] == omega0 and r == 0.0
    assert s[1] == pytest.approx(0.01 * 75 * 0.94 * 9.82 * math.sin(omega0) / bk.I_BC, rel=1e-13)
    # Explicit Euler: angles advance with the *old* rates.
    s, _, _ = bk.bicycle_step(np.array([0.01, 0.5, 0.2, -1.0]), np.array(1), np.array(0.0))
    assert s[0] == 0.01 + 0.01 * 0.5 and s[2] == 0.2 - 0.01
    assert s[3] == pytest.approx(-1.0 - 0.01 * 3 * (10 / 3.6 / 0.34) * 0.5, rel=1e-12)  # I_dv / I_dl = 3


def test_vectorised_step_matches_the_literal_equations():
    rng = np.random.default_rng(0)
    states = _random_states(rng, 300)
    actions = rng.integers(5, size=300)
    eps = rng.uniform(-0.002, 0.002, size=300)
    next_states, rewards, fell = bk.bicycle_step(states, actions, eps)
    assert next_states.shape == (300, 4) and rewards.shape == (300,) and fell.shape == (300,)
    assert next_states.dtype == np.float64 and fell.dtype == bool
    for i in range(300):
        ref_state, ref_reward, ref_fell = literal_step(states[i], actions[i], eps[i])
        np.testing.assert_allclose(next_states[i], ref_state, rtol=1e-12, atol=1e-14, err_msg=str(i))
        assert rewards[i] == pytest.approx(ref_reward, rel=1e-9, abs=1e-9) and fell[i] == ref_fell
    assert fell.any() and not fell.all()


def test_batch_shapes_broadcast_elementwise():
    rng = np.random.default_rng(1)
    states = _random_states(rng, 24).reshape(2, 3, 4, 4)
    actions = rng.integers(5, size=(2, 3, 4))
    eps = rng.uniform(-0.002, 0.002, size=(2, 3, 4))
    batched = bk.bicycle_step(states, actions, eps)
    flat = bk.bicycle_step(states.reshape(-1, 4), actions.reshape(-1), eps.reshape(-1))
    np.testing.assert_array_equal(batched[0].reshape(-1, 4), flat[0])
    np.testing.assert_array_equal(batched[1].reshape(-1), flat[1])


def test_handlebar_is_clipped_at_80_degrees_and_its_rate_zeroed():
    s, _, _ = bk.bicycle_step(np.array([0.0, 0.0, 79.9 * DEG, 1.0]), np.array(4), np.array(0.0))
    assert s[2] == bk.THETA_BOUND and s[3] == 0.0
    s, _, _ = bk.bicycle_step(np.array([0.0, 0.0, -79.9 * DEG, -1.0]), np.array(3), np.array(0.0))
    assert s[2] == -bk.THETA_BOUND and s[3] == 0.0
    # Not passing the bound: the rate is integrated normally.
    s, _, _ = bk.bicycle_step(np.array([0.0, 0.0, 79.0 * DEG, 1.0]), np.array(4), np.array(0.0))
    assert s[2] == 79.0 * DEG + 0.01 and s[3] == pytest.approx(1.0 + 0.01 * 2 / bk.I_DL)


def test_fall_pays_minus_one_and_shaping_rewards_straightening():
    state = np.array([11.9 * DEG, 1.0, 0.0, 0.0])  # ω' = 11.9° + 0.573° > 12°
    s, r, fell = bk.bicycle_step(state, np.array(1), np.array(0.0))
    assert fell and r == -1.0 and s[0] > bk.OMEGA_BOUND
    s, r, fell = bk.bicycle_step(-state, np.array(1), np.array(0.0))
    assert fell and r == -1.0 and s[0] < -bk.OMEGA_BOUND
    # Straightening (|ω| decreases) is rewarded, leaning further is penalised, by 10⁴ |Δω|.
    s, r, fell = bk.bicycle_step(np.array([5 * DEG, -0.3, 0.0, 0.0]), np.array(1), np.array(0.0))
    assert not fell and r == pytest.approx(1e4 * 0.003, rel=1e-9)
    s, r, _ = bk.bicycle_step(np.array([-5 * DEG, -0.3, 0.0, 0.0]), np.array(1), np.array(0.0))
    assert r == pytest.approx(-1e4 * 0.003, rel=1e-9)


def test_mirror_symmetry():
    rng = np.random.default_rng(2)
    states = _random_states(rng, 200)
    actions = rng.integers(5, size=200)
    eps = rng.uniform(-0.002, 0.002, size=200)
    mirror = np.array([2, 1, 0, 4, 3])  # d -> -d, T -> -T
    s1, r1, f1 = bk.bicycle_step(states, actions, eps)
    s2, r2, f2 = bk.bicycle_step(-states, mirror[actions], -eps)
    np.testing.assert_allclose(s2, -s1, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(r2, r1, rtol=1e-9, atol=1e-10)
    np.testing.assert_array_equal(f1, f2)


def test_uncontrolled_fall_from_a_tilt_matches_the_literal_loop():
    env = bk.BicycleEnv(noise=0.0)
    env.reset(options={"state": [1 * DEG, 0, 0, 0]})
    state, n, rewards = np.array([1 * DEG, 0, 0, 0]), 0, []
    while True:
        n += 1
        obs, reward, terminated, truncated, _ = env.step(1)
        state, ref_reward, ref_fell = literal_step(state, 1, 0.0)
        np.testing.assert_allclose(env.state, state, rtol=1e-10, atol=1e-13)
        assert reward == pytest.approx(ref_reward, abs=1e-7) and terminated == ref_fell and not truncated
        rewards.append(reward)
        if terminated:
            break
        assert n < 1000
    assert 50 < n < 300 and obs[0] > 12 * DEG  # falls to the side it leaned to, within a few seconds
    assert rewards[-1] == -1.0 and all(r < 0 for r in rewards[1:-1])  # |ω| grows all the way down


# -------------------------------------------------------------------------------------------------- env
def test_check_env_passes_without_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(bk.BicycleEnv(), skip_render_check=True)
        check_env(bk.BicycleEnv(noise=0.0), skip_render_check=True)
    assert [str(w.message) for w in caught] == []
    env = bk.BicycleEnv()
    assert env.action_space.n == 5 and env.observation_space.shape == (4,)
    assert env.observation_space.dtype == np.float32


def test_reset_default_and_given_states():
    env = bk.BicycleEnv()
    obs, info = env.reset(seed=0)
    assert obs.dtype == np.float32 and np.array_equal(obs, np.zeros(4)) and info == {}
    obs, _ = env.reset(options={"state": (0.1, -0.2, 0.3, 0.4)})
    np.testing.assert_array_equal(obs, np.float32([0.1, -0.2, 0.3, 0.4]))
    assert env.state.dtype == np.float64 and env.state[0] == 0.1
    for bad in ([0, 0, 0], [0, 0, 81 * DEG, 0], [np.nan, 0, 0, 0], [4.0, 0, 0, 0], "abcd"):
        with pytest.raises(ValueError, match="options"):
            env.reset(options={"state": bad})


def test_env_step_replays_bicycle_step_with_its_seeded_noise():
    env = bk.BicycleEnv()
    env.reset(seed=42, options={"state": [0.01, 0.02, 0.03, 0.04]})
    rng, _ = seeding.np_random(42)
    state = np.array([0.01, 0.02, 0.03, 0.04])
    for t in range(30):
        action = t % 5
        obs, reward, terminated, _, _ = env.step(action)
        state, ref_reward, ref_fell = bk.bicycle_step(state, np.asarray(action), rng.uniform(-0.002, 0.002))
        np.testing.assert_array_equal(env.state, state)
        np.testing.assert_array_equal(obs, state.astype(np.float32))
        assert reward == ref_reward and terminated == ref_fell
        assert isinstance(reward, float) and isinstance(terminated, bool)


def test_upright_is_an_equilibrium_without_noise_and_noise_topples_it():
    env = bk.BicycleEnv(noise=0.0)
    env.reset()
    for _ in range(500):
        obs, reward, terminated, _, _ = env.step(1)
        assert not terminated and reward == 0.0
    assert np.array_equal(obs, np.zeros(4))

    def steps_to_fall(seed):
        noisy = bk.BicycleEnv()
        noisy.reset(seed=seed)
        for t in range(1, 5000):
            if noisy.step(1)[2]:
                return t
        return None

    falls = [steps_to_fall(seed) for seed in (0, 1, 2)]
    assert all(f is not None for f in falls) and len(set(falls)) > 1
    assert steps_to_fall(1) == falls[1]


def test_step_validates_action_and_requires_reset():
    env = bk.BicycleEnv()
    with pytest.raises(RuntimeError):
        env.step(0)
    env.reset(seed=0)
    for bad in (5, -1, 1.5):
        with pytest.raises(ValueError, match="action"):
            env.step(bad)
    with pytest.raises(ValueError):
        bk.BicycleEnv(noise=-0.1)


# ---------------------------------------------------------------------------------------------- dataset
def _episodes(data):
    """Splits a dataset into episodes: within an episode, next_state[i] == state[i + 1] exactly."""
    chained = np.all(data.next_state[:-1] == data.state[1:], axis=1)
    return np.split(np.arange(len(data)), np.flatnonzero(~chained) + 1)


def test_dataset_shapes_episodes_and_start_box():
    data = bk.collect_dataset(seed=0)
    n = 70_000
    assert len(data) == n and data.state.shape == (n, 4) and data.next_state.shape == (n, 4)
    assert data.state.dtype == np.float32 and data.action.dtype == np.int32
    assert data.reward.dtype == np.float32 and data.done.dtype == np.float32
    episodes = _episodes(data)
    lengths = np.array([len(e) for e in episodes])
    assert lengths.max() == 20 and np.mean(lengths[:-1] == 20) > 0.99  # almost never falls near 0
    for e in episodes[:-1]:  # a short episode ended with a fall
        assert len(e) == 20 or data.done[e[-1]] == 1.0
    starts = data.state[[e[0] for e in episodes]]
    scale = np.float32(bk.START_SCALE)
    assert np.all(np.abs(starts) <= scale) and np.all(np.abs(starts).max(axis=0) > 0.95 * scale)
    counts = np.bincount(data.action, minlength=5)
    assert counts.shape == (5,) and np.all(np.abs(counts - n / 5) < 0.03 * n / 5)  # uniform actions


def test_dataset_transitions_follow_the_dynamics_with_small_noise():
    data = bk.collect_dataset(seed=1, n_transitions=4000)
    s = data.state.astype(np.float64)
    s2 = data.next_state.astype(np.float64)
    a = data.action
    # The noise-free parts of the step: ω and θ advance with the old rates; θ̇ gets the torque.
    np.testing.assert_allclose(s2[:, 0], s[:, 0] + 0.01 * s[:, 1], atol=1e-7)
    np.testing.assert_allclose(s2[:, 2], s[:, 2] + 0.01 * s[:, 3], atol=1e-7)
    torque = bk.ACTIONS[a, 1]
    np.testing.assert_allclose(
        s2[:, 3], s[:, 3] + 0.01 * (torque - bk.I_DV * bk.SIGMA_DOT * s[:, 1]) / bk.I_DL, atol=1e-5
    )
    # ω̇' lies between its values for the extreme noises ±0.002, spread across that bracket.
    low = bk.bicycle_step(s, a, np.full(len(a), -0.002))[0][:, 1]
    high = bk.bicycle_step(s, a, np.full(len(a), 0.002))[0][:, 1]
    fraction = (s2[:, 1] - low) / (high - low)
    assert np.all(fraction > -1e-2) and np.all(fraction < 1 + 1e-2)
    assert fraction.min() < 0.02 and fraction.max() > 0.98 and abs(fraction.mean() - 0.5) < 0.03
    not_fallen = data.done == 0.0
    np.testing.assert_allclose(
        data.reward[not_fallen], 1e4 * (np.abs(s[not_fallen, 0]) - np.abs(s2[not_fallen, 0])), atol=2e-3
    )


def test_dataset_falls_pay_minus_one_and_end_their_episode():
    data = bk.collect_dataset(seed=2, n_transitions=3000, start_scale=(11 * DEG, 0.5, 0.3, 1.0))
    fell = data.done == 1.0
    assert fell.sum() > 20
    np.testing.assert_array_equal(data.reward[fell], -1.0)
    assert np.all(data.reward[~fell] != -1.0) and set(np.unique(data.done)) == {0.0, 1.0}
    assert np.all(np.abs(data.next_state[fell, 0]) > np.float32(12 * DEG) - 1e-7)
    assert np.all(np.abs(data.next_state[~fell, 0]) <= np.float32(12 * DEG))
    for e in _episodes(data):
        assert len(e) <= 20 and not fell[e[:-1]].any()  # a fall can only be the last step
        assert fell[e[-1]] or len(e) == 20 or e[-1] == len(data) - 1


def test_dataset_is_reproducible_from_the_seed():
    a, b, c = (bk.collect_dataset(seed=s, n_transitions=500) for s in (7, 7, 8))
    for name in ("state", "action", "reward", "next_state", "done"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.state, c.state) and not np.array_equal(a.action, c.action)
    assert len(bk.collect_dataset(seed=0, n_transitions=45, episode_length=7)) == 45
    with pytest.raises(ValueError):
        bk.collect_dataset(seed=0, n_transitions=0)
    with pytest.raises(ValueError):
        bk.collect_dataset(seed=0, start_scale=(0.1, 0.1, 90 * DEG, 0.1))
