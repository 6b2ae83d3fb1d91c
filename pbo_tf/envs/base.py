"""The two views an experiment takes of an environment, as base classes: `Problem` and `OnlineEnv`.

Every environment package (`pbo_tf.envs.<env>`) implements one or both, and `pbo_tf.envs.registry` names
them, so the runners find them by name (``Experiment.problem = 'chain_walk'``,
``OnlineExperiment.env = 'lunar_lander'``):

* `Problem`, the offline view: the discount, the Q family, the offline dataset (and the check that a saved
  one belongs to this configuration), the structured and oracle operators, the exact solution, the
  paper's evaluation protocol and the gymnasium environment its policies act in (`Problem.env_id`,
  `Problem.gym_kwargs`);
* `OnlineEnv`, the online view: the gymnasium id, the discount, the Q family, the training episode cut (a
  TF-Agents environment to collect from) and the greedy evaluation protocol.

They are separate because an offline problem is a dataset, operators and an exact solution, none of which an
online run has, while an online run needs an environment to collect from, which no offline run does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from pbo_tf.data.transitions import CorruptDatasetError, Transitions
from pbo_tf.envs import registry
from pbo_tf.q import FlatMLPQ, PerActionMLPQ

if TYPE_CHECKING:
    from tf_agents.environments import tf_py_environment


class Problem:
    """The offline view of an environment (see the module docstring)."""

    name: str = ""
    gamma: float = 1.0
    # Metric used by default in plots and progress output.
    main_metric: str = ""
    #: The paper's offline schedule at the paper's sizes (appendix Tables 1-2), against which a run's
    #: ``metrics["budget"]`` counts its Adam steps (`pbo_tf.trainers.builders`): ``refreshes``,
    #: ``passes_per_refresh``, ``w_batches``, ``d_batches`` (ProFQI), ``fqi_epochs`` (FQI per iteration) and,
    #: where the reference code has an i-FQI experiment, ``ifqi_refreshes`` and ``ifqi_passes_per_refresh``.
    #: None: no paper schedule (no budget is recorded).
    paper_budget: dict | None = None

    @property
    def env_id(self) -> str | None:
        """The gymnasium id of the environment this problem's dataset comes from, in which its greedy
        policies act (`pbo_tf.experiments.export` exports them for it): the registry entry's ``gym_id`` by
        default; None: no gymnasium environment. A subclass overrides it with a property or a class
        attribute, or sets it on an instance."""
        if "_env_id" in vars(self):
            return self._env_id
        if self.name not in registry.names():
            return None
        return registry.entry(self.name).gym_id

    @env_id.setter
    def env_id(self, value: str | None) -> None:
        self._env_id = value

    @property
    def label(self) -> str:
        """The problem as progress lines and reports name it: its registry ``name`` by default; a problem
        whose name covers many configurations (a user's own dataset) names the one it is."""
        return self.name

    def run_fields(self) -> dict:
        """What ``metrics.json`` (and ``failure.json``) records about the problem beside ``env`` (its
        ``name``): default nothing. A problem whose ``label`` is not its name records it as ``env_label``,
        which `pbo_tf.analysis` groups and titles runs by."""
        return {}

    def gym_kwargs(self) -> dict:
        """The keyword arguments of ``gymnasium.make(self.env_id, ...)`` that make the environment of this
        configuration (e.g. chain-walk's size and slip probability); default none."""
        return {}

    def q_family(self):
        raise NotImplementedError

    def dataset(self, seed: int) -> Transitions:
        raise NotImplementedError

    def structured_pbo(self, q_family, init_std: float, **kwargs):
        raise NotImplementedError(f"{self.name} has no structured PBO")

    def oracle_pbo(self, q_family, **kwargs):
        raise NotImplementedError(f"{self.name} has no oracle PBO")

    def optimum_regression(self, dataset: Transitions, at: str = "grid", log=None) -> Transitions:
        """Transitions whose Bellman targets are the exact ``Q*`` (reward ``Q*(s, a)``, every transition
        terminal): at the states the metrics weight, as the run's ``dataset`` weights them (``at="grid"``),
        or at the dataset's own state-action pairs (``at="dataset"``); one FQI fit on them regresses the Q
        network on the optimum itself (``@FitOptimum``)."""
        raise NotImplementedError(f"{self.name} has no exact optimum to regress on")

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


class OnlineEnv:
    """The online view of an environment (see the module docstring).

    Attributes:
      name: the name written as ``metrics.json["env"]``.
      env_id: the gymnasium id (the registry's entry for ``name``).
      state_dim: size of an observation.
      gamma: discount factor.
      train_max_episode_steps: training episodes are cut (truncated) after this many steps.
      eval_max_steps: evaluation episodes are cut after this many steps.
      eval_seed: seed of the evaluation episodes (the same for every k and run).
      q_negative_slope: α of the Q network's leaky hidden units (0: ReLU).
      main_metric: the metric shown in progress output and plots.
      paper_budget: the paper's online schedule (appendix Table 2), against which a run's
        ``metrics["budget"]`` counts its training steps (`pbo_tf.agents.builders`): ProDQN's ``refreshes``
        and ``train_steps_per_refresh``, DQN's ``dqn_train_steps_per_update``; None: no paper schedule.
    """

    name: str = ""
    state_dim: int = 0
    main_metric: str = ""
    paper_budget: dict | None = None

    def __init__(
        self,
        hidden: Sequence[int],
        action_values,
        gamma: float,
        train_max_episode_steps: int,
        eval_max_steps: int,
        eval_seed: int,
        per_action_outputs: bool = False,
        q_negative_slope: float = 0.0,
    ):
        for key, value in dict(
            train_max_episode_steps=train_max_episode_steps, eval_max_steps=eval_max_steps
        ).items():
            if int(value) < 1:
                raise ValueError(f"{key} must be >= 1, got {value}")
        self.hidden = [int(h) for h in hidden]
        self.action_values = np.asarray(action_values, np.float32)
        self.gamma = float(gamma)
        self.train_max_episode_steps = int(train_max_episode_steps)
        self.eval_max_steps = int(eval_max_steps)
        self.eval_seed = int(eval_seed)
        self.per_action_outputs = bool(per_action_outputs)
        self.q_negative_slope = float(q_negative_slope)

    @property
    def env_id(self) -> str:
        """The gymnasium id: the one `pbo_tf.envs.registry` records for ``name``."""
        return registry.entry(self.name).gym_id

    def q_family(self) -> FlatMLPQ:
        """``FlatMLPQ(state_dim, hidden, action_values)`` (the action's encoding an input), or
        ``PerActionMLPQ(state_dim, hidden, |A|)`` with ``per_action_outputs`` (the state alone in, one output
        per action; ``|A|`` the rows of ``action_values``), fed the states as `input_scaling` says, with
        leaky hidden units when ``q_negative_slope`` > 0."""
        scaling = self.input_scaling()
        kwargs = {} if scaling is None else dict(state_shift=scaling[0], state_scale=scaling[1])
        if self.q_negative_slope:
            kwargs["negative_slope"] = self.q_negative_slope
        if self.per_action_outputs:
            return PerActionMLPQ(self.state_dim, self.hidden, len(self.action_values), **kwargs)
        return FlatMLPQ(self.state_dim, self.hidden, self.action_values, **kwargs)

    def input_scaling(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The Q network's ``(state_shift, state_scale)``, or None: raw states (the default)."""
        return None

    def tf_env(self, seed: int) -> tf_py_environment.TFPyEnvironment:
        """The training environment: episodes cut at ``train_max_episode_steps``, discount 1 on every step
        but terminations (the agents apply γ)."""
        from tf_agents.environments import tf_py_environment  # TF-Agents is installed apart (pbo_tf.deps)

        from pbo_tf.envs.tf_agents_adapter import to_tf_agents

        return tf_py_environment.TFPyEnvironment(
            to_tf_agents(self.env_id, seed=seed, max_episode_steps=self.train_max_episode_steps, discount=1.0)
        )

    def evaluate(self, q_family, params: np.ndarray, n_episodes: int) -> list[dict]:
        """Metrics of the greedy policy of each ``Q_{params[i]}`` (``params [n, d]``), one dict each."""
        raise NotImplementedError

    def reference(self) -> dict:
        """Facts written under ``metrics.json["reference"]``."""
        return {}
