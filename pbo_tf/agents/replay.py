"""What ProDQN and i-DQN share of the TF-Agents contract: the collect policy's linear ε, the replay
experience as transitions (episode-boundary pairs dropped) and the check of the action spec."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

try:
    from tf_agents.specs import tensor_spec
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.q.base import QFamily


def linear_epsilon(
    train_step_counter: tf.Variable, decay_steps: int, start: float = 1.0, end: float = 0.01
) -> Callable[[], tf.Tensor]:
    """ε as a callable of a counter: linear from ``start`` to ``end`` over ``decay_steps`` counts, then flat.

    With an agent's ``train_step_counter`` the unit is its train steps (ProDQN: training steps).
    """
    if decay_steps < 1:
        raise ValueError(f"decay_steps must be >= 1, got {decay_steps}")

    def epsilon() -> tf.Tensor:
        fraction = tf.minimum(tf.cast(train_step_counter, tf.float32) / float(decay_steps), 1.0)
        return start + (end - start) * fraction

    return epsilon


def experience_to_batch(transition) -> tuple[dict, tf.Tensor]:
    """A TF-Agents `Transition` (time dimension squeezed) → the loss's transition dict and the validity mask.

    Returns:
      ``(batch, valid)``: ``batch`` holds ``state``, ``action``, ``reward``, ``next_state`` and
      ``done = 1 − next discount`` for every pair (``[B, …]``); ``valid [B]`` (bool) is False for episode
      boundary pairs, whose first time step is LAST.
    """
    time_steps, policy_steps, next_time_steps = transition
    batch = {
        "state": time_steps.observation,
        "action": tf.cast(policy_steps.action, tf.int32),
        "reward": tf.cast(next_time_steps.reward, tf.float32),
        "next_state": next_time_steps.observation,
        "done": 1.0 - tf.cast(next_time_steps.discount, tf.float32),
    }
    return batch, ~time_steps.is_last()


def valid_transitions(transition) -> tuple[dict, tf.Tensor]:
    """`experience_to_batch` with the episode-boundary pairs dropped: ``(batch, number of transitions)``."""
    batch, valid = experience_to_batch(transition)
    batch = {key: tf.boolean_mask(value, valid) for key, value in batch.items()}
    return batch, tf.reduce_sum(tf.cast(valid, tf.int32))


def check_action_spec(action_spec, q_family: QFamily, agent: str):
    """The action spec as a `BoundedTensorSpec`, checked: one scalar integer action 0..|A|−1 of the Q family.

    Raises:
      ValueError: another spec, naming ``agent`` and the spec.
    """
    action_spec = tensor_spec.from_spec(action_spec)
    flat_actions = tf.nest.flatten(action_spec)
    if len(flat_actions) != 1 or flat_actions[0].shape.rank != 0 or not flat_actions[0].dtype.is_integer:
        raise ValueError(f"{agent} needs one scalar integer action, got the spec {action_spec}")
    spec = flat_actions[0]
    if int(spec.minimum) != 0 or int(spec.maximum) + 1 != q_family.n_actions:
        raise ValueError(
            f"the action spec [{spec.minimum}, {spec.maximum}] must be 0..{q_family.n_actions - 1}, "
            f"the Q family's {q_family.n_actions} actions"
        )
    return action_spec
