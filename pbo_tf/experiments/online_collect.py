"""How an online run collects its experience and samples its replay batches, configured by gin.

A `TFUniformReplayBuffer` of ``replay_capacity`` frames (the table's "max #D"), filled first by a random
policy for ``initial_collect_steps`` environment steps (the table's "#D") and then, at every training step,
by a `DynamicStepDriver` running the agent's ε-greedy collect policy for ``steps_per_update`` environment
steps; each training step trains on one replay batch of ``batch_size`` pairs of consecutive time steps
(``as_dataset(sample_batch_size=batch_size, num_steps=2)``), as TF-Agents' DQN ``train_eval`` example.
"""

from __future__ import annotations

import gin
import tensorflow as tf

try:
    from tf_agents.drivers import dynamic_step_driver
    from tf_agents.policies import random_tf_policy
    from tf_agents.replay_buffers import tf_uniform_replay_buffer
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.tf_startup import install_tf_agents_filter

# TensorFlow's deprecation notices about TF-Agents' own calls (ReplayBuffer.get_next, foldr's back_prop)
install_tf_agents_filter()


@gin.configurable
class Collector:
    """The replay buffer, its two drivers and its replay batches (see the module docstring).

    Args:
      initial_collect_steps: random-policy environment steps before training (at least one pair).
      steps_per_update: environment steps collected by the ε-greedy policy at every training step.
      replay_capacity: frames the replay buffer holds.
      batch_size: transitions (pairs) per replay batch, one batch per training step.
    """

    def __init__(
        self,
        initial_collect_steps: int = 1000,
        steps_per_update: int = 2,
        replay_capacity: int = 20_000,
        batch_size: int = 500,
    ):
        for key, value in dict(
            steps_per_update=steps_per_update, replay_capacity=replay_capacity, batch_size=batch_size
        ).items():
            if int(value) < 1:
                raise ValueError(f"{key} must be >= 1, got {value}")
        if int(initial_collect_steps) < 2:
            raise ValueError(
                f"initial_collect_steps must be >= 2 (one pair to sample), got {initial_collect_steps}"
            )
        self.initial_collect_steps = int(initial_collect_steps)
        self.steps_per_update = int(steps_per_update)
        self.replay_capacity = int(replay_capacity)
        self.batch_size = int(batch_size)

    def build(self, tf_env, collect_policy, data_spec, env_steps, train_metrics) -> None:
        """Creates ``replay_buffer``, ``initial_driver`` (random policy; observers: the buffer and
        ``env_steps``) and ``collect_driver`` (``collect_policy``; the buffer and ``train_metrics``)."""
        self.replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
            data_spec, batch_size=tf_env.batch_size, max_length=self.replay_capacity
        )
        self.initial_driver = dynamic_step_driver.DynamicStepDriver(
            tf_env,
            random_tf_policy.RandomTFPolicy(tf_env.time_step_spec(), tf_env.action_spec()),
            observers=[self.replay_buffer.add_batch, env_steps],
            num_steps=self.initial_collect_steps,
        )
        self.collect_driver = dynamic_step_driver.DynamicStepDriver(
            tf_env,
            collect_policy,
            observers=[self.replay_buffer.add_batch] + list(train_metrics),
            num_steps=self.steps_per_update,
        )

    def replay_dataset(self) -> tf.data.Dataset:
        """The dataset of replay batches: ``(trajectories [batch_size, 2], info)``. Its sampling ops take
        their seeds from TensorFlow's global seed when it is made.

        tf.data's autotuning is off (the sampling runs on as many threads as there are cores, two batches
        prefetched): an autotuned iterator's tuning thread sleeps for a period that doubles up to a minute,
        and deleting the iterator waits for it to wake, up to a minute per iterator at the end of a run
        (S of them, one after the other, at the end of a batched run)."""
        options = tf.data.Options()
        options.autotune.enabled = False
        dataset = self.replay_buffer.as_dataset(
            sample_batch_size=self.batch_size, num_steps=2, num_parallel_calls=tf.data.AUTOTUNE
        ).prefetch(2)
        return dataset.with_options(options)

    def replay_batches(self):
        """An iterator of replay batches (`replay_dataset`)."""
        return iter(self.replay_dataset())
