"""i-DQN, the reference code's iterated online baseline, as a TF-Agents `TFAgent`.

One `pbo_tf.q.multi_head.MultiHeadQ` with K + 1 heads, its flat parameters θ the trainable variable of a
`FlatQNetwork`; head k is fitted to head k − 1's Bellman target under a frozen copy θ̄
(`pbo_tf.losses.iterated_bellman_loss`, the loss i-FQI uses), head 0 has no term. The loop is the
reference's (``experiments/base/IDQN.py``): every ``train_steps_per_refresh`` training steps ``θ̄ ← θ``; a
training step collects ``steps_per_update`` environment steps ε-greedy on the **last** head (the driver's
part) and takes one Adam step on one replay batch (`train`).

The replay experience is consumed as ProDQN consumes it (`pbo_tf.agents.replay.experience_to_batch`):
trajectories ``[B, 2]``, episode-boundary pairs dropped, ``done = 1 − next discount``. The policies are
TF-Agents' own: `GreedyPolicy` and `EpsilonGreedyPolicy` over a `QPolicy` of the network, which evaluates
the last head, so they go into drivers and `PolicySaver` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import tensorflow as tf

try:
    from tf_agents.agents import data_converter, tf_agent
    from tf_agents.policies import epsilon_greedy_policy, greedy_policy, q_policy
    from tf_agents.typing import types
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.agents.networks import FlatQNetwork
from pbo_tf.agents.replay import check_action_spec, valid_transitions
from pbo_tf.configs import IDQNConfig
from pbo_tf.losses import iterated_bellman_loss
from pbo_tf.optimizers import build_optimizer, resolve_optimizer
from pbo_tf.q.base import QFamily
from pbo_tf.q.multi_head import MultiHeadQ


class IDQNLossInfo(NamedTuple):
    """The ``extra`` of i-DQN's `LossInfo`.

    Attributes:
      epsilon: the collect policy's ε at this training step.
      valid_transitions: transitions in the replay batch (boundary pairs removed), int32.
      skipped: True when the replay batch held no transition: no Adam step, loss reported as 0.
    """

    epsilon: tf.Tensor
    valid_transitions: tf.Tensor
    skipped: tf.Tensor


class IDQNAgent(tf_agent.TFAgent):
    """i-DQN as a TF-Agents agent (see the module docstring). Every argument is a keyword.

    Args:
      time_step_spec: the environment's time step spec.
      action_spec: a scalar integer `BoundedTensorSpec` with minimum 0 and ``|A|`` values.
      q_family: the family of every head (its ``n_actions`` must equal the action spec's).
      config: the hyper-parameters (`pbo_tf.configs.IDQNConfig`): K (the network has K + 1 heads), the
        refreshes ``θ̄ ← θ`` every ``train_steps_per_refresh`` training steps, the gradient clipping.
      gamma: discount factor.
      optimizer: the optimizer of θ: an `pbo_tf.optimizers.AnnealedAdam`, which the agent calls with
        ``lr_schedule_steps`` (Adam with its learning rate annealed linearly over that many Adam steps, one
        per training step), or a tf_keras optimizer, used with its own learning rate.
      epsilon: the collect policy's ε, a float or a zero-argument callable (e.g.
        `pbo_tf.agents.replay.linear_epsilon`).
      seed: seed of the default initial parameters.
      initial_params: the heads' starting vectors, ``[K + 1, d]`` or flat; default
        ``MultiHeadQ(q_family, K + 1).initial_params(1, seed)[0]`` (head 0 the seed's ω_0).
      train_step_counter: as `TFAgent`.
      lr_schedule_steps: the Adam steps an `AnnealedAdam` ``optimizer`` anneals over (default the run's,
        ``refreshes × train_steps_per_refresh``).

    Raises:
      TypeError: an ``optimizer`` that is neither an `AnnealedAdam` nor a tf_keras optimizer.
      ValueError: a non-scalar or non-integer action spec, an action count that is not the family's, or
        initial parameters that are not K + 1 heads of the family.
    """

    def __init__(
        self,
        *,
        time_step_spec: types.TimeStep,
        action_spec: types.BoundedTensorSpec,
        q_family: QFamily,
        config: IDQNConfig,
        gamma: float,
        optimizer,
        epsilon: float | Callable[[], tf.Tensor],
        seed: int = 0,
        initial_params=None,
        train_step_counter: tf.Variable | None = None,
        lr_schedule_steps: int | None = None,
    ):
        tf.Module.__init__(self, name=None)
        if lr_schedule_steps is None:
            lr_schedule_steps = config.schedule().total_steps
        optimizer, self._lr_schedule = resolve_optimizer(optimizer, lr_schedule_steps)
        action_spec = check_action_spec(action_spec, q_family, "i-DQN")
        self.config = config
        self._K = config.K
        self._multi_q = MultiHeadQ(q_family, self._K + 1)
        if initial_params is None:
            initial_params = self._multi_q.initial_params(1, seed)[0]
        initial_params = np.asarray(initial_params, np.float32)
        if initial_params.size != self._multi_q.d:
            raise ValueError(
                f"initial_params must hold K + 1 = {self._K + 1} heads of {q_family.d} parameters "
                f"({self._multi_q.d} values), got shape {list(initial_params.shape)}"
            )
        self._gamma = float(gamma)
        self._optimizer = optimizer
        self._train_steps_per_refresh = config.train_steps_per_refresh
        self._gradient_clipping = config.gradient_clipping
        self._skipped_batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_batches")

        self._q_network = FlatQNetwork(
            time_step_spec.observation, self._multi_q, initial_params=initial_params.reshape(-1), name="IDQN"
        )
        self._q_network.create_variables()
        self._target = tf.Variable(initial_params.reshape(1, -1), trainable=False, name="target_heads")
        build_optimizer(optimizer, [self._q_network.omega])  # Adam's slots exist before a checkpoint restores

        if train_step_counter is None:
            train_step_counter = tf.compat.v1.train.get_or_create_global_step()
        self._epsilon_greedy = epsilon
        base_policy = q_policy.QPolicy(time_step_spec, action_spec, q_network=self._q_network)
        policy = greedy_policy.GreedyPolicy(base_policy)
        collect_policy = epsilon_greedy_policy.EpsilonGreedyPolicy(base_policy, epsilon=epsilon)
        super().__init__(
            time_step_spec,
            action_spec,
            policy,
            collect_policy,
            train_sequence_length=2,
            train_step_counter=train_step_counter,
        )
        self._as_transition = data_converter.AsTransition(self.data_context, squeeze_time_dim=True)

    # ---------------------------------------------------------------------------------- properties
    @property
    def q_network(self) -> FlatQNetwork:
        """The policies' network: the last head of θ (``q_network.omega`` is θ, all heads)."""
        return self._q_network

    @property
    def multi_q(self) -> MultiHeadQ:
        return self._multi_q

    @property
    def K(self) -> int:
        return self._K

    @property
    def optimizer(self):
        """The tf_keras optimizer of θ (the one an `AnnealedAdam` made, or the one given)."""
        return self._optimizer

    @property
    def lr_schedule(self):
        """The learning-rate schedule of an `AnnealedAdam` ``optimizer`` (None for a tf_keras optimizer)."""
        return self._lr_schedule

    @property
    def target_params(self) -> tf.Variable:
        """The frozen copy θ̄, ``[1, (K + 1) · d]``."""
        return self._target

    @property
    def skipped_batches(self) -> tf.Variable:
        """Replay batches that held no transition and took no Adam step."""
        return self._skipped_batches

    @property
    def train_steps_per_refresh(self) -> int:
        return self._train_steps_per_refresh

    def heads(self) -> np.ndarray:
        """The heads ``ω_0 .. ω_K`` of θ, ``[K + 1, d]`` (``q_family`` vectors: the curve's iterates)."""
        return self._multi_q.heads(self._q_network.omega[None]).numpy()[0]

    def epsilon(self) -> tf.Tensor:
        """The collect policy's current ε."""
        value = self._epsilon_greedy() if callable(self._epsilon_greedy) else self._epsilon_greedy
        return tf.cast(value, tf.float32)

    # --------------------------------------------------------------------------------- TFAgent API
    def _initialize(self):
        self._target.assign(self._q_network.omega[None])

    def _replay_batch(self, experience) -> tuple[dict, tf.Tensor]:
        return valid_transitions(self._as_transition(experience))

    def _batch_loss(self, batch):
        return iterated_bellman_loss(
            self._multi_q, self._q_network.omega[None], batch, self._gamma, target_params=self._target
        )

    def _loss(self, experience: types.NestedTensor, weights: types.Tensor | None = None, training=False):
        """The iterated loss at the current θ on the replay batch."""
        if weights is not None:
            raise NotImplementedError("i-DQN's loss does not support per-sample weights")
        batch, valid = self._replay_batch(experience)
        skipped = tf.equal(valid, 0)
        loss = tf.where(skipped, 0.0, self._batch_loss(batch))
        return tf_agent.LossInfo(loss=loss, extra=IDQNLossInfo(self.epsilon(), valid, skipped))

    def _train(self, experience: types.NestedTensor, weights: types.Tensor | None = None):
        """One training step: one Adam step on the replay batch, the counter, and ``θ̄ ← θ`` when due."""
        if weights is not None:
            raise NotImplementedError("i-DQN's loss does not support per-sample weights")
        batch, valid = self._replay_batch(experience)
        skipped = tf.equal(valid, 0)
        variables = [self._q_network.omega]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(variables)
            loss = self._batch_loss(batch)
        gradients = tape.gradient(loss, variables)
        if self._gradient_clipping is not None:
            gradients, _ = tf.clip_by_global_norm(gradients, self._gradient_clipping)

        def apply():
            self._optimizer.apply_gradients(list(zip(gradients, variables, strict=True)))
            return tf.constant(True)

        tf.cond(skipped, lambda: tf.constant(False), apply)
        self._skipped_batches.assign_add(tf.cast(skipped, tf.int64))
        self.train_step_counter.assign_add(1)
        due = tf.equal(tf.math.floormod(self.train_step_counter, self._train_steps_per_refresh), 0)
        self._target.assign(tf.where(due, self._q_network.omega[None], self._target))
        loss = tf.where(skipped, 0.0, loss)
        if self.summaries_enabled:
            tf.compat.v2.summary.scalar("losses/idqn_loss", loss, step=self.train_step_counter)
            tf.compat.v2.summary.scalar("epsilon", self.epsilon(), step=self.train_step_counter)
        return tf_agent.LossInfo(loss=loss, extra=IDQNLossInfo(self.epsilon(), valid, skipped))
