"""Problems: everything an experiment needs to know about one environment.

A problem bundles the environment's discount, Q family, offline dataset, structured and oracle operators,
its exact solution and the evaluation protocol of DESIGN §3. Each is gin-configurable; the experiment
runner looks problems up by name in `PROBLEMS` (``Experiment.problem = 'chain_walk'``).
"""

from __future__ import annotations

import math

import gin
import numpy as np

from pbo_tf.data.transitions import Transitions
from pbo_tf.envs import chain_walk, lqr
from pbo_tf.operators import LQRPBO, TabularPBO, oracle_lqr_pbo, oracle_tabular_pbo
from pbo_tf.q import LQRQ, TableQ


class Problem:
    """Interface (see module docstring)."""

    name: str = ""
    gamma: float = 1.0
    # Metric used by default in plots and progress output.
    main_metric: str = ""

    def q_family(self):
        raise NotImplementedError

    def dataset(self, seed: int) -> Transitions:
        raise NotImplementedError

    def structured_pbo(self, q_family, init_std: float, **kwargs):
        raise NotImplementedError(f"{self.name} has no structured PBO")

    def oracle_pbo(self, q_family, **kwargs):
        raise NotImplementedError(f"{self.name} has no oracle PBO")

    def reference(self) -> dict:
        """Facts about the optimum written under ``metrics.json["reference"]``."""
        return {}

    def evaluate(self, params: np.ndarray) -> list[dict]:
        """Metrics of each parameter vector of ``params [n, d]``, one dict each."""
        raise NotImplementedError


@gin.configurable
class ChainWalkProblem(Problem):
    """Chain-walk (paper Sec. 4.1): tabular Q, every (s, a) × ``repetitions`` as the dataset."""

    name = "chain_walk"
    main_metric = "q_error_rms"

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

    def q_family(self):
        return TableQ(self.n_states, chain_walk.N_ACTIONS)

    def dataset(self, seed):
        return chain_walk.collect_dataset(seed, self.repetitions, self.n_states, self.success_prob)

    def structured_pbo(self, q_family, init_std, **kwargs):
        return TabularPBO(self.n_states, chain_walk.N_ACTIONS, self.gamma, init_std=init_std, **kwargs)

    def oracle_pbo(self, q_family, **kwargs):
        return oracle_tabular_pbo(self.R, self.P, chain_walk.N_ACTIONS, self.gamma)

    def reference(self):
        return {"optimal_q_rms": float(np.sqrt(np.mean(self.q_star**2)))}

    def evaluate(self, params):
        diff = np.asarray(params, np.float64) - self.q_star.reshape(1, -1)
        return [{"q_error_rms": float(v)} for v in np.sqrt(np.mean(diff**2, axis=1))]


@gin.configurable
class LQRProblem(Problem):
    """1-D LQR (paper Sec. 4.2): quadratic Q with M fixed, the 11×11 mesh as the dataset.

    Args:
      M: the fixed coefficient of a² in the Q family. ``None`` (default) uses the optimal M = R + B²P, as
        the reference code does, so that the optimum ``(G*, I*)`` belongs to the family and the oracle
        operator converges to it; the paper's text uses ``-1.20`` (bind ``LQRProblem.M = -1.2``).
      n_actions, action_low, action_high: the discrete action set of ``max_a``.
      mesh_size, mesh_low, mesh_high: the (s, a) mesh of the dataset.
    """

    name = "lqr"
    main_metric = "param_error_l2"
    gamma = lqr.GAMMA

    def __init__(
        self,
        M: float | None = None,
        n_actions: int = lqr.N_ACTIONS,
        action_low: float = lqr.ACTION_LOW,
        action_high: float = lqr.ACTION_HIGH,
        mesh_size: int = 11,
        mesh_low: float = -4.0,
        mesh_high: float = 4.0,
    ):
        self.optimum = lqr.optimal_params()
        self.M = float(self.optimum["M"] if M is None else M)
        self.actions = np.linspace(action_low, action_high, int(n_actions))
        self.mesh = (int(mesh_size), float(mesh_low), float(mesh_high))

    def q_family(self):
        return LQRQ(self.M, self.actions)

    def dataset(self, seed):
        data = lqr.collect_dataset(*self.mesh)
        if np.issubdtype(data.action.dtype, np.integer):  # indices into the mesh: store the action values
            values = np.asarray(lqr.mesh_actions(*self.mesh))[data.action]
            data = Transitions.from_arrays(data.state, values, data.reward, data.next_state, data.done)
        return data

    def structured_pbo(self, q_family, init_std, **kwargs):
        return LQRPBO(self.M, init_std=init_std, **kwargs)

    def oracle_pbo(self, q_family, **kwargs):
        return oracle_lqr_pbo(lqr.A, lqr.B, lqr.Q, lqr.S, self.M)

    def reference(self):
        return {
            "optimal_params": [float(self.optimum["G"]), float(self.optimum["I"])],
            "optimal_P": float(self.optimum["P"]),
            "M": self.M,
        }

    def evaluate(self, params):
        params = np.asarray(params, np.float64)
        star = np.array([self.optimum["G"], self.optimum["I"]])
        out = []
        for g, i in params:
            p_k = lqr.policy_value(lqr.greedy_gain(g, i, self.M))
            out.append(
                {
                    "param_error_l2": float(np.linalg.norm(star - (g, i))),
                    "p_error": float(abs(self.optimum["P"] - p_k)) if math.isfinite(p_k) else None,
                }
            )
        return out


PROBLEMS = {"chain_walk": ChainWalkProblem, "lqr": LQRProblem}


def make_problem(name: str) -> Problem:
    """The problem called ``name`` (its gin bindings applied).

    Raises:
      ValueError: unknown name, listing the known ones.
    """
    if name not in PROBLEMS:
        raise ValueError(f"unknown environment {name!r}; known environments: {sorted(PROBLEMS)}")
    return PROBLEMS[name]()
