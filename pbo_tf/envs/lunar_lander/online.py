"""Lunar lander's online spec (paper Sec. 6.2): `LunarLanderEnv`, named ``lunar_lander`` in the registry.

Q family ``FlatMLPQ(8, [30, 30], [0, 1, 2, 3])``, the action index fed as one scalar input, which gives the
paper's d = 1261 (and its PBO width 2522 = 2d). Training episodes are cut at 1000 steps; truncations
bootstrap. Evaluation (`pbo_tf.envs.lunar_lander.evaluation.evaluate_lunar_lander`; greedy, first action on
ties): ``n_episodes`` episodes per parameter vector of at most ``eval_max_steps`` (1000) steps, episode j of
every policy from the same seeded reset; metrics ``discounted_return`` (the paper's J), ``return`` and
``episode_length``.
"""

from __future__ import annotations

from collections.abc import Sequence

import gin

from pbo_tf.envs.base import OnlineEnv
from pbo_tf.envs.lunar_lander.evaluation import evaluate_lunar_lander


@gin.configurable
class LunarLanderEnv(OnlineEnv):
    """Lunar lander (paper Sec. 6.2), online.

    Args:
      hidden: hidden widths of the Q network (paper: [30, 30]).
      action_values: the action encoding fed to the Q network (default the index 0..3 as one scalar).
      per_action_outputs: the Q network takes the state alone and has one output per action
        (`pbo_tf.q.PerActionMLPQ`, DQN's network: d = 1324 at [30, 30]) instead of the action index fed
        as an input (the paper's); ``action_values`` then only counts the actions.
      gamma: discount factor.
      train_max_episode_steps: training episode cut.
      eval_max_steps: evaluation episode cut (the horizon).
      eval_seed: seed of the evaluation resets.
      eval_max_envs: at most this many evaluation environments stepped together (memory, not results).
    """

    name = "lunar_lander"
    state_dim = 8
    main_metric = "discounted_return"
    # the paper's schedule (appendix Tables 1-2) and the reference code's i-DQN one, for metrics['budget']
    paper_budget = dict(
        refreshes=3000, train_steps_per_refresh=25, dqn_train_steps_per_update=6000,
        idqn_refreshes=5000, idqn_train_steps_per_refresh=80,
    )  # fmt: skip

    def __init__(
        self,
        hidden: Sequence[int] = (30, 30),
        action_values: Sequence[float] = (0.0, 1.0, 2.0, 3.0),
        gamma: float = 0.99,
        train_max_episode_steps: int = 1000,
        eval_max_steps: int = 1000,
        eval_seed: int = 0,
        eval_max_envs: int | None = None,
        per_action_outputs: bool = False,
    ):
        super().__init__(
            hidden, action_values, gamma, train_max_episode_steps, eval_max_steps, eval_seed,
            per_action_outputs=per_action_outputs,
        )  # fmt: skip
        self.eval_max_envs = eval_max_envs

    def evaluate(self, q_family, params, n_episodes):
        return evaluate_lunar_lander(
            q_family,
            params,
            n_episodes=n_episodes,
            max_steps=self.eval_max_steps,
            gamma=self.gamma,
            seed=self.eval_seed,
            max_envs=self.eval_max_envs,
            env_id=self.env_id,
        )
