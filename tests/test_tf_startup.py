"""TensorFlow's start-up lines and TF-Agents' deprecation notices are dropped at their source
(`pbo_tf.tf_startup`), and nothing else is: a subprocess that imports pbo_tf and uses TensorFlow prints no
``failed call to cuInit`` line and no start-up line on a CPU run, but does print an error line written after
the import; a tiny online run prints no deprecation notice; other notices pass."""

import logging
import os
import subprocess
import sys

from pbo_tf import tf_startup

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_env() -> dict:
    """The environment of a user who set neither TF_CPP_MIN_LOG_LEVEL nor PBO_TF_VERBOSE, on the CPU."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "PBO_TF_VERBOSE")}
    if not tf_startup.cpu_run():
        env["CUDA_VISIBLE_DEVICES"] = ""  # a machine with a driver: hide its GPUs, a CPU run too
    env["PYTHONPATH"] = REPO
    return env


def test_importing_pbo_tf_and_using_tensorflow_prints_no_start_up_line_but_real_errors():
    code = (
        "import os, sys\n"
        "import pbo_tf\n"
        "from pbo_tf.q import TableQ\n"  # imports TensorFlow
        "import tensorflow as tf\n"
        "assert float(tf.reduce_sum(tf.ones(3))) == 3.0\n"
        "os.write(2, b'E0000 00:00:0.0 1 x.cc:1] an error after the import\\n')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_user_env(), timeout=300, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == ["E0000 00:00:0.0 1 x.cc:1] an error after the import"], out.stderr


def test_only_tf_agents_own_deprecation_notices_are_dropped():
    logger = logging.getLogger("test_tf_startup")
    logger.addFilter(tf_startup.TFAgentsDeprecationFilter())
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    logger.propagate = False
    get_next = (
        "From x.py:1: ReplayBuffer.get_next (from tf_agents.replay_buffers.replay_buffer) is deprecated"
    )
    foldr = "calling foldr_v2 (from tensorflow.python.ops.functional_ops) with back_prop=False is deprecated"
    logger.warning(get_next)
    logger.warning(foldr)  # a user's own foldr: kept
    logger.warning("calling something_else (from x) is deprecated")
    inside = os.path.join("site-packages", "tf_agents", "utils", "value_ops.py")
    exec(compile("logger.warning(foldr)", inside, "exec"), {"logger": logger, "foldr": foldr})  # TF-Agents'
    logger.warning(  # every seed's own train-return metric in one process: dropped
        "5 out of the last 7 calls to <function TFDeque.mean at 0x7f7d> triggered tf.function retracing."
    )
    retrace = "5 out of the last 7 calls to <function my_step at 0x7f> triggered tf.function retracing."
    logger.warning(retrace)  # a user's own function: kept
    assert [r.getMessage() for r in records] == [
        foldr, "calling something_else (from x) is deprecated", retrace
    ]  # fmt: skip


def test_an_online_run_prints_no_deprecation_notice(tmp_path):
    bindings = [
        "K=2", "EXTRA_ITERATIONS=1", "DQN_TRAIN_STEPS_PER_REFRESH=3", "INITIAL_COLLECT_STEPS=40",
        "REPLAY_CAPACITY=300", "BATCH_SIZE=16", "N_EVAL_EPISODES=1", "EVAL_MAX_STEPS=20",
        "BicycleOnlineEnv.hidden=[8]", "BicycleOnlineEnv.eval_jit_compile=False",
        "DQNConfig.jit_compile=False",
    ]  # fmt: skip
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "launch", "train.py"),
         "--gin_file=gin_configs/bicycle_online/dqn.gin", f"--root_dir={tmp_path / 'run'}",
         *(f"--gin_bindings={b}" for b in bindings)],
        capture_output=True, text=True, env=_user_env(), timeout=300, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr  # no "ReplayBuffer.get_next ... is deprecated", no foldr notice
    assert "done: balancing_time_s" in out.stdout
