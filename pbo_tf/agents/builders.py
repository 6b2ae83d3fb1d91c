"""The gin-bound builders of the online runs' agents, and their schedules.

A builder is not an agent: ``@ProDQN`` (`ProDQN`) is the builder that makes a `pbo_tf.agents.ProDQNAgent`,
``@DQN`` (`DQN`) the one that makes TF-Agents' ``DqnAgent`` (`pbo_tf.agents.make_dqn_agent`), ``@IDQN``
(`IDQN`) the reference code's iterated baseline (`pbo_tf.agents.idqn.IDQNAgent`).
`OnlineExperiment` (`pbo_tf.experiments.online`) binds one, ``OnlineExperiment.agent = @ProDQN`` or
``@DQN``. Every builder is a `pbo_tf.algorithm.AlgorithmBuilder`, as the offline ones are: it derives the
run's schedule, draws the set W and ω₀, makes Adam (which the agent anneals over its Adam steps) and the
operator's monitor, creates the agent, and knows what the loop needs of its algorithm: how many Adam steps a
training step takes, which parameters the greedy policy acts with, the curve's ``ω_k``, the operator's
activity and the budget record. Each
algorithm's hyper-parameters are its config (``DQNConfig.*``, ``IDQNConfig.*``, ``ProDQNConfig.*``,
`pbo_tf.configs`): K, the refresh schedule and compilation among them. The deep PBO is bound on
`pbo_tf.operators.factory.make_pbo` as offline, Adam on `pbo_tf.optimizers.AnnealedAdam` and the collect
policy's ε on `EpsilonSchedule`. The package ``pbo_tf.agents`` does not import this module (gin binds at
the edge).

Schedules (Algorithm 1, appendix Table 2), in training steps (one collect, one replay batch, one
``agent.train``), ``refreshes · train_steps_per_refresh`` in all:

* ProDQN (`pbo_tf.agents.ProDQNAgent`, paper Algorithm 1): ``refreshes`` target refreshes (the paper's
  #epochs E), ``train_steps_per_refresh`` training steps after each (the paper's #training steps); each takes
  ``ceil(w_size / w_batch_size)`` Adam steps, one per W batch. Its curve is ``Λ_φ^k(ω_0)`` for k = 0..K +
  ``extra_iterations``, computed at once by ``pbo.iterate``.
* DQN (`pbo_tf.agents.make_dqn_agent`): K hard target updates (its refreshes are K), each after
  ``train_steps_per_refresh`` (the paper's fitting steps) training steps of one gradient step. ``ω_k`` of the
  curve is the online parameter vector after ``k · train_steps_per_refresh`` steps, the one copied into the
  target network by the k-th update (``ω_0`` = the initial network, W[0] of the seed), kept in a
  checkpointed variable.
* Adam (`pbo_tf.optimizers.AnnealedAdam`: `make_adam`, ε placed after the bias correction as the reference's
  optax by default) with the learning rate annealed linearly over the run's training steps: the reference's
  length, which for ProDQN ignores the W batches, so with 2 of them the learning rate reaches its end value
  halfway and stays there (``ProDQNConfig.lr_schedule_counts_w_batches = True`` anneals over every Adam
  step).
* ε (`EpsilonSchedule`) annealed linearly over ``decay_env_steps`` ε-greedy environment steps (default the
  whole run's, the reference's count). ε is a function of the training step: the environment steps of
  training step t all use ε at ``t · steps_per_update`` environment steps.
"""

from __future__ import annotations

import gin
import numpy as np
import tensorflow as tf

from pbo_tf.agents.dqn import make_dqn_agent
from pbo_tf.agents.idqn import IDQNAgent
from pbo_tf.agents.prodqn import ProDQNAgent
from pbo_tf.agents.replay import linear_epsilon
from pbo_tf.algorithm import AlgorithmBuilder
from pbo_tf.configs import DQNConfig, IDQNConfig, ProDQNConfig
from pbo_tf.loss_terms.configurable import check_bound_terms
from pbo_tf.operators.factory import make_pbo
from pbo_tf.optimizers import current_learning_rate
from pbo_tf.q.multi_head import MultiHeadQ

# gin injects bindings only through the returned wrappers, so the builders call these.
ConfiguredDQNConfig = gin.external_configurable(DQNConfig, name="DQNConfig", module="pbo_tf")
ConfiguredIDQNConfig = gin.external_configurable(IDQNConfig, name="IDQNConfig", module="pbo_tf")
ConfiguredProDQNConfig = gin.external_configurable(ProDQNConfig, name="ProDQNConfig", module="pbo_tf")


@gin.configurable
class EpsilonSchedule:
    """The collect policy's ε, linear from ``start`` to ``end`` over ``decay_env_steps`` ε-greedy environment
    steps (None: the whole run's), counted at training-step granularity."""

    def __init__(self, start: float = 1.0, end: float = 0.01, decay_env_steps: int | None = None):
        self.start, self.end = float(start), float(end)
        self.decay_env_steps = None if decay_env_steps is None else int(decay_env_steps)

    def decay_train_steps(self, total_env_steps: int, steps_per_update: int) -> int:
        """The decay in training steps, each of which collects ``steps_per_update`` environment steps."""
        env_steps = self.decay_env_steps or total_env_steps
        return max(1, -(-env_steps // steps_per_update))

    def __call__(self, train_step: tf.Variable, decay_train_steps: int):
        """ε as a callable of the training step counter (`pbo_tf.agents.linear_epsilon`)."""
        return linear_epsilon(train_step, decay_train_steps, self.start, self.end)


class OnlineAgentBuilder(AlgorithmBuilder):
    """Builds one algorithm's agent and answers the loop's questions about it (see the module docstring)."""

    #: the agent (set by `build`)
    agent = None
    #: the trained operator (ProDQN's; None for the others)
    pbo = None

    @property
    def adam_steps_per_train_step(self) -> int:
        return 1

    @property
    def lr_schedule_steps(self) -> int:
        """Adam steps over which the learning rate anneals (the run's training steps)."""
        return self.schedule.total_steps

    #: the agent's tf_keras optimizer (its ``iterations`` count the Adam steps) and its learning-rate
    #: schedule (`make_optimizer`)
    optimizer = lr_schedule = None

    def make_optimizer(self):
        """The agent's Adam: ``self.adam`` annealed over `lr_schedule_steps` Adam steps (kept as
        ``optimizer`` and ``lr_schedule``)."""
        self.optimizer, self.lr_schedule = self.adam(self.lr_schedule_steps)
        return self.optimizer

    @property
    def jit_compile(self) -> bool:
        """Whether ``agent.train`` is compiled with XLA (the config's ``jit_compile``)."""
        return bool(self.config.jit_compile)

    def build(self, time_step_spec, action_spec, q_family, *, gamma: float, seed: int, epsilon, train_step):
        """Creates the agent (and ``omega0``, the ``ω_0`` of the curve) with Adam (`make_optimizer`); returns
        the agent."""
        raise NotImplementedError

    def acting_params(self) -> tf.Tensor:
        """The parameters the greedy policy acts with (checked for NaN after every training step)."""
        raise NotImplementedError

    acting_params_name: str = ""

    def greedy_params(self) -> np.ndarray:
        """``[d]``: the parameters of the greedy policy at K now (DQN's online ω, ProDQN's ``Λ_φ^K(ω_0)``,
        i-DQN's last head), for the evaluation during training."""
        return np.asarray(self.acting_params())

    def checkpointed(self) -> dict:
        """Trackables of the builder's own that the run's checkpoint holds."""
        return {}

    def after_train_step(self, step: int) -> None:
        """Called after training step ``step``."""

    def iterates(self) -> np.ndarray:
        """``ω_k`` of the curve, ``[schedule.n_curve_points, d]``."""
        raise NotImplementedError

    def paper_train_steps(self, paper: dict) -> int:
        """The training steps of the paper's schedule ``paper`` (the environment's ``paper_budget``) for this
        algorithm at the run's K."""
        raise NotImplementedError

    def budget(self, agent, paper):
        """``{train_steps_done, train_steps_scheduled, train_steps_paper, fraction, refreshes_done}``: the
        agent's training steps against the paper's (``fraction`` = scheduled / paper) and the refreshes
        (target updates) they completed; None without a paper schedule."""
        if paper is None:
            return None
        paper_steps = self.paper_train_steps(paper)
        done = int(agent.train_step_counter.numpy())
        return {
            "train_steps_done": done,
            "train_steps_scheduled": int(self.schedule.total_steps),
            "train_steps_paper": int(paper_steps),
            "fraction": self.schedule.total_steps / paper_steps,
            "refreshes_done": done // self.schedule.steps_per_refresh,
        }

    def prepare_export(self) -> None:
        """Makes ``agent.policy`` the greedy policy at k = K."""

    def monitor(self) -> tuple[dict, str] | None:
        """What the operator does now, for the progress line and TensorBoard (``(scalars, text)``,
        `pbo_tf.evaluation.operator_activity.activity_monitor`); None without a deep operator."""
        return None

    def skipped_batches(self) -> int:
        """Replay batches without a transition, which took no Adam step."""
        return 0

    def loss_terms(self) -> tuple:
        """The agent's loss terms (`pbo_tf.loss_terms`), whose metrics its `LossInfo` carries in
        ``extra.metrics``; () for an agent without them."""
        return ()


@gin.configurable
class DQN(OnlineAgentBuilder):
    """The builder of the DQN baseline (`pbo_tf.agents.make_dqn_agent`): K target updates, one every
    ``train_steps_per_refresh`` training steps of one gradient step each. Its hyper-parameters are its
    config, ``DQNConfig.*`` (`pbo_tf.configs.DQNConfig`)."""

    name = "dqn"
    acting_params_name = "the online Q parameters ω"

    def __init__(self):
        super().__init__(ConfiguredDQNConfig())

    def build(self, time_step_spec, action_spec, q_family, *, gamma, seed, epsilon, train_step):
        self.omega0 = q_family.initial_params(1, seed)[0]
        self.agent = make_dqn_agent(
            time_step_spec=time_step_spec, action_spec=action_spec, q_family=q_family, config=self.config,
            gamma=gamma, optimizer=self.make_optimizer(), epsilon=epsilon, seed=seed,
            train_step_counter=train_step, initial_params=self.omega0,
        )  # fmt: skip
        self.period = self.schedule.steps_per_refresh
        self.online_omega = self.agent._q_network.omega  # noqa: SLF001 (DqnAgent does not expose it)
        # ω_k, the online parameters after k · period gradient steps (row 0 = ω_0).
        self.snapshots = tf.Variable(tf.zeros([self.schedule.K + 1, q_family.d]), name="iterates")
        self.snapshots[0].assign(self.omega0)
        return self.agent

    def acting_params(self):
        return self.online_omega

    def checkpointed(self):
        return {"snapshots": self.snapshots}

    def after_train_step(self, step):
        if step % self.period == 0:
            self.snapshots[step // self.period].assign(self.online_omega)

    def iterates(self):
        return self.snapshots.numpy()

    def paper_train_steps(self, paper):
        return self.schedule.K * paper["dqn_train_steps_per_update"]


@gin.configurable
class IDQN(OnlineAgentBuilder):
    """The builder of i-DQN (`pbo_tf.agents.idqn.IDQNAgent`), the reference code's iterated online baseline:
    ``refreshes`` target refreshes ``θ̄ ← θ``, ``train_steps_per_refresh`` training steps of one Adam step
    after each; K + 1 heads, head 0 at the seed's ω_0 (DQN's start). Its curve is the heads, k = 0..K.

    Its budget counts training steps against the reference code's i-DQN schedule (``idqn_refreshes ×
    idqn_train_steps_per_refresh`` of the environment's ``paper_budget``) where it has one, else ProDQN's.
    Its hyper-parameters are its config, ``IDQNConfig.*`` (`pbo_tf.configs.IDQNConfig`).
    """

    name = "idqn"
    acting_params_name = "the heads θ"

    def __init__(self):
        super().__init__(ConfiguredIDQNConfig())

    def build(self, time_step_spec, action_spec, q_family, *, gamma, seed, epsilon, train_step):
        K = self.schedule.K
        heads = MultiHeadQ(q_family, K + 1).initial_params(1, seed)[0].reshape(K + 1, -1)
        self.omega0 = heads[0] = q_family.initial_params(1, seed)[0]
        self.agent = IDQNAgent(
            time_step_spec=time_step_spec, action_spec=action_spec, q_family=q_family, config=self.config,
            gamma=gamma, optimizer=self.make_optimizer(), epsilon=epsilon, seed=seed, initial_params=heads,
            train_step_counter=train_step,
        )  # fmt: skip
        return self.agent

    def acting_params(self):
        return self.agent.q_network.omega

    def iterates(self):
        return self.agent.heads()

    def greedy_params(self):
        return self.agent.heads()[-1]

    def paper_train_steps(self, paper):
        if "idqn_refreshes" in paper:
            return paper["idqn_refreshes"] * paper["idqn_train_steps_per_refresh"]
        return paper["refreshes"] * paper["train_steps_per_refresh"]


@gin.configurable
class ProDQN(OnlineAgentBuilder):
    """The builder of ProDQN (paper Algorithm 1): makes a `pbo_tf.agents.ProDQNAgent` with the operator of
    `make_pbo` and the set W of `pbo_tf.operators.factory.WSampler` (the paper's W by default, whose W[0]
    is ω_0). Its hyper-parameters are its config, ``ProDQNConfig.*`` (`pbo_tf.configs.ProDQNConfig`)."""

    name = "prodqn"
    uses_w = True
    acting_params_name = "the policy's Λ_φ^K(ω_0)"

    def __init__(self):
        super().__init__(ConfiguredProDQNConfig())
        check_bound_terms(self.config.loss_terms, "ProDQNConfig.loss_terms")

    @property
    def w_batch_size(self) -> int | None:
        return self.config.w_batch_size

    @property
    def adam_steps_per_train_step(self):
        return self.config.w_batches

    @property
    def lr_schedule_steps(self):
        return self.config.lr_schedule_steps

    def build(self, time_step_spec, action_spec, q_family, *, gamma, seed, epsilon, train_step):
        if self.w_sampler.fqi_members:
            raise ValueError(
                "WSampler.fqi_members needs FQI's iterates on a dataset; online runs have none to start with"
            )
        params, self.omega0 = self.draw_w(q_family, seed)
        self.pbo = make_pbo(None, q_family, name="pbo", w_set=params)
        self.agent = ProDQNAgent(
            time_step_spec=time_step_spec, action_spec=action_spec, q_family=q_family, pbo=self.pbo,
            w_set=params, gamma=gamma, optimizer=self.make_optimizer(), config=self.config, seed=seed,
            omega_0=self.omega0, epsilon=epsilon, train_step_counter=train_step,
            monitor=self.make_monitor(self.pbo, q_family, seed),
        )  # fmt: skip
        return self.agent

    def acting_params(self):
        return self.agent.q_network.omega_k()

    def iterates(self):
        omega0 = tf.constant(np.asarray(self.omega0, np.float32)[None])
        return self.pbo.iterate(omega0, self.schedule.n_curve_points - 1)[:, 0].numpy()

    def prepare_export(self):
        self.agent.q_network.set_apply_k(self.schedule.K)

    def paper_train_steps(self, paper):
        return paper["refreshes"] * paper["train_steps_per_refresh"]

    def monitor(self):
        monitored = self.agent.learner.monitor()
        if monitored is None:
            return None
        lr = current_learning_rate(self.agent.optimizer)
        return {**monitored[0], "learning_rate": lr}, f"lr {lr:.3g}, {monitored[1]}"

    def skipped_batches(self):
        return int(self.agent.skipped_batches.numpy())

    def loss_terms(self):
        return self.agent.learner.terms
