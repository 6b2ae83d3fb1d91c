"""ProDQN (paper Algorithm 1, online): a TF-Agents `TFAgent` that learns a PBO ``Λ_φ`` from replay batches.

Algorithm 1 in its online form: for each of the E epochs (target refreshes) ``φ̄ ← φ``, then the training
steps, each of which collects ``steps_per_update`` environment steps with the ε-greedy policy on
``Q_{Λ_φ^K(ω_0)}``, samples one replay batch and takes one Adam step per batch of W on it. The collection is
the driver's (`pbo_tf.experiments.online`); each `train` call is the rest of one training step:

* ``D_b``: the replay experience, trajectories ``[B, 2]`` exactly as `DqnAgent` consumes them
  (``train_sequence_length = 2``), converted to ``{state, action, reward, next_state, done}`` with
  ``done = 1 − discount`` of the next time step. The adapter gives terminations discount 0 and truncations
  discount 1, so truncated episodes bootstrap; an environment discount ``c ∈ (0, 1)`` gives ``γ·c`` like
  `DqnAgent`'s ``gamma * discount``. Episode-boundary pairs (first step LAST, second FIRST of the next
  episode) are not transitions and are dropped before the loss (`DqnAgent` zeroes them instead; here the
  mean runs over the valid transitions only);
* the W batches: the fixed set W of Algorithm 1 in an order shuffled statelessly by ``(seed, train_step)``
  (so a run restored from a checkpoint draws the same order), cut into consecutive batches of
  ``w_batch_size`` rows (the last one smaller when ``w_batch_size`` does not divide ``|W|``, as the
  reference's loader); all of W in one batch by default;
* one Adam step on the learner's loss (`pbo_tf.learner.PBOLearner`: the config's loss terms, the very
  object the offline ProFQI trainer uses) per W batch, all on the same ``D_b``, each from the weights the
  previous one left;
* the target chain ``Λ̄^{k−1}(ω)``, k = 1..K, of a target PBO ``φ̄``: a second operator of the same
  configuration, set to ``φ`` at construction and then updated after every ``train_steps_per_refresh``-th
  training step as ``φ̄ ← τ φ + (1 − τ) φ̄`` (``τ = target_update_tau``; τ = 1 is the paper's hard copy).

``train_step_counter`` counts training steps (one per `train` call); ``optimizer.iterations`` counts Adam
steps (`adam_steps_per_train_step` per call). `train` returns `LossInfo` whose loss and ``extra`` are means
over the training step's W batches; ``extra.metrics`` holds the loss terms' metrics
(`pbo_tf.loss_terms.combine_terms`), which the agent's summaries write as ``loss_terms/<metric>``.

Policies: ``collect_policy`` is TF-Agents' `EpsilonGreedyPolicy` over a `QPolicy` of a `PBOQNetwork`
(``Q_{Λ_φ^K(ω_0)}``, ``ω_0 = W[0]``) with ε a callable of the training step (default: linear from 1 to 0.01
over ``epsilon_decay_train_steps`` training steps, see `linear_epsilon`); ``policy`` is the `GreedyPolicy` of
the same `QPolicy`. Both share the network, so ``agent.q_network.set_apply_k(k)`` evaluates
``Q_{Λ^k(ω_0)}``. By default the network caches ``Λ_φ^k(ω_0)`` and the agent refreshes it at the end of
every training step, after its last Adam step, so the policies act with one Q evaluation
(``cache_omega_k=False`` applies the PBO k times at every action instead).

Wrap ``agent.train`` with ``common.function`` (autograph off, as TF-Agents does): plain ``tf.function``
autograph-converts TF-Agents' own code too and is much slower to trace. XLA works:
``common.function(agent.train, jit_compile=True)`` (the boundary filter is a dynamic-shape
``boolean_mask``, which XLA handles). Summary ops cannot be XLA-compiled: with a default summary writer
active, build the agent with ``enable_summaries=False`` before compiling ``train`` with XLA.

A replay batch made only of episode-boundary pairs holds no transition (its loss would be 0 / 0): `train`
takes no Adam step on it, reports a zero loss with ``extra.skipped`` set and counts it in
``skipped_batches`` (a checkpointed variable); the training step counter and the target refresh go on as
for any training step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import tensorflow as tf

try:
    from tf_agents.agents import tf_agent
    from tf_agents.typing import types
    from tf_agents.utils import common
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.agents.networks import PBOQNetwork, clone_pbo
from pbo_tf.agents.replay import ReplayAgent, linear_epsilon
from pbo_tf.compat import checkpoint_names
from pbo_tf.configs import ProDQNConfig
from pbo_tf.data.transitions import seeded_permutation
from pbo_tf.learner import PBOLearner
from pbo_tf.operators.base import PBO
from pbo_tf.q.base import QFamily
from pbo_tf.utils import data_seed


class ProDQNLossInfo(NamedTuple):
    """The ``extra`` of ProDQN's `LossInfo`.

    Attributes:
      metrics: the loss terms' metrics (`pbo_tf.loss_terms.combine_terms`: ``bellman``, ``bellman/k1``, ...,
        and each further term's), each the mean over the training step's W batches.
      epsilon: the collect policy's ε at this training step.
      valid_transitions: number of transitions in the replay batch (boundary pairs removed), int32.
      w_indices: ``[|W|]`` the training step's order of W, int32: its consecutive ``w_batch_size`` rows are
        the W batches, one Adam step each, in this order.
      skipped: bool, True when the replay batch held no transition: no Adam step was taken and the loss
        and its terms are reported as 0.
    """

    metrics: dict
    epsilon: tf.Tensor
    valid_transitions: tf.Tensor
    w_indices: tf.Tensor
    skipped: tf.Tensor


class ProDQNAgent(ReplayAgent):
    """ProDQN as a TF-Agents agent (see the module docstring): its hyper-parameters are one
    `pbo_tf.configs.ProDQNConfig`, its other arguments the runtime objects it works with.

    Args:
      time_step_spec: the environment's time step spec.
      action_spec: a scalar integer `BoundedTensorSpec` with minimum 0 and ``|A|`` values.
      q_family: the Q family ``Q_ω`` (its ``n_actions`` must equal the action spec's).
      pbo: the operator ``Λ_φ`` to train (built here if needed).
      w_set: the fixed set W, ``[config.w_size, d]``; ``W[0] = ω_0`` is where the policies start (unless
        ``omega_0``). W is configuration (a constant), not checkpointed state: rebuild the agent with the same
        W and ``seed`` to restore.
      gamma: discount factor.
      optimizer: the optimizer of ``φ``: an `pbo_tf.optimizers.AnnealedAdam`, which the agent calls with
        ``config.lr_schedule_steps`` (Adam with its learning rate annealed linearly over the run's Adam
        steps), or a tf_keras optimizer, used with its own learning rate. Its step count is the number of
        Adam steps.
      config: K, the refresh schedule, W's batch, the loss terms, the target's update and the caches
        (`pbo_tf.configs.ProDQNConfig`).
      seed: seed of the order of W.
      omega_0: where the acting chain ``Λ^K(ω_0)`` starts, ``[d]`` (default W[0]).
      epsilon: the collect policy's ε, a float or a zero-argument callable; default `linear_epsilon` from 1
        to 0.01 over the run's training steps (``config.total_train_steps``).
      train_step_counter: the training step variable (default: the global step).
      target_pbo: the target operator (default: `clone_pbo` of ``pbo``); it is set to ``φ`` at construction.
      monitor: ``monitor(pbo) -> (scalars, text)``, what the operator does now, for the learner's
        `pbo_tf.learner.PBOLearner.monitor` (None: none).
      **agent_options: `TFAgent`'s ``debug_summaries``, ``summarize_grads_and_vars``, ``enable_summaries``
        and the module's ``name``.

    Raises:
      TypeError: an ``optimizer`` that is neither an `AnnealedAdam` nor a tf_keras optimizer.
      ValueError: inconsistent specs or sizes.
    """

    def __init__(
        self,
        *,
        time_step_spec: types.TimeStep,
        action_spec: types.BoundedTensorSpec,
        q_family: QFamily,
        pbo: PBO,
        w_set,
        gamma: float,
        optimizer,
        config: ProDQNConfig,
        seed: int = 0,
        omega_0=None,
        epsilon: float | Callable[[], tf.Tensor] | None = None,
        train_step_counter: tf.Variable | None = None,
        target_pbo: PBO | None = None,
        monitor: Callable | None = None,
        **agent_options,
    ):
        action_spec = self._prepare(
            config=config, q_family=q_family, action_spec=action_spec, optimizer=optimizer,
            lr_schedule_steps=config.lr_schedule_steps, label="ProDQN", name=agent_options.pop("name", None),
        )  # fmt: skip
        if pbo.d != q_family.d:
            raise ValueError(f"the PBO acts on d={pbo.d} parameters but the Q family has d={q_family.d}")
        params = np.asarray(w_set, dtype=np.float32)
        if params.ndim != 2 or params.shape[1] != q_family.d or params.shape[0] != config.w_size:
            raise ValueError(
                f"w_set (the set W) must be [ProDQNConfig.w_size={config.w_size}, {q_family.d}], "
                f"got {list(params.shape)}"
            )
        omega_0 = params[0] if omega_0 is None else np.asarray(omega_0, np.float32).reshape(-1)
        if omega_0.shape != (q_family.d,):
            raise ValueError(f"omega_0 must be [{q_family.d}], got {list(omega_0.shape)}")
        self._target_update_tau = float(config.target_update_tau)
        if target_pbo is None:
            target_pbo = clone_pbo(pbo, name=f"{pbo.name}_target")
        self._learner = PBOLearner(
            pbo=pbo, target_pbo=target_pbo, q_family=q_family, w_set=params, K=self.K, gamma=gamma,
            loss_terms=config.loss_terms, omega0=omega_0, monitor=monitor,
            cache_chain=config.cache_target_chain and self._target_update_tau == 1.0,
        )  # fmt: skip
        checkpoint_names.mirror_learner(self, self._learner)  # the checkpoints' names (pbo_tf.compat)
        self._n_w, self._w_batch_size = params.shape[0], config.w_batch_size or params.shape[0]
        self._w_batch_starts = list(range(0, self._n_w, self._w_batch_size))
        self._seed = int(seed)
        self._build_optimizer(pbo.trainable_variables)
        if train_step_counter is None:
            train_step_counter = tf.compat.v1.train.get_or_create_global_step()
        if epsilon is None:
            epsilon = linear_epsilon(train_step_counter, config.total_train_steps)
        network = PBOQNetwork(
            time_step_spec.observation, q_family, pbo, omega_0=omega_0, apply_k=self.K,
            cache_omega_k=config.cache_omega_k,
        )  # fmt: skip
        super().__init__(
            time_step_spec, action_spec, q_network=network, epsilon=epsilon,
            train_step_counter=train_step_counter, **agent_options,
        )  # fmt: skip
        self._sync_target(tau=1.0)

    # ---------------------------------------------------------------------------------- properties
    @property
    def q_network(self) -> PBOQNetwork:
        """The policies' network ``Q_{Λ_φ^k(ω_0)}`` (shared by ``policy`` and ``collect_policy``)."""
        return self._q_network

    @property
    def pbo(self) -> PBO:
        return self._learner.pbo

    @property
    def target_pbo(self) -> PBO:
        return self._learner.target_pbo

    @property
    def learner(self) -> PBOLearner:
        """The operator's learner (`pbo_tf.learner.PBOLearner`): target, W, loss and fixed-point estimate."""
        return self._learner

    @property
    def params(self) -> tf.Tensor:
        """The fixed set W, ``[n_W, d]``."""
        return self._learner.w_set

    @property
    def w_batch_size(self) -> int:
        """Rows of W per Adam step."""
        return self._w_batch_size

    @property
    def adam_steps_per_train_step(self) -> int:
        """Adam steps per training step: the number of W batches, ``ceil(|W| / w_batch_size)``."""
        return len(self._w_batch_starts)

    # ------------------------------------------------------------------------------------- helpers
    def w_order(self, train_step) -> tf.Tensor:
        """The order of W at ``train_step``, ``[|W|]`` int32: a stateless shuffle seeded by
        ``(seed, train_step)`` (``0..|W|−1`` when one batch holds all of W: the order is then immaterial)."""
        if self._w_batch_size == self._n_w:
            return tf.range(self._n_w, dtype=tf.int32)
        # (`seeded_permutation`, not argsort of stateless uniforms: those draw other numbers under XLA)
        return seeded_permutation(self._n_w, data_seed(self._seed, train_step))

    def w_batches(self, train_step) -> list[tf.Tensor]:
        """The W batches of ``train_step``, in order: consecutive ``w_batch_size`` rows of `w_order`."""
        return self._split(self.w_order(train_step))

    def _split(self, order: tf.Tensor) -> list[tf.Tensor]:
        return [order[start : start + self._w_batch_size] for start in self._w_batch_starts]

    def _sync_target(self, tau: float):
        """``φ̄ ← τ φ + (1 − τ) φ̄`` (a plain copy for τ = 1), with the learner's estimate and cached chain."""
        self._learner.sync_target(tau)
        return tf.no_op()

    # --------------------------------------------------------------------------------- TFAgent API
    def _initialize(self):
        self._sync_target(tau=1.0)
        self._q_network.refresh()

    def _batch_loss(self, batch: dict, rows: tf.Tensor):
        """The learner's loss on the replay ``batch`` and the rows ``rows`` of W."""
        return self._learner.loss(
            tf.gather(self._learner.w_set, rows), batch, self._learner.frozen_chain(rows)
        )

    def _loss_info(self, losses, extras, valid_transitions, order) -> tf_agent.LossInfo:
        """Means over the W batches; zeros (and ``skipped``) for a replay batch without a transition."""
        n = float(len(losses))
        skipped = tf.equal(valid_transitions, 0)

        def mean(values):
            value = tf.add_n(values) / n
            return tf.where(skipped, tf.zeros_like(value), value)

        info = ProDQNLossInfo(
            metrics={key: mean([e[key] for e in extras]) for key in extras[0]},
            epsilon=self.epsilon(),
            valid_transitions=valid_transitions,
            w_indices=order,
            skipped=skipped,
        )
        return tf_agent.LossInfo(loss=mean(list(losses)), extra=info)

    def _loss(self, experience: types.NestedTensor, weights: types.Tensor | None = None, training=False):
        """The mean over the current training step's W batches of the loss at the current ``φ`` (`train`
        takes an Adam step between two batches; this does not)."""
        if weights is not None:
            raise NotImplementedError("ProDQN's loss does not support per-sample weights")
        batch, valid_transitions = self._replay_batch(experience)
        order = self.w_order(self.train_step_counter)
        losses, extras = zip(*(self._batch_loss(batch, rows) for rows in self._split(order)), strict=True)
        return self._loss_info(losses, extras, valid_transitions, order)

    def _train(self, experience: types.NestedTensor, weights: types.Tensor | None = None):
        """One training step: one Adam step per W batch on the same replay batch, then the counter, the
        target refresh when due and the policies' cached ``Λ_φ^k(ω_0)``."""
        if weights is not None:
            raise NotImplementedError("ProDQN's loss does not support per-sample weights")
        batch, valid_transitions = self._replay_batch(experience)
        skipped = tf.equal(valid_transitions, 0)
        order = self.w_order(self.train_step_counter)
        variables = self._learner.pbo.trainable_variables
        losses, extras = [], []
        for rows in self._split(order):
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(variables)
                loss, extra = self._batch_loss(batch, rows)
            gradients = self._clipped(tape.gradient(loss, variables))
            grads_and_vars = list(zip(gradients, variables, strict=True))
            self._apply_unless_skipped(skipped, grads_and_vars)
            losses.append(loss)
            extras.append(extra)
        self._skipped_batches.assign_add(tf.cast(skipped, tf.int64))
        loss_info = self._loss_info(losses, extras, valid_transitions, order)
        if self._summarize_grads_and_vars:  # the last Adam step's
            common.add_variables_summaries(grads_and_vars, self.train_step_counter)
            common.add_gradients_summaries(grads_and_vars, self.train_step_counter)
        self.train_step_counter.assign_add(1)
        self._update_target()
        self._q_network.refresh()  # the policies' cached Λ_φ^k(ω_0), after the training step
        if self.summaries_enabled:
            step = self.train_step_counter
            tf.compat.v2.summary.scalar("losses/pbo_loss", loss_info.loss, step=step)
            tf.compat.v2.summary.scalar("epsilon", loss_info.extra.epsilon, step=step)
            for key, value in loss_info.extra.metrics.items():
                tf.compat.v2.summary.scalar(f"loss_terms/{key}", value, step=step)
        return loss_info

    def _update_target(self):
        """After the training step counter's increment: refresh ``φ̄`` when the count is a multiple of
        ``train_steps_per_refresh``."""
        if self._train_steps_per_refresh == 1:
            return self._sync_target(self._target_update_tau)
        return tf.cond(self._refresh_due(), lambda: self._sync_target(self._target_update_tau), tf.no_op)
