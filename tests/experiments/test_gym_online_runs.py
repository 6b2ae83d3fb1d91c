"""Online runs on plain gymnasium ids (`pbo_tf.envs.gym.online.GymOnlineEnv`): the gym/ and acrobot/ gin
files (Acrobot: the reference code's numbers), each at tiny size through `run_experiment` with its
run-folder contract, the report keeping CartPole and Acrobot apart, and the exported policy acting on raw
observations as the agent's scaled Q family does."""

import glob
import json
import os

import gin
import numpy as np
import pytest
import tensorflow as tf
from ground_truth import constant_action_metrics  # tests/experiments/ is on sys.path (pytest prepends it)
from runner_sizes import ONLINE_EXTRA, ONLINE_GRAPH_MODE, ONLINE_K, ONLINE_TINY, parse_tiny
from tf_agents.trajectories import time_step as ts

from pbo_tf.agents.builders import ProDQN
from pbo_tf.analysis import report, results
from pbo_tf.experiments import make_experiment
from pbo_tf.experiments.config import GIN_CONFIGS_DIR, macros, parse_config
from pbo_tf.experiments.online import OnlineExperiment
from pbo_tf.q import PerActionMLPQ, first_argmax

GIN_FILES = sorted(
    f
    for folder in ("gym", "acrobot")
    for f in glob.glob(os.path.join(GIN_CONFIGS_DIR, folder, "*.gin"))
    if not f.endswith("common.gin")
)
K, EXTRA = ONLINE_K, ONLINE_EXTRA
TINY = [
    *ONLINE_TINY,
    "DQN_TRAIN_STEPS_PER_REFRESH=3",
    "GymOnlineEnv.hidden=[8]",  # d = 57 (CartPole), 65 (Acrobot): a small PBO
    "OnlineExperiment.log_interval=2",
    "OnlineExperiment.checkpoint_interval=4",
    *ONLINE_GRAPH_MODE,
]
GYM_IDS = {"gym": "CartPole-v1", "acrobot": "Acrobot-v1"}


def _name(gin_file):
    return os.path.relpath(gin_file, GIN_CONFIGS_DIR)


def _folder(gin_file):
    return os.path.basename(os.path.dirname(gin_file))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Every gym/ and acrobot/ gin file at tiny size: ``{name: (experiment, metrics, folder)}``, the folders
    under one root (``out["root"]``)."""
    root = tmp_path_factory.mktemp("gym_runs")
    out = {"root": root}
    for gin_file in GIN_FILES:
        folder = root / _name(gin_file).replace(".gin", "")
        parse_tiny(gin_file, TINY, "ProDQNConfig")  # the fixed-point estimate at FIXED_POINT_N applications
        experiment = make_experiment(str(folder), log=None)
        out[_name(gin_file)] = (experiment, experiment.run(), folder)
        gin.clear_config()
    return out


def test_the_gin_files_are_all_there_and_acrobot_holds_the_reference_numbers():
    assert {_name(f) for f in GIN_FILES} == {
        f"{folder}/{name}.gin"
        for folder in ("gym", "acrobot")
        for name in ("dqn", "idqn", "prodqn", "prodqn_fixed_point")
    } | {
        "acrobot/prodqn_conv.gin",
        "gym/prodqn_equivariant.gin",
        "gym/prodqn_equivariant_centred.gin",
        "gym/dqn_prodqn_schedule.gin",
    }
    for gin_file in GIN_FILES:
        parse_config([gin_file])  # the defaults
        e = make_experiment(root_dir="unused", log=None)
        assert isinstance(e, OnlineExperiment) and e.env.env_id == GYM_IDS[_folder(gin_file)]
        got = dict(
            K=e.K, total_train_steps=e.total_train_steps, batch_size=e.collector.batch_size,
            replay_capacity=e.collector.replay_capacity, steps_per_update=e.collector.steps_per_update,
            initial_collect_steps=e.collector.initial_collect_steps, gamma=e.env.gamma, d=e.q_family().d,
            train_max_episode_steps=e.env.train_max_episode_steps, eval_max_steps=e.env.eval_max_steps,
            n_eval_episodes=e.n_eval_episodes, lr=(e.algorithm.adam.lr_start, e.algorithm.adam.lr_end),
            epsilon=(e.epsilon.start, e.epsilon.end), epsilon_decay_env_steps=e.epsilon_decay_env_steps,
            scaled=e.q_family().scales_inputs, main_metric=e.env.main_metric,
            actions=e.q_family().action_values[:, 0].tolist(),
            per_action_outputs=isinstance(e.q_family(), PerActionMLPQ),
        )  # fmt: skip
        if isinstance(e.algorithm, ProDQN):
            got.update(
                w=(e.algorithm.w_size, e.algorithm.w_batch_size), lr_steps=e.algorithm.lr_schedule_steps
            )
            got.update(pbo=gin.query_parameter("make_pbo.hidden_multiples"))
            init_std = gin.query_parameter("make_pbo.init_std")  # a number, or the %PBO_INIT_STD macro
            init_std = init_std if isinstance(init_std, float) else macros()["PBO_INIT_STD"]
            got.update(init_std=init_std, kind=gin.query_parameter("make_pbo.kind"))
        if _folder(gin_file) == "acrobot":
            # experiments/acrobot/parameters.json of the reference code (K = 15: its plots notebook)
            want = dict(
                K=15, batch_size=250, replay_capacity=5000, initial_collect_steps=500, steps_per_update=2,
                gamma=0.99, d=(6 + 1) * 50 + 50 + 50 * 10 + 10 + 10 * 10 + 10 + 10 + 1,
                train_max_episode_steps=2000, eval_max_steps=2000, n_eval_episodes=100, scaled=False,
                main_metric="return", actions=[-1.0, 0.0, 1.0], per_action_outputs=False,
            )  # fmt: skip
            if e.algorithm.name == "dqn":
                steps = 15 * 6000
                want.update(lr=(1e-4, 1e-6), epsilon=(1.0, 0.001))
            elif e.algorithm.name == "idqn":  # "IDQNs": 5000 refreshes x 80 steps
                steps = 5000 * 80
                want.update(lr=(1e-3, 1e-5), epsilon=(1.0, 0.01))
            else:
                steps = 3000 * 25
                want.update(lr=(1e-5, 1e-7), epsilon=(1.0, 0.01), w=(30, 30), lr_steps=steps)
                want.update(pbo=[2, 2, 2, 2], init_std=5e-7, kind="deep")
                if gin_file.endswith("prodqn_conv.gin"):  # the reference's --conv run: its DeepConvPBONet
                    want.update(kind="conv")
                    assert gin.query_parameter("ConvPBO.channels") == [2, 2, 2, 2]
                    assert gin.query_parameter("ConvPBO.kernel_size") == 15
            want.update(total_train_steps=steps, epsilon_decay_env_steps=2 * steps)  # ε over the whole run
            assert e.env.paper_budget == {
                "refreshes": 3000,
                "train_steps_per_refresh": 25,
                "dqn_train_steps_per_update": 6000,
                "idqn_refreshes": 5000,
                "idqn_train_steps_per_refresh": 80,
            }
        else:  # CartPole: gym/common.gin's defaults, gym/dqn.gin's env steps; gym/dqn.gin: the RL Zoo's
            want = dict(
                K=20, batch_size=128, replay_capacity=100_000, initial_collect_steps=1000, steps_per_update=4,
                gamma=0.99, d=(4 + 1) * 32 + 32 + 32 + 1, train_max_episode_steps=500, eval_max_steps=500,
                n_eval_episodes=10, scaled=True, main_metric="return", actions=[0.0, 1.0],
                epsilon=(1.0, 0.01), per_action_outputs=False,
            )  # fmt: skip
            if gin_file.endswith("dqn_prodqn_schedule.gin"):  # DQN on ProDQN's network and schedule
                steps = 20 * 1248
                want.update(lr=(1e-3, 1e-5))
                assert e.algorithm.config.td_loss == "squared"
            elif e.algorithm.name == "dqn":
                steps = 390 * 128  # the RL Zoo's settings (gym/dqn.gin), 100 840 env steps
                want.update(
                    K=390, batch_size=64, replay_capacity=100_000, initial_collect_steps=1000,
                    steps_per_update=2, d=(4 * 256 + 256) + (256 * 256 + 256) + (256 * 2 + 2),
                    lr=(2.3e-3, 1e-5), epsilon=(1.0, 0.04), per_action_outputs=True,
                )  # fmt: skip
                assert (
                    e.algorithm.config.td_loss == "squared" and e.algorithm.config.gradient_clipping is None
                )
            elif e.algorithm.name == "idqn":  # ProDQN's schedule, DQN's learning rate held
                steps = 780 * 32
                want.update(lr=(1e-3, 1e-3))
            else:
                steps = 780 * 32  # x 4 env steps = DQN's 390 x 128 x 2: the same 100 840 env steps
                want.update(lr=(1e-3, 1e-5), w=(30, 30), lr_steps=steps, pbo=[2, 2, 2, 2], init_std=5e-7)
                want.update(kind="deep")
                if gin_file.endswith("prodqn_fixed_point.gin"):  # gym/prodqn.gin's operator and rate
                    assert gin.query_parameter("FixedPointTerm.iterations") == 30
                    assert gin.query_parameter("FixedPointTerm.radius") == 10.0
                if "prodqn_equivariant" in gin_file:  # s -> 64 -> 64 -> |A|, its own rate
                    want.update(
                        kind="equivariant", init_std=1e-3, lr=(1e-3, 1e-5), per_action_outputs=True,
                        d=(4 * 64 + 64) + (64 * 64 + 64) + (64 * 2 + 2), w=(10, 10),
                    )  # fmt: skip
                    assert gin.query_parameter("EquivariantPBO.channels") == [8, 8]
                    try:
                        centre = gin.query_parameter("EquivariantPBO.centre_hidden")
                    except ValueError:  # not bound: the default, off
                        centre = False
                    assert centre == gin_file.endswith("prodqn_equivariant_centred.gin")
            # ε 1 -> 0.01 over the whole run, as the paper's ProDQN; gym/dqn.gin: the Zoo's 8000 env steps
            decay = 8000 if e.algorithm.name == "dqn" and "schedule" not in gin_file else 4 * steps
            want.update(total_train_steps=steps, epsilon_decay_env_steps=decay)
            assert e.env.paper_budget is None
        assert got == want, gin_file
        gin.clear_config()


@pytest.mark.parametrize("gin_file", GIN_FILES, ids=_name)
def test_every_gym_gin_file_runs_at_tiny_size_and_writes_the_contract(gin_file, finished):
    experiment, metrics, folder = finished[_name(gin_file)]
    on_disk = json.loads((folder / "metrics.json").read_text())
    assert metrics["curve"] == on_disk["curve"]
    gym_id = GYM_IDS[_folder(gin_file)]
    algorithm = os.path.splitext(os.path.basename(gin_file))[0]
    identity = {key: on_disk[key] for key in ("env", "gym_id", "setting", "algorithm", "K", "seed")}
    assert identity == dict(
        env=f"gym_{gym_id}", gym_id=gym_id, setting="online", algorithm=algorithm, K=K, seed=0
    )
    assert on_disk["main_metric"] == "return"
    n_points = K + 1 + (EXTRA if algorithm.startswith("prodqn") else 0)
    assert [c["k"] for c in on_disk["curve"]] == list(range(n_points))
    for entry in on_disk["curve"]:
        assert set(entry) == {"k", "discounted_return", "return", "episode_length"}
    # k = 0 is ω_0 = W[0]: Q ≡ 0 (zero last layer), the greedy policy plays action 0 throughout
    want = constant_action_metrics(gym_id, 2, 30, 0.99, seed=0)
    for key, value in want.items():
        assert on_disk["curve"][0][key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
    if gym_id == "Acrobot-v1":  # torque -1 throughout never swings up within 30 steps
        assert want == {"discounted_return": pytest.approx((1 - 0.99**30) / (1 - 0.99) * -1), "return": -30.0,
                        "episode_length": 30.0}  # fmt: skip
    assert on_disk["train_steps"] == 6 == experiment.total_train_steps
    assert on_disk["adam_steps"] == (12 if algorithm.startswith("prodqn") else 6)
    if gym_id == "Acrobot-v1":  # counted against the reference's schedule
        paper = {"dqn": K * 6000, "idqn": 5000 * 80}.get(algorithm, 3000 * 25)
        assert on_disk["budget"] == {
            "train_steps_done": 6,
            "train_steps_scheduled": 6,
            "train_steps_paper": paper,
            "fraction": 6 / paper,
            # DQN's target every DQN_TRAIN_STEPS_PER_REFRESH = 3 training steps, the others every 2
            "refreshes_done": 2 if algorithm == "dqn" else 3,
        }
    else:
        assert "budget" not in on_disk  # CartPole has no published schedule
    assert experiment.q.scales_inputs == (gym_id == "CartPole-v1")
    if algorithm.startswith("prodqn_equivariant"):  # the operator the file names, centred or not
        assert experiment.algorithm.pbo.centre_hidden == algorithm.endswith("_centred")
    assert os.path.exists(folder / "policy" / "saved_model.pb")
    assert "GymOnlineEnv.gym_id" in (folder / "config.gin").read_text()


def test_the_report_keeps_cartpole_and_acrobot_apart(finished):
    runs = results.load_runs(str(finished["root"]))
    assert len(runs) == len(GIN_FILES)
    sections = report.section_groups(runs)
    assert [(name, len(members), metric) for name, members, metric, _ in sections] == [
        ("gym_Acrobot-v1_online", 5, "return"),
        ("gym_CartPole-v1_online", 7, "return"),
    ]
    for name, members, _, groups in sections:
        gym_id = name.removeprefix("gym_").removesuffix("_online")
        assert {m["gym_id"] for m in members} == {gym_id}
        extra = ["prodqn_conv"]
        if gym_id == "CartPole-v1":
            extra = ["prodqn_equivariant", "prodqn_equivariant_centred", "dqn_prodqn_schedule"]
        algorithms = sorted(("dqn", "idqn", "prodqn", "prodqn_fixed_point", *extra))
        assert sorted(groups) == [(f"gym_{gym_id}", algorithm, K) for algorithm in algorithms]


def _bounds_and_random_observations():
    """CartPole observations at the bounds of its position and angle (±4.8, ±0.419 rad), with velocities from
    -1000 to 1000, and random ones: ``[N, 4]`` float32."""
    x, theta = 4.8, 0.41887903
    corners = [
        [sx * x, v, st * theta, w]
        for sx in (-1, 1)
        for st in (-1, 1)
        for v in (-1e3, 0.0)
        for w in (0.0, 1e3)
    ]
    rng = np.random.default_rng(0)
    inside = rng.uniform([-x, -5.0, -theta, -5.0], [x, 5.0, theta, 5.0], size=(48, 4))
    return np.concatenate([corners, inside]).astype(np.float32)


@pytest.mark.parametrize("gin_file", ["gym/dqn.gin", "gym/prodqn.gin", "gym/prodqn_fixed_point.gin"])
def test_the_exported_policy_acts_on_raw_observations_as_the_scaled_family(gin_file, finished):
    experiment, _, folder = finished[gin_file]
    q = experiment.q
    obs = _bounds_and_random_observations()
    exported = tf.saved_model.load(str(folder / "policy"))
    step = ts.restart(tf.constant(obs), batch_size=len(obs))
    actions = exported.action(step).action.numpy()
    live = experiment.agent.policy.action(step).action.numpy()
    params = np.load(folder / "iterates.npz")["iterates"][K][None]  # the curve's ω_K: the exported policy's
    greedy = first_argmax(q.q_all(params, obs))[0].numpy()
    np.testing.assert_array_equal(actions, live)
    np.testing.assert_array_equal(actions, greedy)
    # ... the unscaled family fed the observations scaled by hand, and not fed them raw
    plain = type(q).from_config({**q.get_config(), "state_shift": None, "state_scale": None})
    assert not plain.scales_inputs and plain.d == q.d
    by_hand = (obs - q.state_shift) * q.state_scale
    np.testing.assert_array_equal(actions, first_argmax(plain.q_all(params, by_hand))[0].numpy())
    if gin_file == "gym/dqn.gin":  # (ProDQN's tiny-initialised operator: Λ^K(ω_0) ≈ 0 after 6 steps)
        assert len(set(actions.tolist())) == 2
        assert (first_argmax(plain.q_all(params, obs))[0].numpy() != actions).any()
