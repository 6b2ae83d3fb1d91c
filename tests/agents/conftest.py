"""Shared by the agent tests: an online driver loop (ε-greedy collection into a replay buffer, train)."""

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.drivers import dynamic_step_driver
from tf_agents.replay_buffers.tf_uniform_replay_buffer import TFUniformReplayBuffer
from tf_agents.utils import common


def _run_online(tf_env, agent, steps, prefill=100, batch_size=64):
    """Online training: each iteration collects 2 ε-greedy environment steps with a DynamicStepDriver into a
    uniform replay buffer and then (after ``prefill`` collection-only iterations) runs one
    ``common.function(agent.train)`` step on a sampled batch; one compiled call per iteration (separate calls
    cost ~5x more per iteration here; ``buffer.as_dataset`` costs 5-15 s to build on this machine).

    Returns the losses of the ``steps`` train steps and the replay buffer.
    """
    buffer = TFUniformReplayBuffer(agent.collect_data_spec, batch_size=tf_env.batch_size, max_length=4000)
    driver = dynamic_step_driver.DynamicStepDriver(
        tf_env, agent.collect_policy, observers=[buffer.add_batch], num_steps=2
    )
    train = common.function(agent.train)

    def train_on_sample():
        experience, _ = buffer.get_next(sample_batch_size=batch_size, num_steps=2)
        return train(experience).loss

    @common.function
    def iteration(time_step, learn):
        time_step, _ = driver.run(time_step)
        return time_step, tf.cond(learn, train_on_sample, lambda: tf.constant(np.nan, tf.float32))

    time_step, losses = tf_env.reset(), []
    for i in range(prefill + steps):
        time_step, loss = iteration(time_step, tf.constant(i >= prefill))
        losses.append(float(loss))
    return losses[prefill:], buffer


@pytest.fixture
def run_online():
    """`_run_online` (see its docstring)."""
    return _run_online
