"""Online experiments (DQN / ProDQN on TF-Agents): every online gin file at tiny size and the run-folder
contract, the paper's table and the reference's schedule lengths, resuming an interrupted run, and the
exported policy in a fresh process without pbo_tf."""

import glob
import json
import os
import subprocess
import sys

import ground_truth  # tests/experiments/ is on sys.path (pytest prepends it)
import numpy as np
import pytest
import tensorflow as tf
from runner_sizes import ONLINE_EXTRA, ONLINE_GRAPH_MODE, ONLINE_K, ONLINE_TINY, parse_tiny
from tf_agents.trajectories import time_step as ts

from pbo_tf.agents.builders import ProDQN
from pbo_tf.configs import DQNConfig, ProDQNConfig
from pbo_tf.evaluation.operator_activity import set_activity
from pbo_tf.evaluation.unit_alignment import unit_alignment
from pbo_tf.experiments import make_experiment
from pbo_tf.experiments.config import GIN_CONFIGS_DIR, parse_config
from pbo_tf.experiments.online import OnlineExperiment
from pbo_tf.experiments.runner import Experiment
from pbo_tf.optimizers import AnnealedAdam, FusedReferenceAdam, ReferenceAdam

ONLINE_DIRS = ("lunar_lander", "bicycle_online")
GIN_FILES = sorted(
    f
    for folder in ONLINE_DIRS
    for f in glob.glob(os.path.join(GIN_CONFIGS_DIR, folder, "*.gin"))
    if not f.endswith("common.gin")
)
# Files that are another file plus one setting a tiny run here adds nothing to: parsed and checked here, not
# run again. The centred Lunar Lander file is prodqn_equivariant.gin plus EquivariantPBO.centre_hidden, which
# a tiny run of the gym files runs (tests/experiments/test_gym_online_runs.py); the larger-replay i-DQN file
# is idqn.gin with REPLAY_CAPACITY = 100 000, which the tiny bindings set to ONLINE_TINY's replay.
CENTRED = "lunar_lander/prodqn_equivariant_centred.gin"
OPTION_ONLY = {CENTRED, "bicycle_online/idqn_replay_100000.gin"}
RUN_FILES = [f for f in GIN_FILES if os.path.relpath(f, GIN_CONFIGS_DIR) not in OPTION_ONLY]
K, EXTRA = ONLINE_K, ONLINE_EXTRA
TINY = [
    *ONLINE_TINY,
    "DQN_TRAIN_STEPS_PER_REFRESH=3",
    "OnlineExperiment.log_interval=2",
    "OnlineExperiment.checkpoint_interval=4",
    "BicycleOnlineEnv.eval_jit_compile=False",  # no XLA compilation of the (30-step) bicycle rollouts
    *ONLINE_GRAPH_MODE,
]
# Small Q networks keep the PBO (width 2d) small: lunar lander d = 161, bicycle d = 65.
HIDDEN = {"lunar_lander": "LunarLanderEnv.hidden=[8, 8]", "bicycle_online": "BicycleOnlineEnv.hidden=[8]"}
METRIC_KEYS = {
    "lunar_lander": {"discounted_return", "return", "episode_length"},
    "bicycle": {"balancing_time_s", "discounted_return"},
}
CONTRACT_KEYS = {
    "env",
    "algorithm",
    "K",
    "seed",
    "curve",
    "reference",
    "wall_time_s",
    "env_steps_per_s",
    "grad_steps_per_s",
    "skipped_replay_batches",
}


def _name(gin_file):
    return os.path.relpath(gin_file, GIN_CONFIGS_DIR)


def _parse(gin_file, bindings=()):
    """Parses ``gin_file`` at tiny size, its fixed-point estimate (if any) at `FIXED_POINT_N` applications."""
    folder = os.path.basename(os.path.dirname(gin_file))
    parse_tiny(gin_file, TINY + [HIDDEN[folder]] + list(bindings), "ProDQNConfig")


RESUMED = "bicycle_online/prodqn.gin"  # this one is interrupted after 2 training steps and resumed


def _interrupted_then_resumed(root) -> tuple[OnlineExperiment, dict, dict]:
    """Runs 2 of the 6 training steps, stops (checkpointed), then resumes in a new experiment object."""
    first = OnlineExperiment(root_dir=str(root), max_train_steps_this_call=2, log=None)
    stopped = {
        "returned": first.run(),
        "metrics_json": os.path.exists(root / "metrics.json"),
        "train_step": int(first.train_step.numpy()),
        "frames": int(first.replay_buffer.num_frames().numpy()),
        "env_steps": int(first.env_steps.result().numpy()),
        "optimizer_steps": int(first.agent.optimizer.iterations.numpy()),
        "pbo": [w.numpy() for w in first.agent.pbo.weights],
    }
    second = OnlineExperiment(root_dir=str(root), log=None)
    second.build()  # restores the latest checkpoint
    restored = {
        "train_step": int(second.train_step.numpy()),
        "frames": int(second.replay_buffer.num_frames().numpy()),
        "env_steps": int(second.env_steps.result().numpy()),
        "optimizer_steps": int(second.agent.optimizer.iterations.numpy()),
        "initial_collect_done": bool(second.progress.initial_collect_done.numpy()),
        "pbo": [w.numpy() for w in second.agent.pbo.weights],
    }
    metrics = second.run()  # the same object trains on from what build() restored
    restored["finished_training"] = metrics is not None and os.path.exists(root / "metrics.json")
    restored["final_train_step"] = int(second.train_step.numpy())
    restored["final_env_steps"] = int(second.env_steps.result().numpy())
    return second, metrics, {"stopped": stopped, "restored": restored}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Every online gin file at tiny size: ``{gin path: (experiment, metrics, folder, resume info)}``."""
    import gin

    out = {}
    for gin_file in RUN_FILES:
        root = tmp_path_factory.mktemp(_name(gin_file).replace("/", "_").replace(".gin", ""))
        _parse(gin_file)
        if _name(gin_file) == RESUMED:
            experiment, metrics, resume = _interrupted_then_resumed(root)
            out[_name(gin_file)] = (experiment, metrics, root, resume)
        else:
            experiment = OnlineExperiment(root_dir=str(root), log=None)
            out[_name(gin_file)] = (experiment, experiment.run(), root, None)
        gin.clear_config()
    return out


_COMMON = {"batch_size": 500, "steps_per_update": 2, "epsilon_start": 1.0, "epsilon_end": 0.01, "gamma": 0.99}
_COMMON.update(adam_epsilon=1e-8, adam_epsilon_placement="reference")
_LL = dict(_COMMON, K=10, d=1261, replay_capacity=20000, initial_collect_steps=1000)
_LL["train_max_episode_steps"] = 1000
_BI = dict(_COMMON, K=8, d=241, replay_capacity=10000, initial_collect_steps=10000)
_BI["train_max_episode_steps"] = 20


def _dqn(base, K, lr_start, lr_end):
    steps = K * 6000  # K target updates x 6000 fitting steps, one gradient step each
    return dict(
        base, refreshes=K, train_steps_per_refresh=6000, total_train_steps=steps, adam_steps_per_train_step=1,
        lr_start=lr_start, lr_end=lr_end, lr_schedule_steps=steps, epsilon_decay_env_steps=2 * steps,
    )  # fmt: skip


def _prodqn(base, refreshes, w_batch_size, lr_end):
    """The paper's #epochs E = refreshes, #training steps = 25; the reference's schedule lengths: the LR over
    the training steps (not the Adam steps), ε over the env steps of the whole run."""
    steps = refreshes * 25
    return dict(
        base, refreshes=refreshes, train_steps_per_refresh=25, total_train_steps=steps,
        adam_steps_per_train_step=30 // w_batch_size, total_adam_steps=steps * (30 // w_batch_size),
        lr_start=1e-5, lr_end=lr_end, lr_schedule_steps=steps, epsilon_decay_env_steps=2 * steps,
        w_size=30, w_batch_size=w_batch_size,
    )  # fmt: skip


def _idqn(base, refreshes, steps_per_refresh, lr_start, lr_end):
    """The reference code's i-DQN: refreshes x fitting steps, one Adam step each, ε over the whole run."""
    steps = refreshes * steps_per_refresh
    return dict(
        base, refreshes=refreshes, train_steps_per_refresh=steps_per_refresh, total_train_steps=steps,
        adam_steps_per_train_step=1, lr_start=lr_start, lr_end=lr_end, lr_schedule_steps=steps,
        epsilon_decay_env_steps=2 * steps,
    )  # fmt: skip


PAPER_TABLE = {
    ("lunar_lander", "dqn"): _dqn(_LL, 10, 1e-3, 1e-5),
    ("lunar_lander", "idqn"): _idqn(_LL, 5000, 80, 1e-3, 1e-5),
    ("bicycle_online", "idqn"): _idqn(_BI, 2500, 40, 1e-4, 1e-6),
    ("lunar_lander", "prodqn"): _prodqn(_LL, 3000, 15, 5e-7),
    ("bicycle_online", "dqn"): _dqn(_BI, 8, 1e-4, 1e-6),
    ("bicycle_online", "prodqn"): _prodqn(_BI, 4000, 30, 1e-7),
}


def _settings(e: OnlineExperiment) -> dict:
    """The schedule and sizes of an online experiment, read from the pieces that hold them."""
    adam = e.algorithm.adam
    out = dict(
        K=e.K, refreshes=e.refreshes, train_steps_per_refresh=e.train_steps_per_refresh,
        total_train_steps=e.total_train_steps, adam_steps_per_train_step=e.adam_steps_per_train_step,
        total_adam_steps=e.total_adam_steps, lr_schedule_steps=e.algorithm.lr_schedule_steps,
        epsilon_decay_env_steps=e.epsilon_decay_env_steps,
        gamma=e.env.gamma, train_max_episode_steps=e.env.train_max_episode_steps,
        batch_size=e.collector.batch_size, steps_per_update=e.collector.steps_per_update,
        replay_capacity=e.collector.replay_capacity, initial_collect_steps=e.collector.initial_collect_steps,
        epsilon_start=e.epsilon.start, epsilon_end=e.epsilon.end,
        lr_start=adam.lr_start, lr_end=adam.lr_end, adam_epsilon=adam.epsilon,
        adam_epsilon_placement=adam.epsilon_placement,
    )  # fmt: skip
    if isinstance(e.algorithm, ProDQN):
        out.update(w_size=e.algorithm.w_size, w_batch_size=e.algorithm.w_batch_size)
    return out


def test_the_online_gin_files_are_all_there_and_bind_the_online_experiment():
    import gin

    assert {_name(f) for f in GIN_FILES} == {
        "lunar_lander/dqn.gin",
        "lunar_lander/idqn.gin",
        "lunar_lander/prodqn.gin",
        "lunar_lander/prodqn_alive.gin",
        "lunar_lander/prodqn_fixed_point.gin",
        "lunar_lander/prodqn_conv.gin",
        "lunar_lander/prodqn_equivariant.gin",
        "lunar_lander/prodqn_equivariant_centred.gin",
        "bicycle_online/dqn.gin",
        "bicycle_online/idqn.gin",
        "bicycle_online/idqn_replay_100000.gin",
        "bicycle_online/prodqn.gin",
        "bicycle_online/prodqn_alive.gin",
        "bicycle_online/prodqn_fixed_point.gin",
    }
    for gin_file in GIN_FILES:
        parse_config([gin_file])  # the defaults (the paper's table) parse as they are
        e = make_experiment(root_dir="unused", log=None)  # the runner is chosen by the gin binding
        assert isinstance(e, OnlineExperiment), gin_file
        expected = PAPER_TABLE[(os.path.basename(os.path.dirname(gin_file)), e.algorithm.name)]
        settings = _settings(e)
        if "_equivariant" in gin_file:  # the paper's schedule; the operator's own learning rate
            expected = dict(expected, lr_start=1e-3, lr_end=1e-5)
            assert gin.query_parameter("make_pbo.kind") == "equivariant"
            assert gin.query_parameter("EquivariantPBO.channels") == [16, 16]
            try:
                centred = gin.query_parameter("EquivariantPBO.centre_hidden")
            except ValueError:  # unbound: the option's default, off
                centred = False
            assert centred == (_name(gin_file) == CENTRED), gin_file
            assert e.label == os.path.splitext(os.path.basename(gin_file))[0]
        if gin_file.endswith("_replay_100000.gin"):  # the paper's configuration with a larger replay
            expected = dict(expected, replay_capacity=100_000)
        got = {key: settings[key] for key in expected if key != "d"}
        got["d"] = e.q_family().d
        assert got == expected, gin_file
        if gin_file.endswith(
            "_conv.gin"
        ):  # the reference's --conv run: its DeepConvPBONet, the rest as prodqn
            assert gin.query_parameter("make_pbo.kind") == "conv"
            assert gin.query_parameter("ConvPBO.channels") == [2, 2, 2, 2]
            assert gin.query_parameter("ConvPBO.kernel_size") == 15
        assert e.epsilon_decay_env_steps == e.total_env_steps == 2 * e.total_train_steps  # the whole run
        assert e.epsilon_decay_train_steps == e.total_train_steps
        gin.clear_config()
    parse_config([os.path.join(GIN_CONFIGS_DIR, "chain_walk", "profqi.gin")])  # offline: the default runner
    assert type(make_experiment(root_dir="unused", log=None)) is Experiment
    gin.clear_config()


@pytest.mark.parametrize("gin_file", RUN_FILES, ids=_name)
def test_every_online_gin_file_runs_at_tiny_size_and_writes_the_contract(gin_file, finished):
    experiment, metrics, root, _ = finished[_name(gin_file)]
    on_disk = json.loads((root / "metrics.json").read_text())
    assert set(on_disk) >= CONTRACT_KEYS
    algorithm = os.path.splitext(os.path.basename(gin_file))[0]
    env = "lunar_lander" if "lunar_lander" in gin_file else "bicycle"
    assert (on_disk["env"], on_disk["algorithm"], on_disk["K"], on_disk["seed"]) == (env, algorithm, K, 0)
    assert on_disk["setting"] == "online"
    n_points = K + 1 + (EXTRA if algorithm.startswith("prodqn") else 0)
    assert [c["k"] for c in on_disk["curve"]] == list(range(n_points))
    for entry in on_disk["curve"]:
        assert set(entry) == {"k"} | METRIC_KEYS[env]
        assert all(np.isfinite(v) for key, v in entry.items())
    # k = 0 is ω_0 = W[0] (DQN: the initial network): Q ≡ 0, so the greedy policy plays action 0. Its
    # metrics from a plain loop (TINY: 2 episodes of at most 30 steps, γ = 0.99, evaluation seed 0; the
    # bicycle evaluates every curve point's policy in one call, whose noise draw has that shape).
    if env == "lunar_lander":
        want = ground_truth.lunar_lander_constant_action(2, 30, 0.99, seed=0)
    else:
        want = ground_truth.bicycle_constant_action(n_points, 2, 30, 0.99, seed=0)
    for key, value in want.items():
        assert on_disk["curve"][0][key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert on_disk["env_steps_per_s"] > 0 and on_disk["grad_steps_per_s"] > 0
    # DQN: K target updates x 3 training steps of one gradient step; ProDQN: 3 refreshes x 2 training
    # steps of |W| / W batch = 2 Adam steps.
    assert on_disk["train_steps"] == 6 == experiment.total_train_steps
    assert on_disk["adam_steps"] == (12 if algorithm.startswith("prodqn") else 6)
    assert int(experiment.algorithm.optimizer.iterations.numpy()) == on_disk["adam_steps"]
    np.testing.assert_allclose(
        on_disk["grad_steps_per_s"] / on_disk["train_steps_per_s"], on_disk["adam_steps"] / 6, rtol=1e-6
    )
    if algorithm.startswith("prodqn"):  # the last refresh came after training step 6 = 3 x 2: φ̄ = φ
        for target, online in zip(
            experiment.agent.target_pbo.weights, experiment.agent.pbo.weights, strict=True
        ):
            np.testing.assert_array_equal(target.numpy(), online.numpy())
        reference_kind = FusedReferenceAdam if experiment.algorithm.adam.fused else ReferenceAdam
        assert isinstance(experiment.agent.optimizer, reference_kind)
    if algorithm == "idqn":  # the same for i-DQN's frozen heads θ̄ = θ
        np.testing.assert_array_equal(
            experiment.agent.target_params.numpy()[0], experiment.agent.q_network.omega.numpy()
        )
    assert metrics["curve"] == on_disk["curve"]
    # The budget against the paper's table: DQN K x 6000 training steps, ProDQN E x 25 (3000 lunar lander,
    # 4000 bicycle).
    paper = {
        "dqn": K * 6000,
        "prodqn": 25 * (3000 if env == "lunar_lander" else 4000),
        "idqn": 80 * 5000 if env == "lunar_lander" else 40 * 2500,
    }[algorithm.split("_")[0]]
    assert on_disk["budget"] == {
        "train_steps_done": 6,
        "train_steps_scheduled": 6,
        "train_steps_paper": paper,
        "fraction": 6 / paper,
        # DQN updates its target every DQN_TRAIN_STEPS_PER_REFRESH = 3 training steps, the others refresh
        # every TRAIN_STEPS_PER_REFRESH = 2
        "refreshes_done": 2 if algorithm == "dqn" else 3,
    }
    if algorithm in ("prodqn_conv", "prodqn_equivariant"):  # no units to count: its spread on W and 30 fresh
        activity = on_disk["operator_activity"]
        kind = "ConvPBO" if algorithm == "prodqn_conv" else "EquivariantPBO"
        assert (activity["kind"], activity["W"]["n"], activity["fresh"]["n"]) == (kind, 4, 30)
        assert activity["W"]["active_units"] == [] and "width" not in activity
    elif algorithm.startswith("prodqn"):  # the deep PBO's activity on W (W_SIZE=4) and on 30 fresh vectors
        activity = on_disk["operator_activity"]
        assert (activity["kind"], activity["W"]["n"], activity["fresh"]["n"]) == ("DeepPBO", 4, 30)
        layers = 4 if env == "lunar_lander" else 3  # deep PBO [2, 2, 2, 2] and [2, 2, 2]
        assert activity["width"] == [2 * experiment.q.d] * layers and activity["constant"] in (True, False)
    else:
        assert "operator_activity" not in on_disk
    if algorithm.startswith("prodqn"):  # measured on the run's own W: the agent's, recomputed here
        want = set_activity(experiment.agent.pbo, experiment.agent.params.numpy())
        got = on_disk["operator_activity"]["W"]
        assert (got["active_units"], got["constant"]) == (want["active_units"], want["constant"])
        assert want["input_spread"] > 0 and got["spread"] == pytest.approx(want["spread"], rel=1e-5)

    config = (root / "config.gin").read_text()
    assert "OnlineExperiment.env" in config
    assert os.listdir(root / "tensorboard") and os.listdir(root / "checkpoints")
    assert os.path.exists(root / "policy" / "saved_model.pb")
    iterates = np.load(root / "iterates.npz")["iterates"]
    assert iterates.shape == (n_points, experiment.q.d)
    np.testing.assert_array_equal(iterates[0], experiment.q.initial_params(1, 0)[0])  # ω_0 = W[0]
    if algorithm.startswith("prodqn"):  # per ω_k, per hidden layer: the mean pairwise cosine of its units
        alignment = on_disk["operator_activity"]["unit_alignment"]
        assert np.shape(alignment) == (n_points, len(experiment.q.layout) - 1)
        np.testing.assert_allclose(alignment, unit_alignment(experiment.q, iterates), atol=5.1e-5)
    if algorithm == "dqn":  # ω_k = the online parameters at the k-th target update
        assert not np.allclose(iterates[1], iterates[0])
        np.testing.assert_array_equal(iterates[K], experiment.algorithm.online_omega.numpy())
    if algorithm == "idqn":  # ω_k = head k of the trained heads; head 0 is never trained
        np.testing.assert_array_equal(iterates, experiment.agent.heads())
        assert not np.allclose(iterates[K], experiment.q.initial_params(K + 1, 0)[K])

    # A complete folder is read back, not re-run.
    _parse(gin_file)
    again = OnlineExperiment(root_dir=str(root), log=None).run()
    assert again["curve"] == on_disk["curve"] and again["wall_time_s"] == on_disk["wall_time_s"]


def test_an_interrupted_run_resumes_from_its_checkpoint(finished):
    experiment, metrics, root, resume = finished[RESUMED]
    stopped, restored = resume["stopped"], resume["restored"]
    assert stopped["returned"] is None and not stopped["metrics_json"]  # stopped early, checkpointed
    assert stopped["train_step"] == 2 and stopped["optimizer_steps"] == 2 * 2  # 2 W batches per step
    assert stopped["env_steps"] == 40 + 2 * 2 and stopped["frames"] >= stopped["env_steps"]
    # The new experiment object restores the counters, the replay buffer, the optimizer and the PBO ...
    for key in ("train_step", "frames", "env_steps", "optimizer_steps"):
        assert restored[key] == stopped[key], key
    assert restored["initial_collect_done"]
    for got, saved in zip(restored["pbo"], stopped["pbo"], strict=True):
        np.testing.assert_array_equal(got, saved)
    # ... and continues: no second initial collect, the remaining 4 training steps, then the curve.
    assert restored["finished_training"]
    assert restored["final_train_step"] == experiment.total_train_steps == 6
    assert restored["final_env_steps"] == stopped["env_steps"] + 4 * 2
    assert metrics["train_steps"] == 6 and len(metrics["curve"]) == K + EXTRA + 1
    assert os.path.exists(root / "metrics.json")


SUBPROCESS = r"""
import json, os, sys
import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

out = {}
for name, (path, obs_path) in json.loads(sys.argv[1]).items():
    obs = np.load(obs_path)
    policy = tf.saved_model.load(path)
    step = ts.restart(tf.constant(obs), batch_size=len(obs))
    out[name] = policy.action(step).action.numpy().tolist()
assert "pbo_tf" not in sys.modules
print(json.dumps(out))
"""


# One policy per algorithm and per environment (every folder's export is checked in the contract test).
EXPORTED = ("lunar_lander/prodqn.gin", "bicycle_online/dqn.gin")


def test_the_exported_policy_loads_without_pbo_tf_and_acts_greedily(finished, tmp_path):
    rng = np.random.default_rng(0)
    observations = {
        "lunar_lander": rng.normal(size=(12, 8)).astype(np.float32),
        "bicycle": rng.uniform(-0.1, 0.1, size=(12, 4)).astype(np.float32),
    }
    paths, live = {}, {}
    for i, name in enumerate(EXPORTED):
        experiment, _, root, _ = finished[name]
        obs = observations[experiment.env.name]
        np.save(tmp_path / f"obs_{i}.npy", obs)
        paths[name] = [str(root / "policy"), str(tmp_path / f"obs_{i}.npy")]
        live_actions = experiment.agent.policy.action(ts.restart(tf.constant(obs), batch_size=len(obs)))
        live[name] = live_actions.action.numpy().tolist()
        # ... and the policy is the curve's greedy policy at k = K.
        params = np.load(root / "iterates.npz")["iterates"][K][None]
        assert live[name] == experiment.q.greedy_actions(params, obs)[0].numpy().tolist()

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["TF_USE_LEGACY_KERAS"] = "1"
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    done = subprocess.run(
        [sys.executable, "-c", SUBPROCESS, json.dumps(paths)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    exported = json.loads(done.stdout.strip().splitlines()[-1])
    assert exported == live


def test_the_schedules_count_what_the_reference_counts(tmp_path):
    """ProDQN at tiny size (3 refreshes x 2 training steps, 2 W batches): the learning rate anneals over the
    6 training steps (the reference's count, ignoring the W batches) or over the 12 Adam steps; ε over the
    12 ε-greedy env steps, a function of the training step."""
    import gin

    gin_file = os.path.join(GIN_CONFIGS_DIR, "bicycle_online", "prodqn.gin")
    for counts_w_batches, lr_steps in ((False, 6), (True, 12)):
        _parse(gin_file, [f"ProDQNConfig.lr_schedule_counts_w_batches={counts_w_batches}"])
        e = OnlineExperiment(root_dir=str(tmp_path / str(counts_w_batches)), log=None)
        e.build()
        gin.clear_config()
        assert (e.total_train_steps, e.adam_steps_per_train_step, e.total_adam_steps) == (6, 2, 12)
        assert e.algorithm.lr_schedule_steps == lr_steps
        schedule = e.algorithm.lr_schedule
        assert e.algorithm.optimizer._learning_rate is schedule  # (new-style Keras Adam: bicycle's gin file)
        lr_start, lr_end = 1e-5, 1e-7
        for adam_step in (0, lr_steps // 2, lr_steps, 12):
            want = lr_start + (lr_end - lr_start) * min(adam_step, lr_steps) / lr_steps
            np.testing.assert_allclose(float(schedule(adam_step)), want, rtol=1e-5)
        assert e.epsilon_decay_env_steps == 12 and e.epsilon_decay_train_steps == 6
        for train_step in (0, 3, 6, 9):
            e.train_step.assign(train_step)
            env_steps = 2 * train_step  # ε-greedy env steps collected before this training step
            want = 1.0 + (0.01 - 1.0) * min(env_steps, 12) / 12
            np.testing.assert_allclose(float(e.epsilon_fn()), want, rtol=1e-6)
    _parse(gin_file, ["EpsilonSchedule.decay_env_steps=5"])
    assert OnlineExperiment(root_dir="unused", log=None).epsilon_decay_train_steps == 3  # ceil(5 / 2)
    gin.clear_config()
    with pytest.raises(ValueError, match="epsilon_placement"):
        AnnealedAdam(epsilon_placement="x")
    with pytest.raises(ValueError, match=r"ProDQNConfig.w_batch_size must lie in \[1, w_size=4\], got 5"):
        ProDQNConfig(K=2, refreshes=1, w_size=4, w_batch_size=5)
    # one setting: DQN's refreshes are its K target updates, and its config has no other field for them
    assert DQNConfig(K=2, train_steps_per_refresh=1).schedule().refreshes == 2
    with pytest.raises(ValueError, match="'DQNConfig' doesn't have a parameter named 'refreshes'"):
        gin.parse_config("DQNConfig.refreshes = 3")


def test_a_nan_stops_the_run_keeps_the_last_good_checkpoint_and_records_the_failure(tmp_path, monkeypatch):
    """The PBO's weights turn NaN right after the initial collect's checkpoint: training step 1 has a NaN
    loss, the run stops there with `DivergenceError`, failure.json (not metrics.json) says where and when,
    and the checkpoint left is the good one of training step 0."""
    from pbo_tf.utils import DivergenceError

    gin_file = os.path.join(GIN_CONFIGS_DIR, "bicycle_online", "prodqn.gin")
    save = OnlineExperiment._save

    def save_then_poison(self):
        save(self)
        if int(self.train_step.numpy()) == 0:
            for w in self.agent.pbo.weights:
                w.assign(tf.fill(w.shape, np.nan))

    monkeypatch.setattr(OnlineExperiment, "_save", save_then_poison)
    _parse(gin_file)
    with pytest.raises(
        DivergenceError, match=r"prodqn loss became nan at training step 1 of 6.*step 0\) is kept"
    ):
        OnlineExperiment(root_dir=str(tmp_path), log=None).run()
    assert not (tmp_path / "metrics.json").exists()
    failure = json.loads((tmp_path / "failure.json").read_text())
    assert (
        failure["status"] == "diverged"
        and failure["train_step"] == 1
        and failure["last_checkpoint_step"] == 0
    )
    identity = {key: failure[key] for key in ("env", "setting", "algorithm", "K", "seeds")}
    assert identity == {"env": "bicycle", "setting": "online", "algorithm": "prodqn", "K": 2, "seeds": [0]}
    monkeypatch.setattr(OnlineExperiment, "_save", save)
    resumed = OnlineExperiment(root_dir=str(tmp_path), log=None)
    resumed.build()
    assert int(resumed.train_step.numpy()) == 0
    assert all(np.isfinite(w.numpy()).all() for w in resumed.agent.pbo.weights)
