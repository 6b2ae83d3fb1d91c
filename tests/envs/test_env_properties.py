"""Property tests of the environments (hypothesis): for random seeds, start states and action sequences,
every observation stays in the observation space, rewards stay in their range (and equal the model where
there is one), and episodes end as specified: chain-walk and LQR never terminate and are truncated at the
registered limit; car-on-hill terminates exactly when it leaves the state space (reward ±1, else 0);
bicycle terminates exactly when it falls (|ω| > 12°, reward −1)."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pbo_tf.envs import ENV_IDS, bicycle, car_on_hill, chain_walk, lqr, make

SEEDS = st.integers(0, 2**31 - 1)


def _episode(env_id, seed, actions, limit, options=None):
    """Plays ``actions`` (cycled) until the episode ends; returns the steps and the first observation."""
    env = make(env_id, max_episode_steps=limit)
    obs, _ = env.reset(seed=seed, options=options)
    first, steps = obs, []
    for t in range(limit + 1):
        action = actions[t % len(actions)]
        obs, reward, terminated, truncated, _ = env.step(action)
        steps.append((action, obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return env, first, steps


@given(SEEDS, st.lists(st.integers(0, 1), min_size=1, max_size=10), st.integers(1, 30))
def test_chain_walk_stays_on_the_chain_pays_its_model_and_is_cut_at_the_limit(seed, actions, limit):
    env, state, steps = _episode(ENV_IDS["chain_walk"], seed, actions, limit)
    for action, obs, reward, terminated, _ in steps:
        assert env.observation_space.contains(obs)
        assert reward == env.unwrapped.R[state * chain_walk.N_ACTIONS + action] and reward in (0.0, 1.0)
        assert not terminated
        state = obs
    assert len(steps) == limit and steps[-1][4]  # truncated exactly at the limit


@given(SEEDS, st.lists(st.floats(-20.0, 20.0, allow_nan=False), min_size=1, max_size=10), st.integers(1, 30))
def test_lqr_rewards_are_its_negative_definite_quadratic_and_it_never_terminates(seed, actions, limit):
    env, obs, steps = _episode(ENV_IDS["lqr"], seed, [np.array([a], np.float32) for a in actions], limit)
    s = float(obs[0])
    for action, obs, reward, terminated, _ in steps:
        a = float(np.clip(action[0], lqr.ACTION_LOW, lqr.ACTION_HIGH))  # out-of-range actions are clipped
        assert env.observation_space.contains(obs) and np.isfinite(obs).all()
        np.testing.assert_allclose(reward, lqr.reward(s, a), rtol=1e-6, atol=1e-6)
        assert reward <= 1e-9  # Q s² + 2 S s a + R a² is negative definite
        assert not terminated
        s = lqr.next_state(s, a)
    assert len(steps) == limit and steps[-1][4]


@given(
    SEEDS,
    st.floats(-1.0, 1.0),
    st.floats(-3.0, 3.0),
    st.lists(st.integers(0, 1), min_size=1, max_size=8),
    st.integers(1, 60),
)
def test_car_on_hill_ends_exactly_when_it_leaves_the_state_space(seed, p, v, actions, limit):
    """On the float64 state after every step: terminal exactly outside ``[-1, 1] x [-3, 3]``, reward −1
    for ``p < −1`` or ``|v| > 3``, +1 for the top (``p > 1``, speed within bounds), 0 inside; the
    observation is that state in float32."""
    env = make(ENV_IDS["car_on_hill"], max_episode_steps=limit)
    obs, _ = env.reset(seed=seed, options={"state": (p, v)})
    assert env.observation_space.contains(obs)
    for t in range(limit + 1):
        obs, reward, terminated, truncated, _ = env.step(actions[t % len(actions)])
        pos, vel = env.unwrapped.state
        crash = pos < -car_on_hill.MAX_POSITION or abs(vel) > car_on_hill.MAX_VELOCITY
        top = pos > car_on_hill.MAX_POSITION and not crash
        assert env.observation_space.contains(obs)
        np.testing.assert_array_equal(obs, np.array([pos, vel], np.float32))
        assert terminated == (crash or top)
        assert reward == (-1.0 if crash else 1.0 if top else 0.0)
        if terminated or truncated:
            break
    assert terminated or (t + 1 == limit and truncated)


@given(SEEDS, st.lists(st.integers(0, bicycle.N_ACTIONS - 1), min_size=1, max_size=10), st.integers(1, 80))
def test_bicycle_ends_exactly_when_it_falls(seed, actions, limit):
    env, obs, steps = _episode(ENV_IDS["bicycle"], seed, actions, limit)
    assert env.observation_space.contains(obs)
    for _, obs, reward, terminated, _ in steps:
        assert env.observation_space.contains(obs) and np.isfinite(reward)
        assert (reward == bicycle.FALL_REWARD) == terminated
        if terminated:  # (the observation is the float32 of the float64 state: allow its rounding)
            assert abs(obs[0]) >= bicycle.OMEGA_BOUND - 1e-6
        else:
            assert abs(obs[0]) <= bicycle.OMEGA_BOUND + 1e-6
    last_terminated, last_truncated = steps[-1][3], steps[-1][4]
    assert last_terminated or (len(steps) == limit and last_truncated)
