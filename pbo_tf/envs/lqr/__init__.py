"""Scalar LQR (paper Sec. 5.2): the dynamics, the Riccati optimum, the dataset and the offline problem.

* `mdp`: the constants, the Riccati solution and the closed-form operator, `LQREnv` (``pbo_tf/LQR-v0``) and
  the paper's 11 × 11 mesh dataset;
* `problem`: `LQRProblem`, the offline experiment's view (the ``(G, I)`` Q family, the LQR-shaped and
  oracle PBOs, the error against the optimum); imported by the experiment runner through
  `pbo_tf.envs.registry`, not here.

The names of `mdp` are re-exported here, so ``from pbo_tf.envs import lqr; lqr.optimal_params()`` works.
"""

from pbo_tf.envs.lqr.mdp import (
    ACTION_HIGH,
    ACTION_LOW,
    GAMMA,
    M_PAPER,
    N_ACTIONS,
    STATE_HIGH,
    STATE_LOW,
    A,
    B,
    LQREnv,
    Q,
    R,
    S,
    collect_dataset,
    discrete_actions,
    greedy_gain,
    mesh_actions,
    next_state,
    optimal_params,
    oracle_operator,
    policy_value,
    reward,
    riccati_p,
)

__all__ = [
    "ACTION_HIGH",
    "ACTION_LOW",
    "GAMMA",
    "M_PAPER",
    "N_ACTIONS",
    "STATE_HIGH",
    "STATE_LOW",
    "A",
    "B",
    "LQREnv",
    "Q",
    "R",
    "S",
    "collect_dataset",
    "discrete_actions",
    "greedy_gain",
    "mesh_actions",
    "next_state",
    "optimal_params",
    "oracle_operator",
    "policy_value",
    "reward",
    "riccati_p",
]
