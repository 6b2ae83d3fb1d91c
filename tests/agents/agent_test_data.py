"""Shared by the agent tests (imported by name: pytest puts this folder on sys.path)."""

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import trajectory


def pairs(rows):
    """Trajectories ``[B, 2]`` from ``(step_type, next_step_type, s, a, r, discount, s')`` per pair.

    The second time step of each pair only contributes its observation (`trajectory.to_transition`).
    """
    step, next_step, s, a, r, disc, s2 = (np.asarray(c) for c in zip(*rows, strict=True))

    def two(first, second, dtype):
        return tf.constant(np.stack([first, second], axis=1), dtype)

    return trajectory.Trajectory(
        step_type=two(step, next_step, tf.int32),
        observation=two(s, s2, tf.int32),
        action=two(a, a, tf.int32),
        policy_info=(),
        next_step_type=two(next_step, next_step, tf.int32),
        reward=two(r, r, tf.float32),
        discount=two(disc, disc, tf.float32),
    )
