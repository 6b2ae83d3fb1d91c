"""What ProDQN and i-DQN share of the TF-Agents contract: `ReplayAgent`, their base class (the optimizer and
its schedule, the action spec's check, the greedy and ε-greedy policies over one Q network, the replay
experience as transitions with episode-boundary pairs dropped, the skipped batches, the refresh period),
and the collect policy's linear ε."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

try:
    from tf_agents.agents import data_converter, tf_agent
    from tf_agents.policies import epsilon_greedy_policy, greedy_policy, q_policy
    from tf_agents.specs import tensor_spec
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.optimizers import build_optimizer, resolve_optimizer
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


class ReplayAgent(tf_agent.TFAgent):
    """The base of ProDQN's and i-DQN's agents: a `TFAgent` trained on replay pairs ``[B, 2]`` with one Q
    network acting for both policies (`GreedyPolicy` and `EpsilonGreedyPolicy` over its `QPolicy`).

    A subclass calls `_prepare` first (the optimizer, the config and the counters), builds its Q network and
    whatever it trains, then ``super().__init__``. Checkpoint names: the base's tracked attributes are
    ``_optimizer``, ``_skipped_batches`` and ``_q_network``.

    Args:
      time_step_spec: the environment's time step spec.
      action_spec: the (checked) action spec.
      q_network: the policies' network.
      epsilon: the collect policy's ε, a float or a zero-argument callable.
      train_step_counter: the training step variable (default: the global step).
      **agent_options: `TFAgent`'s ``debug_summaries``, ``summarize_grads_and_vars``, ``enable_summaries``.
    """

    def _prepare(
        self, *, config, q_family, action_spec, optimizer, lr_schedule_steps: int, label: str, name=None
    ):
        """The pieces every replay agent has, before its network: the module's name, the tf_keras optimizer
        (an `pbo_tf.optimizers.AnnealedAdam` annealed over ``lr_schedule_steps`` Adam steps, or a tf_keras
        optimizer as given), the config and its schedule, the refresh period, the gradient clipping and the
        skipped-batch counter; returns the checked action spec (``label`` names the agent in errors)."""
        tf.Module.__init__(self, name=name)
        self._optimizer, self._lr_schedule = resolve_optimizer(optimizer, lr_schedule_steps)
        self._config = config
        self._schedule = config.schedule()
        self._train_steps_per_refresh = self._schedule.steps_per_refresh
        self._gradient_clipping = config.gradient_clipping
        self._skipped_batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_batches")
        return check_action_spec(action_spec, q_family, label)

    def __init__(
        self, time_step_spec, action_spec, *, q_network, epsilon, train_step_counter, **agent_options
    ):
        self._q_network = q_network
        q_network.create_variables()
        if train_step_counter is None:
            train_step_counter = tf.compat.v1.train.get_or_create_global_step()
        self._epsilon_greedy = epsilon
        base_policy = q_policy.QPolicy(time_step_spec, action_spec, q_network=q_network)
        policy = greedy_policy.GreedyPolicy(base_policy)
        collect_policy = epsilon_greedy_policy.EpsilonGreedyPolicy(base_policy, epsilon=epsilon)
        super().__init__(
            time_step_spec,
            action_spec,
            policy,
            collect_policy,
            train_sequence_length=2,
            train_step_counter=train_step_counter,
            **agent_options,
        )
        self._as_transition = data_converter.AsTransition(self.data_context, squeeze_time_dim=True)

    def _build_optimizer(self, variables) -> None:
        """Adam's slots now, so that a checkpoint restores them before the first training step."""
        build_optimizer(self._optimizer, variables)

    # ---------------------------------------------------------------------------------- properties
    @property
    def q_network(self):
        """The policies' network (shared by ``policy`` and ``collect_policy``)."""
        return self._q_network

    @property
    def config(self):
        """The agent's hyper-parameters (`pbo_tf.configs`)."""
        return self._config

    @property
    def K(self) -> int:
        """Bellman iterations: the config's schedule's."""
        return self._schedule.K

    @property
    def optimizer(self):
        """The tf_keras optimizer (the one an `AnnealedAdam` made, or the one given); its step count is the
        number of Adam steps."""
        return self._optimizer

    @property
    def lr_schedule(self):
        """The learning-rate schedule of an `AnnealedAdam` ``optimizer`` (None for a tf_keras optimizer)."""
        return self._lr_schedule

    @property
    def skipped_batches(self) -> tf.Variable:
        """Replay batches that held no transition and took no Adam step (int64, checkpointed)."""
        return self._skipped_batches

    @property
    def train_steps_per_refresh(self) -> int:
        """Training steps between two target refreshes."""
        return self._train_steps_per_refresh

    def epsilon(self) -> tf.Tensor:
        """The collect policy's current ε."""
        value = self._epsilon_greedy() if callable(self._epsilon_greedy) else self._epsilon_greedy
        return tf.cast(value, tf.float32)

    # ------------------------------------------------------------------------------------- helpers
    def _replay_batch(self, experience) -> tuple[dict, tf.Tensor]:
        """The loss's transitions (boundary pairs dropped) and the number of them."""
        return valid_transitions(self._as_transition(experience))

    def _clipped(self, gradients):
        """The gradients clipped to the config's global norm (unchanged without ``gradient_clipping``)."""
        if self._gradient_clipping is None:
            return gradients
        return tf.clip_by_global_norm(gradients, self._gradient_clipping)[0]

    def _apply_unless_skipped(self, skipped, grads_and_vars):
        """One Adam step with ``grads_and_vars``, or none when the replay batch held no transition."""

        def apply():
            self._optimizer.apply_gradients(grads_and_vars)
            return tf.constant(True)

        return tf.cond(skipped, lambda: tf.constant(False), apply)

    def _refresh_due(self) -> tf.Tensor:
        """After the training step counter's increment: whether the count is a multiple of the refresh
        period."""
        return tf.equal(tf.math.floormod(self.train_step_counter, self._train_steps_per_refresh), 0)
