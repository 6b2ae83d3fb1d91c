"""The offline view of the walk: a gin-configurable pbo_tf.envs.base.Problem with a tabular Q."""

import gin
import numpy as np

from pbo_tf.envs.base import Problem
from pbo_tf.q import TableQ
from toy_walk_env import mdp


@gin.configurable
class ToyWalkProblem(Problem):
    """Every (s, a) x ``repetitions`` as the dataset; the metric is the RMS distance to ``Q*``."""

    name = "toy_walk"
    main_metric = "q_error_rms"

    def __init__(self, gamma: float = mdp.GAMMA, repetitions: int = 1):
        self.gamma, self.repetitions = float(gamma), int(repetitions)
        self.q_star = mdp.optimal_q(self.gamma)

    def q_family(self):
        return TableQ(mdp.N_STATES, mdp.N_ACTIONS)  # states [B, 1] are read as indices

    def dataset(self, seed):
        return mdp.collect_dataset(self.repetitions)

    def dataset_layout(self):
        size = mdp.N_STATES * mdp.N_ACTIONS * self.repetitions
        return dict(size=size, state_shape=(1,), integer_states=False, integer_actions=True, n_actions=2)

    def reference(self, dataset=None):
        return {"optimal_q_rms": float(np.sqrt(np.mean(self.q_star**2)))}

    def evaluate(self, params, dataset=None):
        diff = np.asarray(params, np.float64) - self.q_star.reshape(1, -1)
        return [{"q_error_rms": float(v)} for v in np.sqrt(np.mean(diff**2, axis=1))]
