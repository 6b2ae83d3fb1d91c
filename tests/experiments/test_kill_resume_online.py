"""Kill and resume, online: `launch/train.py` on bicycle ProDQN SIGKILLed at the start, the middle and the
end of its training (tests/experiments/kill_resume.py), relaunched into the same folder after each kill. A
continuation, not a replay: the run finishes; its training step, environment step and Adam step counters and
the transitions in its replay buffer equal the uninterrupted run's; the buffer holds what each killed launch
had checkpointed, then what the relaunches added, and the same initial collect; ε and the learning rate end
where the uninterrupted run's end.
"""

import json
import os

import gin
import numpy as np
import pytest
import tensorflow as tf
from kill_resume import (  # tests/experiments/ is on sys.path (pytest prepends it)
    ONLINE,
    ONLINE_CONFIG,
    ONLINE_GIN,
    TRAIN_STEPS,
    assert_ran_on,
    assert_restored_the_latest,
    baseline,
    kill_and_resume,
    rounds_run,
)
from tf_agents.trajectories import time_step as ts

from pbo_tf.experiments.config import parse_config
from pbo_tf.experiments.online import OnlineExperiment


def online_state(root) -> dict | None:
    """What a relaunch restores from the online run folder's latest checkpoint (None without one): the
    counters, ε and the learning rate, and the replay buffer's frames (``[frames]`` step types,
    ``[frames, ...]`` observations and actions, in the order added)."""
    if tf.train.latest_checkpoint(os.path.join(root, "checkpoints")) is None:
        return None
    parse_config([ONLINE_GIN], ONLINE)
    try:
        e = OnlineExperiment(root_dir=str(root), log=None)
        e.build()  # restores the latest checkpoint
        stored = e.replay_buffer.gather_all()
        state = {
            "train_step": int(e.train_step.numpy()),
            "env_steps": int(e.env_steps.result().numpy()),
            "adam_steps": int(e.algorithm.optimizer.iterations.numpy()),
            "epsilon": float(e.epsilon_fn().numpy()),
            "learning_rate": float(e.algorithm.lr_schedule(e.algorithm.optimizer.iterations).numpy()),
            "frames": int(e.replay_buffer.num_frames().numpy()),
            "step_type": stored.step_type[0].numpy(),
            "observation": stored.observation[0].numpy(),
            "action": stored.action[0].numpy(),
            "initial_collect_steps": e.collector.initial_collect_steps,
        }
    finally:
        gin.clear_config()
    assert len(state["step_type"]) == state["frames"]
    state["transitions"] = int(np.sum(~np.equal(state["step_type"], ts.StepType.LAST)))
    return state


@pytest.fixture(scope="module")
def online_baseline(tmp_path_factory):
    base = baseline(ONLINE_CONFIG, tmp_path_factory.mktemp("online_baseline"))
    return base, online_state(base.root)


def test_an_online_run_killed_three_times_continues_to_the_same_counters_buffer_and_schedules(
    online_baseline, tmp_path
):
    base, want = online_baseline
    trials = kill_and_resume(ONLINE_CONFIG, base, tmp_path, after_kill=online_state)
    for run in trials:
        # Each relaunch restored the newest checkpoint (ckpt-N after training step N; ckpt-0 after the
        # initial collect) and ran training steps N+1.. only (to 20 for the last), without a second initial
        # collect; with no checkpoint at the kill it starts over: the initial collect, then every training
        # step.
        assert_restored_the_latest(run, tmp_path)
        saved = run.checkpoints_at_kill.get("checkpoints")
        assert run.resumed.text.count("initial collect: ") == (saved is None), run.where
        first = 1 if saved is None else saved + 1
        assert_ran_on(run, rounds_run(run.resumed, ONLINE_CONFIG.step), first, TRAIN_STEPS)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    base_metrics = json.loads((base.root / "metrics.json").read_text())
    for key in ("env_steps", "train_steps", "adam_steps"):
        assert metrics[key] == base_metrics[key], key
    assert [c["k"] for c in metrics["curve"]] == [c["k"] for c in base_metrics["curve"]]
    got = online_state(tmp_path)
    assert (got["train_step"], got["adam_steps"], got["env_steps"]) == (TRAIN_STEPS, 2 * TRAIN_STEPS, 80)
    # The counters, the schedules and the transitions collected end where the uninterrupted run's do.
    for key in ("train_step", "env_steps", "adam_steps", "epsilon", "learning_rate", "transitions"):
        assert got[key] == want[key], key
    assert got["transitions"] == got["env_steps"]
    # The buffer is intact: what each killed launch had checkpointed, then what the relaunches added. A
    # relaunch starts a new episode, so its episode ends fall elsewhere and the buffer's boundary frames
    # (LAST -> FIRST) may number one fewer or more than the uninterrupted run's: its transitions are compared.
    for run in trials:
        at_kill = run.at_kill
        kept = 0 if at_kill is None else at_kill["frames"]
        if at_kill is not None:
            assert at_kill["transitions"] == at_kill["env_steps"]
            for key in ("step_type", "observation", "action"):
                np.testing.assert_array_equal(got[key][:kept], at_kill[key], err_msg=f"{run.where}: {key}")
        print(
            f"\n{run.where}; checkpoint at the kill: train step "
            f"{None if at_kill is None else at_kill['train_step']}, {kept} frames"
        )
    # The initial collect (restored, or collected again from the same seed) is the uninterrupted run's.
    n = want["initial_collect_steps"]
    for key in ("step_type", "observation", "action"):
        np.testing.assert_array_equal(got[key][:n], want[key][:n], err_msg=key)
    print(
        f"ends at train step {got['train_step']}, env steps {got['env_steps']}, {got['transitions']} "
        f"transitions in {got['frames']} frames (uninterrupted: {want['frames']}), ε {got['epsilon']:.4g}, "
        f"learning rate {got['learning_rate']:.4g}"
    )
