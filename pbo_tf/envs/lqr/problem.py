"""LQR's offline problem (paper Sec. 5.2): `LQRProblem`, named ``lqr`` in the registry."""

from __future__ import annotations

import math

import gin
import numpy as np

from pbo_tf.data.transitions import Transitions
from pbo_tf.envs.base import Problem
from pbo_tf.envs.lqr import mdp as lqr
from pbo_tf.operators import LQRPBO, oracle_lqr_pbo
from pbo_tf.q import LQRQ


@gin.configurable
class LQRProblem(Problem):
    """1-D LQR (paper Sec. 5.2): quadratic Q with M fixed, the 11×11 mesh as the dataset.

    Args:
      M: the fixed coefficient of a² in the Q family. ``None`` (default) uses the optimal M = R + B²P, as
        the reference code does, so that the optimum ``(G*, I*)`` belongs to the family and the oracle
        operator converges to it; the paper's text uses ``-1.20`` (bind ``LQRProblem.M = -1.2``).
      n_actions, action_low, action_high: the discrete action set of ``max_a``.
      mesh_size, mesh_low, mesh_high: the (s, a) mesh of the dataset.
    """

    name = "lqr"
    main_metric = "param_error_l2"
    # the paper's schedule (appendix Tables 1-2), for metrics['budget']
    paper_budget = dict(refreshes=1000, passes_per_refresh=4, w_batches=1, d_batches=1, fqi_epochs=800)
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

    def dataset_layout(self):
        size = self.mesh[0] ** 2
        return dict(size=size, state_shape=(1,), integer_states=False, integer_actions=False, n_actions=None)

    def oracle_pbo(self, q_family, **kwargs):
        return oracle_lqr_pbo(lqr.A, lqr.B, lqr.Q, lqr.S, self.M)

    def reference(self, dataset=None):
        return {
            "optimal_params": [float(self.optimum["G"]), float(self.optimum["I"])],
            "optimal_P": float(self.optimum["P"]),
            "M": self.M,
        }

    def evaluate(self, params, dataset=None):
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
