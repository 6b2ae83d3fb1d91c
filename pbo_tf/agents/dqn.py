"""The DQN baseline: TF-Agents' own `DqnAgent` on a `FlatQNetwork` (``Q_ω(s, a)`` of a `QFamily`).

The paper's DQN schedule — K target updates, each after ``train_steps_per_refresh`` gradient steps — is
``target_update_period = train_steps_per_refresh`` with hard updates (``target_update_tau = 1``): after
``K · train_steps_per_refresh`` train steps the target network has been updated K times, and ``ω`` at the k-th
update is the paper's ``ω_k``. The regression loss is the config's ``td_loss``: by default the squared TD
error (``common.element_wise_squared_loss``, as `pbo_tf.losses.fqi_loss`), or `DqnAgent`'s own default,
the Huber loss with δ = 1 (``common.element_wise_huber_loss``). `DqnAgent` zeroes episode-boundary pairs
and bootstraps with ``gamma · discount`` of the next time step (terminations 0, truncations 1).
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

try:
    from tf_agents.agents.dqn import dqn_agent
    from tf_agents.utils import common
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.agents.networks import FlatQNetwork
from pbo_tf.configs import DQNConfig
from pbo_tf.optimizers import resolve_optimizer
from pbo_tf.q.base import QFamily

#: ``DQNConfig.td_loss`` -> TF-Agents' element-wise loss of ``(td_targets, q_values)``.
TD_LOSSES = {"squared": common.element_wise_squared_loss, "huber": common.element_wise_huber_loss}


def make_dqn_agent(
    *,
    time_step_spec,
    action_spec,
    q_family: QFamily,
    config: DQNConfig,
    gamma: float,
    optimizer,
    epsilon: float | Callable[[], tf.Tensor],
    seed: int,
    train_step_counter: tf.Variable | None = None,
    initial_params=None,
    td_errors_loss_fn=None,
    lr_schedule_steps: int | None = None,
) -> dqn_agent.DqnAgent:
    """A `DqnAgent` whose Q network is ``Q_ω`` of ``q_family`` (`FlatQNetwork`), initialised (target too).
    Every argument is a keyword.

    Args:
      time_step_spec, action_spec: the environment's specs (scalar integer action, minimum 0).
      q_family: the Q family; ``ω`` starts at ``q_family.initial_params(1, seed)[0]`` (= W[0] of the seed, the
        ω_0 ProDQN starts from) unless ``initial_params`` is given.
      config: the hyper-parameters (`pbo_tf.configs.DQNConfig`): the target is updated every
        ``train_steps_per_refresh`` train steps with Polyak factor ``target_update_tau``, the gradients
        clipped at ``gradient_clipping``, the loss ``td_loss`` (`TD_LOSSES`).
      gamma: discount factor.
      optimizer: an `pbo_tf.optimizers.AnnealedAdam`, called with ``lr_schedule_steps`` (Adam with its
        learning rate annealed linearly over that many gradient steps, the paper's), or a tf_keras
        optimizer, used with its own learning rate.
      epsilon: the collect policy's ε, a float or a zero-argument callable (e.g.
        `pbo_tf.agents.replay.linear_epsilon`).
      seed: the seed of ``ω``'s initialisation.
      train_step_counter: the train step variable (default: the global step).
      initial_params: explicit initial ``ω`` (``[d]``).
      td_errors_loss_fn: per-sample loss of the TD errors (default the config's ``td_loss``).
      lr_schedule_steps: the gradient steps an `AnnealedAdam` ``optimizer`` anneals over (default the
        run's, ``K × train_steps_per_refresh``).

    Returns:
      The initialised `DqnAgent` (``agent.initialize()`` has run: the target network equals ``ω``).

    Raises:
      TypeError: an ``optimizer`` that is neither an `AnnealedAdam` nor a tf_keras optimizer.
    """
    if lr_schedule_steps is None:
        lr_schedule_steps = config.schedule().total_steps
    optimizer, _ = resolve_optimizer(optimizer, lr_schedule_steps)
    if td_errors_loss_fn is None:
        td_errors_loss_fn = TD_LOSSES[config.td_loss]
    q_network = FlatQNetwork(
        time_step_spec.observation, q_family, seed=seed, initial_params=initial_params, name="FlatQNetwork"
    )
    agent = dqn_agent.DqnAgent(
        time_step_spec,
        action_spec,
        q_network=q_network,
        optimizer=optimizer,
        epsilon_greedy=epsilon,
        target_update_tau=config.target_update_tau,
        target_update_period=config.train_steps_per_refresh,
        td_errors_loss_fn=td_errors_loss_fn,
        gamma=gamma,
        gradient_clipping=config.gradient_clipping,
        train_step_counter=train_step_counter,
    )
    agent.initialize()
    return agent
