"""Tests of the gymnasium -> TF-Agents adapter: specs, step-by-step agreement with gymnasium, termination vs
truncation, auto-reset, seeding, and the adapter under TFPyEnvironment, drivers and batched/parallel envs."""

import contextlib
import functools
from typing import Any

import gymnasium
import numpy as np
import pytest
import tensorflow as tf
from gymnasium import spaces
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import (
    batched_py_environment,
    parallel_py_environment,
    tf_py_environment,
    utils,
)
from tf_agents.metrics import tf_metrics
from tf_agents.policies import random_tf_policy
from tf_agents.specs import array_spec
from tf_agents.system import system_multiprocessing
from tf_agents.trajectories import time_step as ts

import pbo_tf  # noqa: F401  (registers the ids)
from pbo_tf import envs
from pbo_tf.envs.tf_agents_adapter import GymnasiumPyEnvironment, space_to_spec, to_tf_agents

FIRST, MID, LAST = (int(t) for t in (ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST))


def _make_or_skip(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """``envs.make``, skipping the test when an optional dependency of the environment is missing."""
    try:
        return envs.make(env_id, **kwargs)
    except gymnasium.error.DependencyNotInstalled as err:  # gymnasium's box2d package imports pygame
        pytest.skip(f"{env_id} needs a missing dependency: {err}")


class _CountdownEnv(gymnasium.Env):
    """Deterministic test env: the observation counts steps; terminates at ``terminate_at`` steps, and may
    also report ``truncated`` at ``truncate_at`` steps. Reward = 10 * step + action."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, terminate_at: int = 3, truncate_at: int | None = None, render_mode: str | None = None):
        self.observation_space = spaces.Discrete(100)
        self.action_space = spaces.Discrete(3)
        self.terminate_at, self.truncate_at = terminate_at, truncate_at
        self.render_mode = render_mode
        self.count, self.closed, self.actions = 0, False, []

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.count = 0
        return self.count, {"reset": True}

    def step(self, action):
        assert isinstance(action, int)  # the adapter hands Discrete actions over as Python ints
        self.actions.append(action)
        self.count += 1
        terminated = self.count >= self.terminate_at
        truncated = self.truncate_at is not None and self.count >= self.truncate_at
        return self.count, 10.0 * self.count + action, terminated, truncated, {"count": self.count}

    def render(self):
        return np.full((2, 3, 3), self.count, dtype=np.uint8)

    def close(self):
        self.closed = True


def _tf_agents_action(spec: array_spec.BoundedArraySpec, gym_action: Any) -> np.ndarray:
    return np.asarray(gym_action, dtype=spec.dtype).reshape(spec.shape)


def _assert_obs_equal(got: np.ndarray, expected: Any, spec: array_spec.ArraySpec) -> None:
    assert got.dtype == spec.dtype and got.shape == spec.shape
    np.testing.assert_array_equal(got, np.asarray(expected, dtype=spec.dtype).reshape(spec.shape))


# ---------------------------------------------------------------------------------------------- specs


def test_space_to_spec_dtypes_shapes_and_bounds():
    s = space_to_spec(spaces.Discrete(5), "a")
    assert (s.dtype, s.shape, int(s.minimum), int(s.maximum), s.name) == (np.int32, (), 0, 4, "a")
    s = space_to_spec(spaces.Discrete(4, start=-1))
    assert (int(s.minimum), int(s.maximum)) == (-1, 2)
    box = spaces.Box(low=np.array([-1.0, -np.inf]), high=np.array([2.0, np.inf]), dtype=np.float64)
    s = space_to_spec(box)
    assert s.dtype == np.float32 and s.shape == (2,)
    big = np.finfo(np.float32).max  # BoundedArraySpec stores infinite bounds as the dtype's extremes
    np.testing.assert_array_equal(s.minimum, np.array([-1.0, -big], np.float32))
    np.testing.assert_array_equal(s.maximum, np.array([2.0, big], np.float32))
    s = space_to_spec(spaces.Box(0, 255, shape=(2, 3), dtype=np.uint8))
    assert s.dtype == np.uint8 and s.shape == (2, 3) and s.maximum.max() == 255
    s = space_to_spec(spaces.MultiDiscrete([3, 5]))
    assert s.dtype == np.int32 and s.shape == (2,)
    np.testing.assert_array_equal(s.maximum, [2, 4])
    s = space_to_spec(spaces.MultiBinary(3))
    assert s.dtype == np.int32 and s.shape == (3,) and int(s.maximum) == 1
    nested_space = spaces.Dict({"x": spaces.Discrete(2), "y": spaces.Tuple((spaces.MultiBinary(2),))})
    nested = space_to_spec(nested_space)
    assert set(nested) == {"x", "y"} and isinstance(nested["y"], tuple) and nested["y"][0].shape == (2,)
    with pytest.raises(TypeError, match="unsupported"):
        space_to_spec(spaces.Text(5))


def test_specs_of_chain_walk_and_cartpole():
    env = to_tf_agents(envs.ENV_IDS["chain_walk"])
    assert env.observation_spec() == array_spec.BoundedArraySpec((), np.int32, 0, 19, "observation")
    assert env.action_spec() == array_spec.BoundedArraySpec((), np.int32, 0, 1, "action")
    assert env.reward_spec() == array_spec.ArraySpec((), np.float32, "reward")
    env = to_tf_agents("CartPole-v1")
    assert env.observation_spec().dtype == np.float32 and env.observation_spec().shape == (4,)
    high = np.minimum(env.gym_env.observation_space.high, np.finfo(np.float32).max)
    np.testing.assert_array_equal(env.observation_spec().maximum, high)
    assert env.action_spec() == array_spec.BoundedArraySpec((), np.int32, 0, 1, "action")


# ------------------------------------------------------------------------------------------- validate

VALIDATED_IDS = [*envs.known_ids(), "CartPole-v1", "LunarLander-v3"]


@pytest.mark.parametrize("env_id", VALIDATED_IDS)
def test_validate_py_environment(env_id):
    _make_or_skip(env_id).close()
    env = to_tf_agents(env_id, seed=0, max_episode_steps=12)
    utils.validate_py_environment(env, episodes=3)
    env.close()


# --------------------------------------------------------------------- step by step against gymnasium


def _compare_with_gymnasium(env_id: str, seed: int, n_steps: int, max_episode_steps: int, discount: float):
    """Steps the adapter and a raw gymnasium env with the same seed and actions; returns #episodes ended."""
    raw = _make_or_skip(env_id, max_episode_steps=max_episode_steps)
    env = to_tf_agents(env_id, seed=seed, discount=discount, max_episode_steps=max_episode_steps)
    obs_spec, act_spec = env.observation_spec(), env.action_spec()
    sampler = raw.action_space
    sampler.seed(seed + 1)

    expected_obs, _ = raw.reset(seed=seed)
    time_step = env.reset()
    assert int(time_step.step_type) == FIRST and float(time_step.reward) == 0.0
    assert float(time_step.discount) == 1.0
    _assert_obs_equal(time_step.observation, expected_obs, obs_spec)
    episodes = 0
    for _ in range(n_steps):
        if time_step.is_last():
            expected_obs, _ = raw.reset()  # no seed: continues the env's RNG
            time_step = env.step(_tf_agents_action(act_spec, sampler.sample()))  # action ignored
            assert int(time_step.step_type) == FIRST and float(time_step.discount) == 1.0
            assert float(time_step.reward) == 0.0
            _assert_obs_equal(time_step.observation, expected_obs, obs_spec)
            continue
        action = sampler.sample()
        expected_obs, reward, terminated, truncated, _ = raw.step(action)
        time_step = env.step(_tf_agents_action(act_spec, action))
        _assert_obs_equal(time_step.observation, expected_obs, obs_spec)
        assert time_step.reward.dtype == np.float32 and time_step.reward.shape == ()
        assert float(time_step.reward) == np.float32(reward)
        assert time_step.discount.dtype == np.float32
        if terminated:
            assert int(time_step.step_type) == LAST and float(time_step.discount) == 0.0
        elif truncated:
            assert int(time_step.step_type) == LAST and float(time_step.discount) == np.float32(discount)
        else:
            assert int(time_step.step_type) == MID and float(time_step.discount) == np.float32(discount)
        episodes += bool(terminated or truncated)
    raw.close()
    env.close()
    return episodes


@pytest.mark.parametrize("env_id", [*envs.known_ids(), "CartPole-v1", "LunarLander-v3"])
def test_hand_stepped_episodes_match_gymnasium(env_id):
    episodes = _compare_with_gymnasium(env_id, seed=7, n_steps=60, max_episode_steps=15, discount=0.97)
    assert episodes >= 3  # the comparison crossed several resets


def test_same_seed_same_episodes_different_seed_different_start():
    def rollout(seed):
        env = to_tf_agents("CartPole-v1", seed=seed, max_episode_steps=10)
        out = [env.reset()]
        out += [env.step(np.int32(t % 2)) for t in range(40)]
        return np.stack([t.observation for t in out]), np.array([t.step_type for t in out])

    obs_a, types_a = rollout(3)
    obs_b, types_b = rollout(3)
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(types_a, types_b)
    firsts = np.flatnonzero(types_a == FIRST)
    assert len(firsts) >= 3 and not np.array_equal(obs_a[firsts[0]], obs_a[firsts[1]])  # RNG continues
    obs_c, _ = rollout(4)
    assert not np.array_equal(obs_a[0], obs_c[0])


def test_seed_method_reseeds_next_reset():
    env = to_tf_agents("CartPole-v1", seed=1)
    first = env.reset().observation
    assert not np.array_equal(env.reset().observation, first)
    env.seed(1)
    np.testing.assert_array_equal(env.reset().observation, first)


def test_seed_seeds_the_action_space():
    a = to_tf_agents("CartPole-v1", seed=5).gym_env.action_space
    b = to_tf_agents("CartPole-v1", seed=5).gym_env.action_space
    assert [a.sample() for _ in range(20)] == [b.sample() for _ in range(20)]


# ---------------------------------------------------------------------- termination / truncation / reset


def test_cartpole_termination_has_zero_discount():
    env = to_tf_agents("CartPole-v1", seed=0, discount=0.9)
    env.reset()
    steps = []
    while not steps or not steps[-1].is_last():
        steps.append(env.step(np.int32(0)))  # always push left: the pole falls within ~10 steps
        assert len(steps) < 100
    assert all(int(t.step_type) == MID and float(t.discount) == np.float32(0.9) for t in steps[:-1])
    assert float(steps[-1].discount) == 0.0 and float(steps[-1].reward) == 1.0
    cart_x, _, angle, _ = steps[-1].observation
    assert abs(angle) > 0.2095 or abs(cart_x) > 2.4  # really a terminal state, not a time limit


@pytest.mark.parametrize("discount", [None, 0.5])
def test_cartpole_truncation_bootstraps(discount):
    env = to_tf_agents("CartPole-v1", seed=0, discount=discount, max_episode_steps=5)
    env.reset()
    steps = [env.step(np.int32(t % 2)) for t in range(5)]
    assert [int(t.step_type) for t in steps] == [MID] * 4 + [LAST]
    expected = 1.0 if discount is None else discount
    assert [float(t.discount) for t in steps] == [expected] * 5


def test_terminated_and_truncated_together_is_a_termination():
    env = to_tf_agents(_CountdownEnv(terminate_at=3, truncate_at=3))
    env.reset()
    steps = [env.step(np.int32(1)) for _ in range(3)]
    assert [int(t.step_type) for t in steps] == [MID, MID, LAST]
    assert float(steps[-1].discount) == 0.0


def test_auto_reset_after_last_ignores_the_action_and_drivers_do_not_spin():
    gym_env = _CountdownEnv(terminate_at=2)
    env = to_tf_agents(gym_env)
    first = env.step(np.int32(2))  # a step before any reset resets
    assert int(first.step_type) == FIRST and int(first.observation) == 0 and gym_env.actions == []
    seen = [first] + [env.step(np.int32(t % 3)) for t in range(8)]
    assert [int(t.step_type) for t in seen] == [FIRST, MID, LAST] * 3
    assert [int(t.observation) for t in seen] == [0, 1, 2] * 3
    assert [float(t.reward) for t in seen] == [0.0, 10.0, 21.0] * 3
    assert gym_env.actions == [0, 1, 0, 1, 0, 1]  # the actions of the reset steps (2, 2) never reached it
    assert env.get_info() == {"count": 2}
    assert env.current_time_step() is seen[-1]


# ---------------------------------------------------------------------- construction, render, close


def test_instance_callable_and_time_limit():
    gym_env = _CountdownEnv(terminate_at=50)
    env = to_tf_agents(gym_env, max_episode_steps=4)
    assert isinstance(env, GymnasiumPyEnvironment) and env.gym_env.unwrapped is gym_env
    env.reset()
    steps = [env.step(np.int32(0)) for _ in range(4)]
    assert int(steps[-1].step_type) == LAST and float(steps[-1].discount) == 1.0
    env = to_tf_agents(_CountdownEnv, terminate_at=2)  # callable with constructor kwargs
    assert isinstance(env.gym_env, _CountdownEnv)
    env.reset()
    assert env.step(np.int32(0)).is_mid() and env.step(np.int32(0)).is_last()
    with pytest.raises(ValueError, match="need an id or a callable"):
        to_tf_agents(_CountdownEnv(), render_mode="rgb_array")
    with pytest.raises(ValueError, match="discount"):
        to_tf_agents(_CountdownEnv(), discount=1.5)
    with pytest.raises(ValueError, match="max_episode_steps"):
        to_tf_agents(_CountdownEnv(), max_episode_steps=0)
    with pytest.raises(TypeError, match="gymnasium.Env"):
        to_tf_agents(lambda: "not an env")
    with pytest.raises(ValueError, match="unknown environment id"):
        to_tf_agents("pbo_tf/NoSuchEnv-v0")
    env = to_tf_agents(envs.ENV_IDS["chain_walk"], max_episode_steps=3)
    env.reset()
    assert [int(env.step(np.int32(1)).step_type) for _ in range(3)] == [MID, MID, LAST]


def test_render_and_close():
    gym_env = _CountdownEnv(render_mode="rgb_array")
    env = to_tf_agents(gym_env)
    env.reset()
    env.step(np.int32(0))
    np.testing.assert_array_equal(env.render(), np.full((2, 3, 3), 1, np.uint8))
    with pytest.raises(ValueError, match="human"):
        env.render("human")
    with pytest.raises(NotImplementedError):
        to_tf_agents(_CountdownEnv()).render()
    with env:
        pass
    assert gym_env.closed


# ---------------------------------------------------------------------------- TF-Agents machinery


def _unbatch(x: tf.Tensor) -> np.ndarray:
    return x.numpy()[0]


def test_dynamic_step_driver_counts_episodes_under_tf_py_environment():
    # Eager driver: ~0.05 s of CPU per step; tracing it with tf.function costs ~30 s of CPU here instead.
    seed, num_steps, limit = 11, 120, 15
    py_env = to_tf_agents("CartPole-v1", seed=seed, max_episode_steps=limit)
    tf_env = tf_py_environment.TFPyEnvironment(py_env)
    assert tf_env.action_spec().dtype == tf.int32 and tf_env.time_step_spec().observation.dtype == tf.float32
    policy = random_tf_policy.RandomTFPolicy(tf_env.time_step_spec(), tf_env.action_spec())
    n_episodes, n_steps = tf_metrics.NumberOfEpisodes(), tf_metrics.EnvironmentSteps()
    recorded = []
    driver = dynamic_step_driver.DynamicStepDriver(
        tf_env,
        policy,
        observers=[n_episodes, n_steps, lambda traj: recorded.append(tf.nest.map_structure(_unbatch, traj))],
        num_steps=num_steps,
    )
    driver.run()
    assert int(n_steps.result()) == num_steps

    # Replay the recorded actions on raw gymnasium CartPole with the same seed.
    raw = gymnasium.make("CartPole-v1", max_episode_steps=limit)
    obs, _ = raw.reset(seed=seed)
    episodes = steps = 0
    for traj in recorded:
        np.testing.assert_array_equal(traj.observation, obs)
        if traj.step_type == LAST:  # boundary: the driver's step was a reset
            assert traj.next_step_type == FIRST
            obs, _ = raw.reset()
            continue
        obs, reward, terminated, truncated, _ = raw.step(int(traj.action))
        steps += 1
        episodes += terminated or truncated
        assert float(traj.reward) == reward
        assert traj.next_step_type == (LAST if terminated or truncated else MID)
        assert float(traj.discount) == (0.0 if terminated else 1.0)
    assert steps == num_steps
    assert int(n_episodes.result()) == episodes >= num_steps // limit


def _step_batched_against_singles(batched, seeds, n_steps):
    singles = [to_tf_agents("CartPole-v1", seed=s, max_episode_steps=8) for s in seeds]
    rng = np.random.default_rng(0)
    time_step = batched.reset()
    expected = [e.reset() for e in singles]
    lasts = np.zeros(len(seeds), int)
    for _ in range(n_steps):
        for i, e in enumerate(expected):
            np.testing.assert_array_equal(time_step.observation[i], e.observation)
            assert time_step.step_type[i] == e.step_type and time_step.discount[i] == e.discount
            assert time_step.reward[i] == e.reward
        lasts += time_step.step_type == LAST
        actions = rng.integers(0, 2, size=len(seeds)).astype(np.int32)
        time_step = batched.step(actions)
        expected = [e.step(a) for e, a in zip(singles, actions, strict=True)]
    assert np.all(lasts >= 2)  # each sub-environment went through auto-resets
    assert not np.array_equal(time_step.observation[0], time_step.observation[1])  # seeds differ


def test_batched_py_environment_matches_single_envs():
    seeds = (0, 1)
    batched = batched_py_environment.BatchedPyEnvironment(
        [to_tf_agents("CartPole-v1", seed=s, max_episode_steps=8) for s in seeds], multithreading=False
    )
    _step_batched_against_singles(batched, seeds, 30)


def test_parallel_py_environment_matches_single_envs():
    with contextlib.suppress(ValueError):  # ValueError: already initialized
        system_multiprocessing.enable_interactive_mode()
    seeds = (0, 1)
    ctors = [functools.partial(to_tf_agents, "CartPole-v1", seed=s, max_episode_steps=8) for s in seeds]
    parallel = parallel_py_environment.ParallelPyEnvironment(ctors, start_serially=True)
    try:
        assert parallel.batch_size == 2 and parallel.action_spec().dtype == np.int32
        _step_batched_against_singles(parallel, seeds, 30)
    finally:
        parallel.close()
