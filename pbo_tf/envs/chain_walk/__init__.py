"""Chain-walk (paper Sec. 5.1): the finite MDP, its exact ``Q*``, its dataset and its offline problem.

* `mdp`: the transition model, ``Q*`` by value iteration, `ChainWalkEnv` (``pbo_tf/ChainWalk-v0``) and the
  paper's dataset (every ``(s, a)`` × 10);
* `problem`: `ChainWalkProblem`, the offline experiment's view (tabular Q, tabular and oracle PBOs, the RMS
  error against ``Q*``); imported by the experiment runner through `pbo_tf.envs.registry`, not here.

The names of `mdp` are re-exported here, so ``from pbo_tf.envs import chain_walk; chain_walk.optimal_q()``
works.
"""

from pbo_tf.envs.chain_walk.mdp import (
    GAMMA,
    LEFT,
    N_ACTIONS,
    N_STATES,
    RIGHT,
    SUCCESS_PROB,
    ChainWalkEnv,
    collect_dataset,
    optimal_q,
    sample_next_states,
    transition_model,
)

__all__ = [
    "GAMMA",
    "LEFT",
    "N_ACTIONS",
    "N_STATES",
    "RIGHT",
    "SUCCESS_PROB",
    "ChainWalkEnv",
    "collect_dataset",
    "optimal_q",
    "sample_next_states",
    "transition_model",
]
