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
    from tf_agents.agents import tf_agent
    from tf_agents.typing import types
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.agents.networks import FlatQNetwork
from pbo_tf.agents.replay import ReplayAgent
from pbo_tf.configs import IDQNConfig
from pbo_tf.losses import iterated_bellman_loss
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


class IDQNAgent(ReplayAgent):
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
        if lr_schedule_steps is None:
            lr_schedule_steps = config.schedule().total_steps
        action_spec = self._prepare(
            config=config, q_family=q_family, action_spec=action_spec, optimizer=optimizer,
            lr_schedule_steps=lr_schedule_steps, label="i-DQN",
        )  # fmt: skip
        self._multi_q = MultiHeadQ(q_family, self.K + 1)
        if initial_params is None:
            initial_params = self._multi_q.initial_params(1, seed)[0]
        initial_params = np.asarray(initial_params, np.float32)
        if initial_params.size != self._multi_q.d:
            raise ValueError(
                f"initial_params must hold K + 1 = {self.K + 1} heads of {q_family.d} parameters "
                f"({self._multi_q.d} values), got shape {list(initial_params.shape)}"
            )
        self._gamma = float(gamma)
        network = FlatQNetwork(
            time_step_spec.observation, self._multi_q, initial_params=initial_params.reshape(-1), name="IDQN"
        )
        self._target = tf.Variable(initial_params.reshape(1, -1), trainable=False, name="target_heads")
        super().__init__(
            time_step_spec,
            action_spec,
            q_network=network,
            epsilon=epsilon,
            train_step_counter=train_step_counter,
        )
        self._build_optimizer([network.omega])  # Adam's slots exist before a checkpoint restores

    # ---------------------------------------------------------------------------------- properties
    @property
    def q_network(self) -> FlatQNetwork:
        """The policies' network: the last head of θ (``q_network.omega`` is θ, all heads)."""
        return self._q_network

    @property
    def multi_q(self) -> MultiHeadQ:
        return self._multi_q

    @property
    def target_params(self) -> tf.Variable:
        """The frozen copy θ̄, ``[1, (K + 1) · d]``."""
        return self._target

    def heads(self) -> np.ndarray:
        """The heads ``ω_0 .. ω_K`` of θ, ``[K + 1, d]`` (``q_family`` vectors: the curve's iterates)."""
        return self._multi_q.heads(self._q_network.omega[None]).numpy()[0]

    # --------------------------------------------------------------------------------- TFAgent API
    def _initialize(self):
        self._target.assign(self._q_network.omega[None])

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
        gradients = self._clipped(tape.gradient(loss, variables))
        self._apply_unless_skipped(skipped, list(zip(gradients, variables, strict=True)))
        self._skipped_batches.assign_add(tf.cast(skipped, tf.int64))
        self.train_step_counter.assign_add(1)
        self._target.assign(tf.where(self._refresh_due(), self._q_network.omega[None], self._target))
        loss = tf.where(skipped, 0.0, loss)
        if self.summaries_enabled:
            tf.compat.v2.summary.scalar("losses/idqn_loss", loss, step=self.train_step_counter)
            tf.compat.v2.summary.scalar("epsilon", self.epsilon(), step=self.train_step_counter)
        return tf_agent.LossInfo(loss=loss, extra=IDQNLossInfo(self.epsilon(), valid, skipped))
