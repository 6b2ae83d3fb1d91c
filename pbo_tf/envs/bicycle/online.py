"""Bicycle's online spec (paper Sec. 6.2): `BicycleOnlineEnv`, named ``bicycle`` in the registry.

Q family ``FlatMLPQ(4, [30], ACTIONS / (0.02, 2))``, as the offline
`pbo_tf.envs.bicycle.problem.BicycleProblem` (d = 241, PBO width 482). Training episodes are cut at 20
steps, as the paper; truncations bootstrap. Evaluation (`pbo_tf.envs.bicycle.evaluation.evaluate_params`,
the offline evaluation; greedy, first action on ties): ``n_episodes`` noisy rollouts from upright per
parameter vector, of at most ``eval_max_steps`` (50 000) steps; metrics ``balancing_time_s`` and
``discounted_return`` (the compiled rollouts do not accumulate the undiscounted return).
"""

from __future__ import annotations

from collections.abc import Sequence

import gin

from pbo_tf.envs.base import OnlineEnv
from pbo_tf.envs.bicycle import mdp as bk
from pbo_tf.envs.bicycle.evaluation import evaluate_params


@gin.configurable
class BicycleOnlineEnv(OnlineEnv):
    """Bicycle balancing (paper Sec. 6.2), online: 20-step training episodes, evaluation as offline.

    Args:
      hidden: hidden widths of the Q network (paper: [30]).
      action_values: the action encoding (default the offline one, (d / 0.02, T / 2) per action).
      gamma: discount factor.
      train_max_episode_steps: training episode cut (paper: 20).
      eval_max_steps: evaluation rollout cut (50 000 steps = 500 s).
      eval_seed: seed of the evaluation noise.
      eval_jit_compile: compile the rollouts with XLA (faster for long rollouts; turning it off saves the
        compilation in tiny runs).
    """

    name = "bicycle"
    state_dim = 4
    main_metric = "balancing_time_s"
    # the paper's schedule (appendix Tables 1-2) and the reference code's i-DQN one, for metrics['budget']
    paper_budget = dict(
        refreshes=4000, train_steps_per_refresh=25, dqn_train_steps_per_update=6000,
        idqn_refreshes=2500, idqn_train_steps_per_refresh=40,
    )  # fmt: skip

    def __init__(
        self,
        hidden: Sequence[int] = (30,),
        action_values=None,
        gamma: float | None = None,
        train_max_episode_steps: int = 20,
        eval_max_steps: int | None = None,
        eval_seed: int = 0,
        eval_jit_compile: bool = True,
    ):
        self.dt = bk.DT
        super().__init__(
            hidden,
            bk.ACTION_ENCODING if action_values is None else action_values,
            bk.GAMMA if gamma is None else gamma,
            train_max_episode_steps,
            bk.MAX_EPISODE_STEPS if eval_max_steps is None else eval_max_steps,
            eval_seed,
        )
        self.eval_jit_compile = bool(eval_jit_compile)
        self._rollouts = {}  # compiled once per shape of the parameters evaluated (`evaluate_params`)

    def evaluate(self, q_family, params, n_episodes):
        return evaluate_params(
            q_family,
            params,
            n_rollouts=n_episodes,
            max_steps=self.eval_max_steps,
            gamma=self.gamma,
            seed=self.eval_seed,
            jit_compile=self.eval_jit_compile,
            cache=self._rollouts,
        )

    def reference(self):
        return {"max_balancing_time_s": self.eval_max_steps * self.dt}
