"""`GymOnlineEnv`: any gymnasium id with discrete actions and vector observations, its Q network's size and
input scaling read from the spaces, the ids it refuses, and its greedy evaluation against a hand-stepped
gymnasium loop."""

import re

import gin
import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from pbo_tf.envs import registry
from pbo_tf.envs.gym.online import GymOnlineEnv, box_scaling, env_name
from pbo_tf.q import PerActionMLPQ
from tests.experiments import ground_truth


def _first_line(error) -> str:
    return str(error.value).splitlines()[0]  # (gin adds a line naming the configurable)


def test_cartpole_scales_its_two_bounded_dims_and_leaves_the_velocities_raw():
    env = GymOnlineEnv(gym_id="CartPole-v1", hidden=[8])
    space = gymnasium.make("CartPole-v1").observation_space
    assert env.state_dim == 4 and env.name == "gym_CartPole-v1" and env.env_id == "CartPole-v1"
    assert env.train_max_episode_steps == env.eval_max_steps == 500  # the id's registered limit
    q = env.q_family()
    assert q.d == (4 + 1) * 8 + 8 + 8 + 1  # one scalar action input: the unscaled family's layout
    np.testing.assert_array_equal(q.action_values[:, 0], [0.0, 1.0])  # the index, as one scalar
    bounded = np.isfinite(space.low) & np.isfinite(space.high)
    assert bounded.tolist() == [True, False, True, False]  # position and angle; the velocities are inf
    # position in [-4.8, 4.8] and angle in [-0.419, 0.419] rad onto [-1, 1]: shift 0, scale 2 / width
    np.testing.assert_array_equal(q.state_shift, [0.0, 0.0, 0.0, 0.0])
    want_scale = np.array([2.0 / (2.0 * 4.8), 1.0, 2.0 / (2.0 * 0.41887903), 1.0], np.float32)
    np.testing.assert_allclose(q.state_scale, want_scale, rtol=1e-6)
    assert q.state_scale[1] == q.state_scale[3] == 1.0
    ends = (np.stack([space.low, space.high]) - q.state_shift) * q.state_scale
    np.testing.assert_allclose(ends[:, bounded], [[-1.0, -1.0], [1.0, 1.0]], rtol=1e-6)
    # scaling off: the raw observations
    raw = GymOnlineEnv(gym_id="CartPole-v1", hidden=[8], scale_observations=False).q_family()
    assert not raw.scales_inputs and raw.d == q.d


def test_per_action_outputs_give_the_state_alone_in_and_one_output_per_action():
    env = GymOnlineEnv(gym_id="CartPole-v1", hidden=[120, 84], per_action_outputs=True)
    q = env.q_family()
    assert isinstance(q, PerActionMLPQ) and q.n_actions == 2
    assert q.d == (4 * 120 + 120) + (120 * 84 + 84) + (84 * 2 + 2)  # 10_934
    want_scale = np.array([2.0 / (2.0 * 4.8), 1.0, 2.0 / (2.0 * 0.41887903), 1.0], np.float32)
    np.testing.assert_allclose(q.state_scale, want_scale, rtol=1e-6)  # the same input scaling
    acrobot = GymOnlineEnv(gym_id="Acrobot-v1", hidden=[4], per_action_outputs=True).q_family()
    assert acrobot.n_actions == 3 and acrobot.d == (6 * 4 + 4) + (4 * 3 + 3)
    states = np.zeros((2, 6), np.float32)
    assert acrobot.q_all(acrobot.initial_params(1, 0), states).shape == (1, 2, 3)
    # leaky hidden units: the family's own, the rest (size, input scaling) unchanged
    leaky = GymOnlineEnv(
        gym_id="CartPole-v1", hidden=[120, 84], per_action_outputs=True, q_negative_slope=0.1
    )
    leaky_q = leaky.q_family()
    assert (leaky_q.negative_slope, q.negative_slope, leaky_q.d) == (0.1, 0.0, q.d)
    np.testing.assert_allclose(leaky_q.state_scale, want_scale, rtol=1e-6)


def test_asymmetric_and_fully_bounded_spaces():
    mountain_car = GymOnlineEnv(gym_id="MountainCar-v0", hidden=[4]).q_family()  # [-1.2, 0.6] x [-0.07, 0.07]
    np.testing.assert_allclose(mountain_car.state_shift, [-0.3, 0.0], atol=1e-7)
    np.testing.assert_allclose(mountain_car.state_scale, [2.0 / 1.8, 2.0 / 0.14], rtol=1e-6)
    acrobot = GymOnlineEnv(gym_id="Acrobot-v1", hidden=[4], action_values=[-1.0, 0.0, 1.0])
    q = acrobot.q_family()
    assert acrobot.state_dim == 6 and acrobot.name == "gym_Acrobot-v1"
    np.testing.assert_array_equal(q.action_values[:, 0], [-1.0, 0.0, 1.0])
    # cos/sin in [-1, 1] (unchanged), angular velocities in [-4π, 4π] and [-9π, 9π]
    np.testing.assert_allclose(q.state_scale, [1, 1, 1, 1, 1 / (4 * np.pi), 1 / (9 * np.pi)], rtol=1e-6)
    np.testing.assert_array_equal(q.state_shift, np.zeros(6))
    # float32's largest value stands for "unbounded" in some spaces; a degenerate dim is left alone too
    big = np.finfo(np.float32).max
    shift, scale = box_scaling([-big, 1.0, 0.0], [big, 1.0, 4.0])
    np.testing.assert_array_equal(shift, [0.0, 0.0, 2.0])
    np.testing.assert_array_equal(scale, [1.0, 1.0, 0.5])
    assert (
        env_name("ALE/Pong-v5") == "gym_ALE_Pong-v5"
        and env_name("my.module:Env-v0") == "gym_my.module_Env-v0"
    )


class _ImageEnv(gymnasium.Env):
    observation_space = spaces.Box(0, 255, (4, 4, 3), np.uint8)
    action_space = spaces.Discrete(2)


class _ShiftedActionsEnv(gymnasium.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(3, start=1)


class _UnlimitedEnv(gymnasium.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)


@pytest.fixture
def custom_ids():
    ids = {
        "image": ("pbo_tf_test/TinyImage-v0", _ImageEnv, 10),
        "shifted": ("pbo_tf_test/ShiftedActions-v0", _ShiftedActionsEnv, 10),
        "unlimited": ("pbo_tf_test/Unlimited-v0", _UnlimitedEnv, None),
    }
    for gym_id, cls, limit in ids.values():
        gymnasium.register(id=gym_id, entry_point=cls, max_episode_steps=limit)
    yield {key: value[0] for key, value in ids.items()}
    for gym_id, _, _ in ids.values():
        gymnasium.registry.pop(gym_id)


def test_the_ids_it_cannot_run_are_refused_in_one_line_naming_the_id_and_the_space(custom_ids):
    box = r"got Box\("
    cases = [
        (
            "Pendulum-v1",
            {},
            r"^Pendulum-v1: GymOnlineEnv needs a Discrete action space .*" + box + r"-2\.0, 2\.0",
        ),
        ("MountainCarContinuous-v0", {}, r"^MountainCarContinuous-v0: .*Discrete action .*" + box + r"-1\.0"),
        (
            custom_ids["image"],
            {},
            r"^pbo_tf_test/TinyImage-v0: GymOnlineEnv needs vector observations \(a 1-D Box\), "
            + box
            + r"0, 255, \(4, 4, 3\), uint8\)$",
        ),
        (
            "FrozenLake-v1",
            {},
            r"^FrozenLake-v1: .*needs vector observations \(a 1-D Box\), got Discrete\(16\)$",
        ),
        (
            custom_ids["shifted"],
            {},
            r"^pbo_tf_test/ShiftedActions-v0: .*starting at 0 .*got Discrete\(3, start=1\)$",
        ),
        (
            "Acrobot-v1",
            dict(action_values=[0.0, 1.0]),
            r"^Acrobot-v1 has 3 actions \(Discrete\(3\)\) but action_values has shape \[2\]",
        ),
        (
            custom_ids["unlimited"],
            {},
            r"^pbo_tf_test/Unlimited-v0 registers no episode limit: bind "
            r"GymOnlineEnv\.train_max_episode_steps$",
        ),
        (
            "CartPole-v1",
            dict(q_negative_slope=-0.1),
            r"^CartPole-v1: GymOnlineEnv.q_negative_slope must be in \[0, 1\) \(0: ReLU\), got -0.1$",
        ),
        ("CartPole-v1", dict(main_metric="J"), r"^main_metric must be one of \[.*'return'.*\], got 'J'$"),
        (
            "Acrobot-v1",
            dict(per_action_outputs=True, action_values=[-1.0, 0.0, 1.0]),
            r"^Acrobot-v1: GymOnlineEnv.action_values encodes .*with per_action_outputs the network "
            r"takes the state alone",
        ),
        ("NoSuchEnv-v0", {}, r"^unknown environment id 'NoSuchEnv-v0'"),
    ]
    for gym_id, kwargs, message in cases:
        with pytest.raises(ValueError) as error:
            GymOnlineEnv(gym_id=gym_id, **kwargs)
        assert re.search(message, _first_line(error)), (gym_id, _first_line(error))
    # an id without a registered limit runs once both cuts are bound
    env = GymOnlineEnv(gym_id=custom_ids["unlimited"], train_max_episode_steps=7, eval_max_steps=9)
    assert (env.train_max_episode_steps, env.eval_max_steps) == (7, 9)


def test_the_registry_names_it_and_gin_chooses_the_id():
    assert registry.entry("gym").online == "pbo_tf.envs.gym.online:GymOnlineEnv"
    assert "gym" in registry.names("online")
    gin.parse_config("GymOnlineEnv.gym_id = 'Acrobot-v1'\nGymOnlineEnv.paper_budget = {'refreshes': 3}")
    try:
        env = registry.make_online_env("gym")
    finally:
        gin.clear_config()
    assert (env.env_id, env.name, env.state_dim, env.paper_budget) == (
        "Acrobot-v1",
        "gym_Acrobot-v1",
        6,
        {"refreshes": 3},
    )


def _scaled(state):
    """CartPole's state as the scaled family feeds it, by hand from the space's bounds: position (±4.8) and
    angle (±0.41887903 rad) onto [-1, 1], the velocities (unbounded) as they are."""
    scaled = np.array(state, np.float64)
    scaled[0], scaled[2] = scaled[0] / 4.8, scaled[2] / 0.41887903
    return scaled


def _plain_gymnasium_loop(q, params, n_episodes, max_steps, gamma, seed):
    """One greedy policy (first action on ties, its Q in NumPy), one episode at a time, stepped by hand in
    `gymnasium.make`'s CartPole-v1: the metrics per policy and every episode's length."""
    out, lengths = [], []
    for p in params:

        def greedy(obs, p=p):  # first action on ties
            return int(np.argmax(ground_truth.numpy_mlp_q(q, p, _scaled(obs))))

        metrics, episode_lengths = ground_truth.policy_episodes(
            "CartPole-v1", greedy, n_episodes, max_steps, gamma, seed
        )
        out.append(metrics)
        lengths += episode_lengths
    return out, lengths


def test_the_greedy_evaluation_equals_a_hand_stepped_gymnasium_loop():
    env = GymOnlineEnv(gym_id="CartPole-v1", hidden=[6], gamma=0.95, eval_max_steps=40, eval_seed=2)
    q = env.q_family()
    rng = np.random.default_rng(6)
    params = rng.normal(0.0, 1.0, (4, q.d)).astype(np.float32)  # four greedy policies that act differently
    got = env.evaluate(q, params, n_episodes=3)
    want, lengths = _plain_gymnasium_loop(q, params, 3, 40, 0.95, seed=2)
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        for key in w:
            assert g[key] == pytest.approx(w[key], rel=1e-9, abs=1e-9), key
    assert min(lengths) < 40 == max(lengths)  # episodes that fall and episodes that are cut
    assert len({round(w["return"], 6) for w in want}) == 4
