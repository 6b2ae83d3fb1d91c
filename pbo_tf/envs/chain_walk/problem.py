"""Chain-walk's offline problem (paper Sec. 5.1): `ChainWalkProblem`, named ``chain_walk`` in the registry."""

from __future__ import annotations

import gin
import numpy as np

from pbo_tf.data.transitions import CorruptDatasetError
from pbo_tf.envs.base import Problem
from pbo_tf.envs.chain_walk import mdp as chain_walk
from pbo_tf.operators import TabularPBO, oracle_tabular_pbo
from pbo_tf.q import TableQ


@gin.configurable
class ChainWalkProblem(Problem):
    """Chain-walk (paper Sec. 5.1): tabular Q, every (s, a) × ``repetitions`` as the dataset."""

    name = "chain_walk"
    main_metric = "q_error_rms"
    # the paper's schedule (appendix Tables 1-2), for metrics['budget']
    paper_budget = dict(refreshes=1000, passes_per_refresh=5, w_batches=1, d_batches=20, fqi_epochs=400)

    def __init__(
        self,
        n_states: int = chain_walk.N_STATES,
        success_prob: float = chain_walk.SUCCESS_PROB,
        gamma: float = chain_walk.GAMMA,
        repetitions: int = 10,
    ):
        self.n_states, self.success_prob, self.gamma = int(n_states), float(success_prob), float(gamma)
        self.repetitions = int(repetitions)
        self.P, self.R = chain_walk.transition_model(self.n_states, self.success_prob)
        self.q_star = chain_walk.optimal_q(self.n_states, self.success_prob, self.gamma)

    def gym_kwargs(self):
        return dict(n_states=self.n_states, success_prob=self.success_prob, gamma=self.gamma)

    def q_family(self):
        return TableQ(self.n_states, chain_walk.N_ACTIONS)

    def dataset(self, seed):
        return chain_walk.collect_dataset(seed, self.repetitions, self.n_states, self.success_prob)

    def dataset_layout(self):
        n_actions = chain_walk.N_ACTIONS
        size = self.n_states * n_actions * self.repetitions
        return dict(size=size, state_shape=(), integer_states=True, integer_actions=True, n_actions=n_actions)

    def check_dataset(self, data, path):
        super().check_dataset(data, path)
        states = np.concatenate([data.state, data.next_state])
        if len(states) and not 0 <= states.min() <= states.max() < self.n_states:
            raise CorruptDatasetError(
                f"dataset {path} is not a chain_walk dataset of this config (states in [{states.min()}, "
                f"{states.max()}], expected [0, {self.n_states - 1}]); delete it to collect a new one"
            )

    def structured_pbo(self, q_family, init_std, **kwargs):
        return TabularPBO(self.n_states, chain_walk.N_ACTIONS, self.gamma, init_std=init_std, **kwargs)

    def oracle_pbo(self, q_family, **kwargs):
        return oracle_tabular_pbo(self.R, self.P, chain_walk.N_ACTIONS, self.gamma)

    def reference(self, dataset=None):
        return {"optimal_q_rms": float(np.sqrt(np.mean(self.q_star**2)))}

    def evaluate(self, params, dataset=None):
        diff = np.asarray(params, np.float64) - self.q_star.reshape(1, -1)
        return [{"q_error_rms": float(v)} for v in np.sqrt(np.mean(diff**2, axis=1))]
