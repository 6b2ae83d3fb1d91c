"""Bicycle balancing (paper Sec. 6.1 offline, Sec. 6.2 online): dynamics, dataset, evaluation, experiments.

* `mdp`: the equations of motion (`bicycle_step`, NumPy or TensorFlow), `BicycleEnv` (``pbo_tf/Bicycle-v0``)
  and the paper's offline dataset;
* `evaluation`: the compiled noisy rollouts from upright and their metrics (imports TensorFlow);
* `problem`: `BicycleProblem`, the offline experiment's view;
* `online`: `BicycleOnlineEnv`, the online experiment's view.

`problem` and `online` are imported by the runners through `pbo_tf.envs.registry`, not here; the names of
`mdp` are re-exported here, so ``from pbo_tf.envs import bicycle; bicycle.bicycle_step(...)`` works.
"""

from pbo_tf.envs.bicycle.mdp import (
    ACTION_ENCODING,
    ACTIONS,
    D_CM,
    DT,
    FALL_REWARD,
    GAMMA,
    I_BC,
    I_DC,
    I_DL,
    I_DV,
    M_C,
    M_D,
    M_P,
    MAX_EPISODE_STEPS,
    N_ACTIONS,
    NOISE,
    OMEGA_BOUND,
    SHAPING_SCALE,
    SIGMA_DOT,
    START_SCALE,
    THETA_BOUND,
    BicycleEnv,
    C,
    G,
    H,
    L,
    M,
    R,
    V,
    bicycle_step,
    collect_dataset,
)

__all__ = [
    "ACTIONS",
    "ACTION_ENCODING",
    "C",
    "DT",
    "D_CM",
    "FALL_REWARD",
    "GAMMA",
    "G",
    "H",
    "I_BC",
    "I_DC",
    "I_DL",
    "I_DV",
    "L",
    "M",
    "MAX_EPISODE_STEPS",
    "M_C",
    "M_D",
    "M_P",
    "N_ACTIONS",
    "NOISE",
    "OMEGA_BOUND",
    "R",
    "SHAPING_SCALE",
    "SIGMA_DOT",
    "START_SCALE",
    "THETA_BOUND",
    "V",
    "BicycleEnv",
    "bicycle_step",
    "collect_dataset",
]
