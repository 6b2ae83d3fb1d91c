"""The online view of the walk: a gin-configurable pbo_tf.envs.base.OnlineEnv with an MLP Q."""

import gin
import numpy as np

from pbo_tf.envs.base import OnlineEnv
from toy_walk_env import mdp


@gin.configurable
class ToyWalkOnline(OnlineEnv):
    """Greedy evaluation: the walk is deterministic, so one episode of ``eval_max_steps`` steps from 0."""

    name = "toy_walk"
    state_dim = 1
    main_metric = "discounted_return"

    def __init__(self, hidden=(4,), gamma=mdp.GAMMA, train_max_episode_steps=10, eval_max_steps=10):
        super().__init__(hidden, [0.0, 1.0], gamma, train_max_episode_steps, eval_max_steps, eval_seed=0)

    def evaluate(self, q_family, params, n_episodes):
        states = np.arange(mdp.N_STATES, dtype=np.float32)[:, None]
        q = q_family.q_all(np.asarray(params, np.float32), states).numpy()  # [n, N, 2]
        out = []
        for table in q:
            total, discounted = mdp.greedy_return(table, self.gamma, self.eval_max_steps)
            out.append({"discounted_return": discounted, "return": total})
        return out
