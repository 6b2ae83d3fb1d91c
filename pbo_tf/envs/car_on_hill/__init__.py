"""Car-on-hill (Ernst, Geurts & Wehenkel 2005, "Tree-based batch mode RL"), the paper's offline benchmark.

One module per concern, each importing only `dynamics` (and `optimum` also `grid`), so there are no cycles:

* `dynamics`: the hill, the equations of motion, the RK4 step with the ``p = 0`` junction handled, and the
  reward / termination of a transition (the MDP itself, generic over NumPy, floats and TensorFlow);
* `env`: `CarOnHillEnv`, the gymnasium environment (``pbo_tf/CarOnHill-v0``);
* `dataset`: `collect_dataset`, the paper's offline dataset;
* `grid`: the 17 × 17 evaluation grid, its cells and the per-cell counts;
* `optimum`: the exact ``V*``/``Q*`` on that grid (`first_passage`, `optimal_values`) and their cache
  (the shipped one in ``data/``).

The experiments' side, which imports TensorFlow and the Q families, is not imported here:

* `evaluation`: greedy rollouts from the grid (compiled) and the count-weighted metrics;
* `problem`: `CarOnHillProblem`, the offline experiment's view (named ``car_on_hill`` in
  `pbo_tf.envs.registry`).

Every public name of the first five is re-exported here, so ``from pbo_tf.envs.car_on_hill import X`` and
``pbo_tf.envs.car_on_hill.X`` work for any of them.
"""

from pbo_tf.envs.car_on_hill.dataset import ORIENTED_END, ORIENTED_START, collect_dataset
from pbo_tf.envs.car_on_hill.dynamics import (
    ACTION_FORCES,
    DT,
    GAMMA,
    GRAVITY,
    HORIZON,
    MASS,
    MAX_POSITION,
    MAX_VELOCITY,
    N_ACTIONS,
    N_SUBSTEPS,
    RESET_STATE,
    SCALAR,
    acceleration,
    hill,
    hill_derivatives,
    step_pv,
    step_states,
    transition_outcome,
)
from pbo_tf.envs.car_on_hill.env import OBS_HIGH, OBS_LOW, CarOnHillEnv
from pbo_tf.envs.car_on_hill.grid import (
    DEFAULT_LAYOUT,
    GRID_SIZE,
    LAYOUTS,
    cell_indices,
    grid_axes,
    grid_centres,
    grid_edges,
    state_counts,
)
from pbo_tf.envs.car_on_hill.optimum import (
    BFS_LATTICE,
    PACKAGED_DATA_DIR,
    cached_optimal_q_values_of_pairs,
    can_reach_top,
    default_cache_dir,
    first_passage,
    optimal_q_values,
    optimal_q_values_of_pairs,
    optimal_state_values,
    optimal_values,
    optimal_values_cache_path,
    shifted_energy,
    values_from_first_passage,
)

__all__ = [
    "ACTION_FORCES",
    "BFS_LATTICE",
    "DEFAULT_LAYOUT",
    "DT",
    "GAMMA",
    "GRAVITY",
    "GRID_SIZE",
    "HORIZON",
    "LAYOUTS",
    "MASS",
    "MAX_POSITION",
    "MAX_VELOCITY",
    "N_ACTIONS",
    "N_SUBSTEPS",
    "OBS_HIGH",
    "OBS_LOW",
    "ORIENTED_END",
    "ORIENTED_START",
    "PACKAGED_DATA_DIR",
    "RESET_STATE",
    "SCALAR",
    "CarOnHillEnv",
    "acceleration",
    "can_reach_top",
    "cell_indices",
    "collect_dataset",
    "default_cache_dir",
    "first_passage",
    "grid_axes",
    "grid_centres",
    "grid_edges",
    "hill",
    "hill_derivatives",
    "optimal_q_values",
    "optimal_q_values_of_pairs",
    "cached_optimal_q_values_of_pairs",
    "optimal_state_values",
    "optimal_values",
    "optimal_values_cache_path",
    "shifted_energy",
    "state_counts",
    "step_pv",
    "step_states",
    "transition_outcome",
    "values_from_first_passage",
]
