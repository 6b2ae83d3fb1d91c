"""Online experiments (DQN / ProDQN on TF-Agents): every online gin file at tiny size and the run-folder
contract, resuming an interrupted run, and the exported policy in a fresh process without pbo_tf."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from pbo_tf.experiments.config import GIN_CONFIGS_DIR, parse_config
from pbo_tf.experiments.online import OnlineExperiment

ONLINE_DIRS = ("lunar_lander", "bicycle_online")
GIN_FILES = sorted(
    f
    for folder in ONLINE_DIRS
    for f in glob.glob(os.path.join(GIN_CONFIGS_DIR, folder, "*.gin"))
    if not f.endswith("common.gin")
)
K, EXTRA = 2, 2
TINY = [
    f"K={K}",
    f"EXTRA_ITERATIONS={EXTRA}",
    "FITTING_STEPS=3",
    "EPOCHS=2",
    "TRAINING_STEPS=3",
    "INITIAL_COLLECT_STEPS=40",
    "REPLAY_CAPACITY=300",
    "BATCH_SIZE=16",
    "W_SIZE=4",
    "W_BATCH_SIZE=2",
    "N_EVAL_EPISODES=2",
    "EVAL_MAX_STEPS=30",
    "OnlineExperiment.log_interval=2",
    "OnlineExperiment.checkpoint_interval=4",
    "OnlineExperiment.eval_jit_compile=False",  # no XLA compilation of the (30-step) bicycle rollouts
    "OnlineExperiment.jit_compile=False",  # the XLA train steps are tested in tests/agents
]
# Small Q networks keep the PBO (width 2d) small: lunar lander d = 161, bicycle d = 65.
HIDDEN = {"lunar_lander": "OnlineExperiment.hidden=[8, 8]", "bicycle_online": "OnlineExperiment.hidden=[8]"}
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
}


def _name(gin_file):
    return os.path.relpath(gin_file, GIN_CONFIGS_DIR)


def _parse(gin_file, bindings=()):
    folder = os.path.basename(os.path.dirname(gin_file))
    parse_config([gin_file], TINY + [HIDDEN[folder]] + list(bindings))


RESUMED = "bicycle_online/prodqn.gin"  # this one is interrupted after 2 gradient steps and resumed


def _interrupted_then_resumed(root) -> tuple[OnlineExperiment, dict, dict]:
    """Runs 2 of the 6 gradient steps, stops (checkpointed), then resumes in a new experiment object."""
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
    restored["finished_training"] = second.train()
    restored["final_train_step"] = int(second.train_step.numpy())
    restored["final_env_steps"] = int(second.env_steps.result().numpy())
    return second, second.finish(), {"stopped": stopped, "restored": restored}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Every online gin file at tiny size: ``{gin path: (experiment, metrics, folder, resume info)}``."""
    import gin

    out = {}
    for gin_file in GIN_FILES:
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
_LL = dict(_COMMON, K=10, d=1261, replay_capacity=20000, initial_collect_steps=1000)
_LL["train_max_episode_steps"] = 1000
_BI = dict(_COMMON, K=8, d=241, replay_capacity=10000, initial_collect_steps=10000)
_BI["train_max_episode_steps"] = 20
PAPER_TABLE = {
    ("lunar_lander", "dqn"): dict(_LL, total_train_steps=10 * 6000, lr_start=1e-3, lr_end=1e-5),
    ("lunar_lander", "prodqn"): dict(
        _LL, total_train_steps=3000 * 25, lr_start=1e-5, lr_end=5e-7, w_size=30, w_batch_size=15
    ),
    ("bicycle_online", "dqn"): dict(_BI, total_train_steps=8 * 6000, lr_start=1e-4, lr_end=1e-6),
    ("bicycle_online", "prodqn"): dict(
        _BI, total_train_steps=4000 * 25, lr_start=1e-5, lr_end=1e-7, w_size=30, w_batch_size=30
    ),
}


def test_the_online_gin_files_are_all_there_and_bind_the_online_experiment():
    import gin

    assert {_name(f) for f in GIN_FILES} == {
        "lunar_lander/dqn.gin",
        "lunar_lander/prodqn.gin",
        "bicycle_online/dqn.gin",
        "bicycle_online/prodqn.gin",
    }
    for gin_file in GIN_FILES:
        parse_config([gin_file])  # the defaults (the paper's table) parse as they are
        assert "OnlineExperiment.env" in gin.config_str()  # launch/train.py picks OnlineExperiment by this
        e = OnlineExperiment(root_dir="unused", log=None)
        expected = PAPER_TABLE[(os.path.basename(os.path.dirname(gin_file)), e.algorithm)]
        got = {key: getattr(e, key) for key in expected if key != "d"}
        got["d"] = e.q_family().d
        assert got == expected, gin_file
        assert e.epsilon_decay_steps == e.total_train_steps  # ε anneals over the whole run
        gin.clear_config()


@pytest.mark.parametrize("gin_file", GIN_FILES, ids=_name)
def test_every_online_gin_file_runs_at_tiny_size_and_writes_the_contract(gin_file, finished):
    experiment, metrics, root, _ = finished[_name(gin_file)]
    on_disk = json.loads((root / "metrics.json").read_text())
    assert set(on_disk) >= CONTRACT_KEYS
    algorithm = os.path.splitext(os.path.basename(gin_file))[0]
    env = "lunar_lander" if "lunar_lander" in gin_file else "bicycle"
    assert (on_disk["env"], on_disk["algorithm"], on_disk["K"], on_disk["seed"]) == (env, algorithm, K, 0)
    n_points = K + 1 + (EXTRA if algorithm == "prodqn" else 0)
    assert [c["k"] for c in on_disk["curve"]] == list(range(n_points))
    for entry in on_disk["curve"]:
        assert set(entry) == {"k"} | METRIC_KEYS[env]
        assert all(np.isfinite(v) for key, v in entry.items())
    assert on_disk["env_steps_per_s"] > 0 and on_disk["grad_steps_per_s"] > 0
    assert on_disk["train_steps"] == (K * 3 if algorithm == "dqn" else 2 * 3)
    assert metrics["curve"] == on_disk["curve"]

    config = (root / "config.gin").read_text()
    assert "OnlineExperiment.env" in config
    assert os.listdir(root / "tensorboard") and os.listdir(root / "checkpoints")
    assert os.path.exists(root / "policy" / "saved_model.pb")
    iterates = np.load(root / "iterates.npz")["iterates"]
    assert iterates.shape == (n_points, experiment.q.d)
    np.testing.assert_array_equal(iterates[0], experiment.q.initial_params(1, 0)[0])  # ω_0 = W[0]
    if algorithm == "dqn":  # ω_k = the online parameters at the k-th target update
        assert not np.allclose(iterates[1], iterates[0])
        np.testing.assert_array_equal(iterates[K], experiment.online_omega.numpy())

    # A complete folder is read back, not re-run.
    _parse(gin_file)
    again = OnlineExperiment(root_dir=str(root), log=None).run()
    assert again["curve"] == on_disk["curve"] and again["wall_time_s"] == on_disk["wall_time_s"]


def test_an_interrupted_run_resumes_from_its_checkpoint(finished):
    experiment, metrics, root, resume = finished[RESUMED]
    stopped, restored = resume["stopped"], resume["restored"]
    assert stopped["returned"] is None and not stopped["metrics_json"]  # stopped early, checkpointed
    assert stopped["train_step"] == stopped["optimizer_steps"] == 2
    assert stopped["env_steps"] == 40 + 2 * 2 and stopped["frames"] >= stopped["env_steps"]
    # The new experiment object restores the counters, the replay buffer, the optimizer and the PBO ...
    for key in ("train_step", "frames", "env_steps", "optimizer_steps"):
        assert restored[key] == stopped[key], key
    assert restored["initial_collect_done"]
    for got, saved in zip(restored["pbo"], stopped["pbo"], strict=True):
        np.testing.assert_array_equal(got, saved)
    # ... and continues: no second initial collect, the remaining 4 gradient steps, then the curve.
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
        obs = observations[experiment.env_name]
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


@pytest.mark.parametrize("fused", [False, True])
def test_make_adam_both_kinds_follow_adam_with_the_linear_schedule(fused):
    """`make_adam`'s fused kernel and the new-style optimizer both give Adam's update, with the learning rate
    annealed linearly, checked against the update written out in numpy."""
    from pbo_tf.experiments.online import make_adam
    from pbo_tf.trainers.base import linear_schedule

    rng = np.random.default_rng(0)
    start, end, steps = 1e-2, 2e-3, 4
    optimizer = make_adam(linear_schedule(start, end, steps), fused=fused)
    assert ("legacy" in type(optimizer).__module__) == fused
    w0 = rng.normal(size=(3, 2)).astype(np.float32)
    var = tf.Variable(w0)
    w, m, v = w0.astype(np.float64), np.zeros_like(w0, np.float64), np.zeros_like(w0, np.float64)
    for t in range(1, 7):
        grad = rng.normal(size=w0.shape).astype(np.float32)
        optimizer.apply_gradients([(tf.constant(grad), var)])
        lr = start + (end - start) * min(t - 1, steps) / steps
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad.astype(np.float64) ** 2
        w = w - lr * np.sqrt(1 - 0.999**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-7)
        np.testing.assert_allclose(var.numpy(), w, rtol=1e-5, atol=1e-6)
    assert np.abs(var.numpy() - w0).max() > 1e-2  # it moved
