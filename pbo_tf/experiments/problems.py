"""Problems: everything an experiment needs to know about one environment.

A problem bundles the environment's discount, Q family, offline dataset, structured and oracle operators,
its exact solution and the paper's evaluation protocol. Each is gin-configurable; the experiment
runner looks problems up by name in `PROBLEMS` (``Experiment.problem = 'chain_walk'``).
"""

from __future__ import annotations

import math

import gin
import numpy as np

from pbo_tf.data.transitions import CorruptDatasetError, Transitions
from pbo_tf.envs import chain_walk, lqr
from pbo_tf.operators import LQRPBO, TabularPBO, oracle_lqr_pbo, oracle_tabular_pbo
from pbo_tf.q import LQRQ, FlatMLPQ, TableQ


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

    def reference(self, dataset: Transitions | None = None) -> dict:
        """Facts about the optimum written under ``metrics.json["reference"]`` (some depend on the run's
        dataset, e.g. car-on-hill's count-weighted optimal J)."""
        return {}

    def evaluate(self, params: np.ndarray, dataset: Transitions | None = None) -> list[dict]:
        """Metrics of each parameter vector of ``params [n, d]``, one dict each (``dataset``: the run's)."""
        raise NotImplementedError

    def artifacts(self, params: np.ndarray, folder: str, ks: list) -> None:
        """Writes extra per-run files for figures (e.g. car-on-hill's greedy policy maps); default none."""

    def dataset_layout(self) -> dict:
        """What `dataset` returns: ``size`` (transitions), ``state_shape`` (one state's), ``integer_states``,
        ``integer_actions`` and ``n_actions`` (the number of action indices, for integer actions)."""
        raise NotImplementedError

    def check_dataset(self, data: Transitions, path: str) -> None:
        """Raises `CorruptDatasetError` when ``data`` (read from ``path``) is not a dataset of this problem
        as configured: another size, state shape or dtype, action kind or range, or non-finite values."""
        layout = self.dataset_layout()
        state = np.asarray(data.state)
        problems = []
        if layout.get("size") is not None and len(data) != layout["size"]:
            problems.append(f"{len(data)} transitions, expected {layout['size']}")
        if state.shape[1:] != tuple(layout["state_shape"]):
            problems.append(
                f"states of shape {list(state.shape[1:])}, expected {list(layout['state_shape'])}"
            )
        if np.issubdtype(state.dtype, np.integer) != layout["integer_states"]:
            kind = "integer" if layout["integer_states"] else "real"
            problems.append(f"{state.dtype} states, expected {kind} ones")
        action = np.asarray(data.action)
        if np.issubdtype(action.dtype, np.integer) != layout["integer_actions"]:
            kind = "integer action indices" if layout["integer_actions"] else "real action values"
            problems.append(f"{action.dtype} actions, expected {kind}")
        elif (
            layout["integer_actions"]
            and len(action)
            and not 0 <= action.min() <= action.max() < layout["n_actions"]
        ):
            problems.append(
                f"action indices in [{action.min()}, {action.max()}], expected [0, {layout['n_actions'] - 1}]"
            )
        for name in ("state", "reward", "next_state", "done"):
            values = np.asarray(getattr(data, name))
            if np.issubdtype(values.dtype, np.floating) and not np.all(np.isfinite(values)):
                problems.append(f"non-finite {name} values")
        if problems:
            raise CorruptDatasetError(
                f"dataset {path} is not a {self.name} dataset of this config ({'; '.join(problems)}); "
                "delete it to collect a new one"
            )


@gin.configurable
class ChainWalkProblem(Problem):
    """Chain-walk (paper Sec. 5.1): tabular Q, every (s, a) × ``repetitions`` as the dataset."""

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


class _PairedGreedy:
    """TF-traceable greedy functions for rollouts (row i of the states follows ``params[i]``), one per shape
    of ``params``, reading a variable that each call assigns: the compiled rollout that takes the function
    (`pbo_tf.evaluation.car_on_hill.greedy_rollout_values`) is traced once for all seeds of a run."""

    def __init__(self, q_family):
        self.q_family = q_family
        self._by_shape: dict[tuple, tuple] = {}

    def __call__(self, params: np.ndarray):
        import tensorflow as tf

        params = np.asarray(params, np.float32)
        entry = self._by_shape.get(params.shape)
        if entry is None:
            variable = tf.Variable(params, trainable=False)
            entry = variable, lambda states: self.q_family.greedy_actions_paired(variable, states)
            self._by_shape[params.shape] = entry
        entry[0].assign(params)
        return entry[1]


@gin.configurable
class CarOnHillProblem(Problem):
    """Car-on-hill (paper Sec. 6.1): MLP Q on (p, v, u/4), the 5500-transition dataset, greedy rollouts from
    the 17×17 grid against the exact optimum (`pbo_tf.envs.car_on_hill`, `pbo_tf.evaluation.car_on_hill`).

    Args:
      hidden: hidden widths of the Q network (paper: [30], d = 151).
      action_values: the action encoding fed to the Q network (u = ∓4 scaled to ∓1).
      n_random, n_oriented: dataset composition (4500 + 1000).
      layout: evaluation grid layout (`pbo_tf.envs.car_on_hill`, default the reference's).
      policy_map_size: resolution of the saved greedy policy maps (``policy_maps.npz``).
    """

    name = "car_on_hill"
    main_metric = "J"

    def __init__(
        self,
        hidden=(30,),
        action_values=(-1.0, 1.0),
        n_random: int = 4500,
        n_oriented: int = 1000,
        layout: str = "reference",
        policy_map_size: int = 101,
    ):
        from pbo_tf.envs import car_on_hill

        self.env = car_on_hill
        self.gamma = car_on_hill.GAMMA
        self.hidden, self.action_values = [int(h) for h in hidden], [float(a) for a in action_values]
        self.n_random, self.n_oriented = int(n_random), int(n_oriented)
        self.layout, self.policy_map_size = layout, int(policy_map_size)
        self._optimum = None
        self._paired_greedy = _PairedGreedy(self.q_family())

    def q_family(self):
        return FlatMLPQ(2, self.hidden, self.action_values)

    def dataset(self, seed):
        return self.env.collect_dataset(seed, self.n_random, self.n_oriented)

    def dataset_layout(self):
        n_actions = len(self.action_values)
        size = self.n_random + self.n_oriented
        return dict(
            size=size, state_shape=(2,), integer_states=False, integer_actions=True, n_actions=n_actions
        )

    def optimum(self):
        """``(V* [289], Q* [289, 2])`` on the grid (computed once, then read from the cache)."""
        if self._optimum is None:
            # The package ships the full-horizon result (computed once by `optimal_values`, a long search);
            # other settings are computed once and cached (PBO_TF_CACHE or ~/.cache/pbo_tf).
            import os

            packaged = self.env.PACKAGED_DATA_DIR
            shipped = os.path.exists(
                self.env.optimal_values_cache_path(packaged, self.gamma, layout=self.layout)
            )
            cache_dir = packaged if shipped else None
            self._optimum = self.env.optimal_values(self.gamma, cache_dir=cache_dir, layout=self.layout)
        return self._optimum

    def _counts(self, dataset):
        if dataset is None:
            raise ValueError("car-on-hill metrics weight cells by the run's dataset: pass dataset=")
        return self.env.state_counts(np.asarray(dataset.state), layout=self.layout)

    def reference(self, dataset=None):
        from pbo_tf.evaluation.car_on_hill import reference_metrics

        v_star, _ = self.optimum()
        return reference_metrics(v_star, self._counts(dataset))

    def evaluate(self, params, dataset=None):
        from pbo_tf.evaluation.car_on_hill import car_on_hill_metrics, greedy_rollout_values

        params = np.asarray(params, np.float32)
        q = self.q_family()
        grid = self.env.grid_centres(self.layout)
        values = greedy_rollout_values(self._paired_greedy(params), grid, len(params), gamma=self.gamma)
        q_values = q.q_all(params, grid.astype(np.float32)).numpy()
        v_star, q_star = self.optimum()
        return car_on_hill_metrics(values, q_values, self._counts(dataset), v_star, q_star)

    def artifacts(self, params, folder, ks):
        """``policy_maps.npz``: greedy action indices ``[len(ks), n_p, n_v]`` on a fine (p, v) grid."""
        import os

        from pbo_tf.io import atomic_open

        n = self.policy_map_size
        p_axis = np.linspace(-1.0, 1.0, n)
        v_axis = np.linspace(-3.0, 3.0, n)
        states = np.stack(np.meshgrid(p_axis, v_axis, indexing="ij"), -1).reshape(-1, 2).astype(np.float32)
        actions = self.q_family().greedy_actions(np.asarray(params, np.float32), states).numpy()
        with atomic_open(os.path.join(folder, "policy_maps.npz"), "wb") as f:
            np.savez(
                f, actions=actions.reshape(-1, n, n), k=np.array([str(k) for k in ks]), p=p_axis, v=v_axis
            )


@gin.configurable
class BicycleProblem(Problem):
    """Bicycle balancing (paper Sec. 6.1, offline): MLP Q on (ω, ω̇, θ, θ̇, d/0.02, T/2), 70 000 random
    transitions in 20-step episodes, evaluation by noisy rollouts from upright (paper appendix "Bicycle").

    Args:
      hidden: hidden widths of the Q network (paper: [30]).
      n_transitions, episode_length: the offline dataset.
      n_rollouts, max_steps: evaluation (paper: 100 rollouts of up to 50 000 steps = 500 s).
      eval_seed: seed of the evaluation noise (the same for every k and run: curves compare like with like).
    """

    name = "bicycle"
    main_metric = "balancing_time_s"

    def __init__(
        self,
        hidden=(30,),
        n_transitions: int = 70_000,
        episode_length: int = 20,
        n_rollouts: int = 100,
        max_steps: int = 50_000,
        eval_seed: int = 0,
    ):
        from pbo_tf.envs import bicycle

        self.env = bicycle
        self.gamma = bicycle.GAMMA
        self.hidden = [int(h) for h in hidden]
        self.n_transitions, self.episode_length = int(n_transitions), int(episode_length)
        self.n_rollouts, self.max_steps, self.eval_seed = int(n_rollouts), int(max_steps), int(eval_seed)

    def q_family(self):
        return FlatMLPQ(4, self.hidden, self.env.ACTION_ENCODING)

    def dataset(self, seed):
        return self.env.collect_dataset(seed, self.n_transitions, self.episode_length)

    def dataset_layout(self):
        n_actions = len(self.env.ACTION_ENCODING)
        return dict(
            size=self.n_transitions,
            state_shape=(4,),
            integer_states=False,
            integer_actions=True,
            n_actions=n_actions,
        )

    def reference(self, dataset=None):
        return {"max_balancing_time_s": self.max_steps * self.env.DT}

    def evaluate(self, params, dataset=None):
        from pbo_tf.evaluation.bicycle import evaluate_params

        return evaluate_params(
            self.q_family(),
            params,
            n_rollouts=self.n_rollouts,
            max_steps=self.max_steps,
            gamma=self.gamma,
            seed=self.eval_seed,
        )


PROBLEMS = {
    "chain_walk": ChainWalkProblem,
    "lqr": LQRProblem,
    "car_on_hill": CarOnHillProblem,
    "bicycle": BicycleProblem,
}


def make_problem(name: str) -> Problem:
    """The problem called ``name`` (its gin bindings applied).

    Raises:
      ValueError: unknown name, listing the known ones.
    """
    if name not in PROBLEMS:
        raise ValueError(f"unknown environment {name!r}; known environments: {sorted(PROBLEMS)}")
    return PROBLEMS[name]()
