"""Any offline dataset as a problem: `DatasetProblem`, named ``dataset`` in the registry.

The dataset is a user's file (`pbo_tf.envs.dataset.source`: an ``.npz`` of ``(s, a, r, s', done)`` arrays
or a Minari dataset), read and checked when the problem is built, before any training. Its Q family follows
its states: integer states ``[N]`` → `TableQ` (``n_states`` × ``n_actions``), vectors ``[N, d]`` →
`FlatMLPQ` on ``concat(s, action_values[a])`` with the raw observations as inputs.

Evaluation of each ``Q_ω``, as there is no exact solution:

* with a gymnasium id (``gym_id``, or the Minari dataset's own env spec): greedy rollouts
  (`pbo_tf.envs.gym.evaluation.evaluate_greedy`: ``eval_episodes`` seeded episodes cut at
  ``eval_max_steps``), their mean ``discounted_return`` (γ of the problem), ``return`` and
  ``episode_length``;
* on held-out transitions (``holdout_fraction`` of the file, by default 0.2 without a gym id and 0 with
  one; the training dataset excludes them): the empirical Bellman residual, the PBO / FQI loss of one
  iterate, ``bellman_residual = mean_{(s,a,r,s',done) ∈ H} (r + γ(1 − done) max_a' Q_ω(s', a') − Q_ω(s, a))²``
  and its root ``bellman_residual_rms``.

``main_metric`` follows `pbo_tf.envs.gym.online.GymOnlineEnv`'s shipped files: the episode ``return``
with a gym id, else ``bellman_residual``; any other metric the problem evaluates can be bound instead
(``discounted_return``, ...).

A run is named by its file and gym id (`label`: ``dataset acrobot_20k.npz (Acrobot-v1)``), recorded in its
``metrics.json`` with the file and a digest of its transitions (`run_fields`), so `pbo_tf.analysis` keeps
the runs of two files apart.
"""

from __future__ import annotations

import hashlib
import os

import gin
import numpy as np

from pbo_tf.data.transitions import Transitions
from pbo_tf.envs.base import Problem
from pbo_tf.envs.dataset.source import MINARI_PREFIX, DatasetFileError, SourceData, read_source
from pbo_tf.q import FlatMLPQ, TableQ

#: ``holdout_fraction`` when none is bound: without a gym id the held-out residual is the only evaluation.
DEFAULT_HOLDOUT = 0.2
#: The metrics of the rollouts (with a gym id) and of the held-out transitions (with a held-out share).
ROLLOUT_METRICS = ("return", "discounted_return", "episode_length")
HELD_OUT_METRICS = ("bellman_residual", "bellman_residual_rms")


@gin.configurable
class DatasetProblem(Problem):
    """An offline problem made of a user's dataset (see the module docstring).

    Args:
      path: the dataset: a path to an ``.npz`` file, or ``"minari:<id or folder>"`` (a local Minari dataset,
        by its id under ``MINARI_DATASETS_PATH`` or its folder).
      gamma: the discount γ of the Bellman targets (and of the rollouts' ``discounted_return``).
      gym_id: a gymnasium id to evaluate greedy policies in; None: the Minari dataset's own env spec when
        ``use_dataset_env`` and it has one, else no rollouts.
      use_dataset_env: take the Minari dataset's env spec as the gym id when ``gym_id`` is None.
      holdout_fraction: fraction of the file held out (seeded by the run seed) for the Bellman residual;
        None: 0.2 without a gym id, 0 with one.
      n_states: integer states: the table's number of states (default: the largest state in the file + 1,
        or the Minari observation space's n).
      n_actions: the number of actions (default: ``len(action_values)``, else the gym env's or the Minari
        action space's n, else the largest action in the file + 1).
      action_values: vector states: the encoding of each action fed to the Q network, ``[n]`` or
        ``[n, action_dim]`` (default the index, 0..n−1).
      hidden: vector states: the Q network's hidden widths.
      eval_episodes: rollouts per evaluated Q (gym id only).
      eval_max_steps: the rollouts' cut (default the env's registered episode cut, else 1000).
      eval_seed: seed of the rollouts' resets (the same for every k and run).
      main_metric: the metric of progress lines, the final line and reports: one the problem evaluates
        (`ROLLOUT_METRICS` with a gym id, `HELD_OUT_METRICS` with held-out transitions); None: ``return``
        with a gym id (as the shipped gym files bind ``GymOnlineEnv.main_metric``), else
        ``bellman_residual``.

    Raises:
      DatasetFileError: the dataset is missing or malformed, or disagrees with the other arguments (an
        action outside ``n_actions``, a state outside ``n_states``, observations of another shape than the
        gym env's).
      ValueError: arguments that cannot describe a problem (nothing to evaluate on, a fraction outside
        [0, 1), rollouts with integer states, a ``main_metric`` the problem does not evaluate).
    """

    name = "dataset"

    def __init__(
        self,
        path: str = gin.REQUIRED,
        gamma: float = 0.99,
        gym_id: str | None = None,
        use_dataset_env: bool = True,
        holdout_fraction: float | None = None,
        n_states: int | None = None,
        n_actions: int | None = None,
        action_values=None,
        hidden=(30,),
        eval_episodes: int = 10,
        eval_max_steps: int | None = None,
        eval_seed: int = 0,
        main_metric: str | None = None,
    ):
        self.path = path
        self.gamma = float(gamma)
        source: SourceData = read_source(path)
        self.source = source
        self.all_transitions = source.transitions
        data = self.all_transitions
        self.tabular = data.state.ndim == 1
        self._gym_id = gym_id if gym_id is not None else (source.env_id if use_dataset_env else None)
        if holdout_fraction is None:
            holdout_fraction = 0.0 if self._gym_id else DEFAULT_HOLDOUT
        self.holdout_fraction = float(holdout_fraction)
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError(f"DatasetProblem.holdout_fraction must be in [0, 1), got {holdout_fraction}")
        if self._gym_id is None and self.holdout_fraction == 0.0:
            raise ValueError(
                "DatasetProblem has nothing to evaluate on: give a gym_id for rollouts or a holdout_fraction "
                "> 0 for the held-out Bellman residual"
            )
        if len(data) < 2 and self.holdout_fraction > 0:
            raise DatasetFileError(f"dataset {path}: {len(data)} transition, too few to hold any out")
        self.hidden = [int(h) for h in hidden]
        self.eval_episodes, self.eval_seed = int(eval_episodes), int(eval_seed)
        if self.eval_episodes < 1:
            raise ValueError(f"DatasetProblem.eval_episodes must be >= 1, got {eval_episodes}")
        env_actions = env_max_steps = None
        if self._gym_id is not None:
            env_actions, env_max_steps = self._check_gym_env()
        self.eval_max_steps = int(eval_max_steps or env_max_steps or source.max_episode_steps or 1000)

        # The action set: its size, then (vector states) the encoding the Q network sees.
        if action_values is not None:
            self.action_values = np.asarray(action_values, np.float32)
            if n_actions is not None and int(n_actions) != len(self.action_values):
                raise ValueError(
                    f"DatasetProblem.n_actions={n_actions} disagrees with the {len(self.action_values)} "
                    "action_values"
                )
            n_actions = len(self.action_values)
        if n_actions is None:
            n_actions = env_actions or source.n_actions or int(data.action.max()) + 1
        self.n_actions = int(n_actions)
        if self.n_actions < 1:
            raise ValueError(f"DatasetProblem.n_actions must be >= 1, got {n_actions}")
        if int(data.action.max()) >= self.n_actions:
            row = int(np.argmax(data.action >= self.n_actions))
            raise DatasetFileError(
                f"dataset {path}: field {source.keys['action']!r} holds the action "
                f"{int(data.action[row])} at row {row}, outside the action set "
                f"(indices 0..{self.n_actions - 1})"
            )
        if action_values is None:
            self.action_values = np.arange(self.n_actions, dtype=np.float32)

        # The state space: a table's size, or the network's input size.
        if self.tabular:
            largest = int(max(data.state.max(), data.next_state.max()))
            self.n_states = int(n_states if n_states is not None else (source.n_states or largest + 1))
            if largest >= self.n_states:
                field = source.keys["state" if int(data.state.max()) == largest else "next_state"]
                raise DatasetFileError(
                    f"dataset {path}: field {field!r} holds the state {largest}, outside the table of "
                    f"n_states={self.n_states} (0..{self.n_states - 1})"
                )
            self.state_shape: tuple = ()
        else:
            self.n_states = None
            self.state_shape = tuple(data.state.shape[1:])
        evaluated = (ROLLOUT_METRICS if self._gym_id is not None else ()) + (
            HELD_OUT_METRICS if self.holdout_fraction > 0 else ()
        )
        if main_metric is None:
            main_metric = "return" if self._gym_id is not None else "bellman_residual"
        if main_metric not in evaluated:
            raise ValueError(
                f"DatasetProblem.main_metric must be one of the metrics this problem evaluates "
                f"{list(evaluated)}, got {main_metric!r}"
            )
        self.main_metric = main_metric
        self._digest = None

    # ------------------------------------------------------------------------------------ the problem
    @property
    def env_id(self) -> str | None:
        """The gymnasium id the greedy policies are evaluated in (None: no rollouts)."""
        return self._gym_id

    @property
    def gym_id(self) -> str | None:
        """The same as `env_id`."""
        return self._gym_id

    @property
    def file_name(self) -> str:
        """The dataset as reports name it: the file's name (``acrobot_20k.npz``), or ``minari:<id>`` (a
        Minari dataset by id; its folder's name when given by folder)."""
        if self.path.startswith(MINARI_PREFIX):
            where = self.path[len(MINARI_PREFIX) :].rstrip("/" + os.sep)
            return MINARI_PREFIX + (os.path.basename(where) if os.path.isdir(where) else where)
        return os.path.basename(self.path.rstrip("/" + os.sep))

    @property
    def label(self) -> str:
        """``dataset <file_name> (<gym id>)``, or ``dataset <file_name>`` without a gym id."""
        return f"{self.name} {self.file_name}" + (f" ({self._gym_id})" if self._gym_id else "")

    @property
    def digest(self) -> str:
        """The SHA-256 of the file's transitions (their fields' dtypes, shapes and bytes, in order): equal for
        two files of the same transitions, whatever their keys or folders."""
        if self._digest is None:
            sha = hashlib.sha256()
            for name, value in self.all_transitions.as_dict().items():
                value = np.ascontiguousarray(value)
                sha.update(f"{name}:{value.dtype.str}:{list(value.shape)};".encode())
                sha.update(value.tobytes())
            self._digest = sha.hexdigest()
        return self._digest

    def run_fields(self) -> dict:
        """``env_label`` (`label`), ``dataset`` (``file``: `file_name`, ``path``: as bound, ``sha256``:
        `digest`) and ``gym_id`` (None without rollouts)."""
        return {
            "env_label": self.label,
            "dataset": {"file": self.file_name, "path": self.path, "sha256": self.digest},
            "gym_id": self._gym_id,
        }

    def q_family(self):
        if self.tabular:
            return TableQ(self.n_states, self.n_actions)
        return FlatMLPQ(int(np.prod(self.state_shape)), self.hidden, self.action_values)

    def split(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``(train, held_out)``: sorted row indices of the file, a pure function of ``seed``
        (``round(holdout_fraction · N)`` rows held out, at least one when the fraction is > 0)."""
        n = len(self.all_transitions)
        n_held = 0 if self.holdout_fraction == 0 else min(n - 1, max(1, round(self.holdout_fraction * n)))
        order = np.random.default_rng(int(seed)).permutation(n)
        return np.sort(order[n_held:]), np.sort(order[:n_held])

    def dataset(self, seed: int) -> Transitions:
        """The file's transitions less the seed's held-out ones (`split`), in the file's order.

        Raises:
          ValueError: the gin files' ``BATCH_SIZE`` is larger than that (`check_batch_size`).
        """
        train = _take(self.all_transitions, self.split(seed)[0])
        self.check_batch_size(len(train))
        return train

    def check_batch_size(self, n_train: int) -> None:
        """Raises a one-line ValueError when the gin config's ``BATCH_SIZE`` macro (the dataset gin files'
        transitions per Adam step, 500 by default) is larger than the ``n_train`` training transitions,
        naming the macro, the value to bind and where ``n_train`` comes from (the file's size less the
        held-out share). Nothing to check when no ``BATCH_SIZE`` is bound (the trainer then checks its own
        ``batch_size``)."""
        try:
            batch = gin.query_parameter("%BATCH_SIZE")
        except ValueError:
            return
        if not isinstance(batch, int) or batch <= n_train:
            return
        n = len(self.all_transitions)
        source = f"the {n} of {self.path}"
        if n > n_train:
            fraction = f"DatasetProblem.holdout_fraction = {self.holdout_fraction:g}"
            source += f" less the {n - n_train} held out ({fraction})"
        raise ValueError(
            f"BATCH_SIZE = {batch} transitions per Adam step is more than the {n_train} training transitions "
            f"({source}): bind a smaller one, e.g. --gin_bindings='BATCH_SIZE={n_train}'"
        )

    def dataset_layout(self) -> dict:
        n_held = len(self.split(0)[1])
        return dict(
            size=len(self.all_transitions) - n_held,
            state_shape=self.state_shape,
            integer_states=self.tabular,
            integer_actions=True,
            n_actions=self.n_actions,
        )

    def check_dataset(self, data: Transitions, path: str) -> None:
        super().check_dataset(data, path)
        self.held_out(data, path)  # every row is one of the file's
        self.check_batch_size(len(data))

    def held_out(self, data: Transitions, path: str | None = None) -> Transitions:
        """The file's transitions that the training dataset ``data`` does not hold (as a multiset: a row
        the file holds m times and ``data`` j times is held out m − j times).

        Raises:
          DatasetFileError: ``data`` holds a row the file does not (more often than the file).
        """
        every, train = _row_keys(self.all_transitions), _row_keys(data)
        unique, inverse, counts = np.unique(every, return_inverse=True, return_counts=True)
        position = np.searchsorted(unique, train)
        position = np.minimum(position, len(unique) - 1)
        found = unique[position] == train
        left = counts - np.bincount(position[found], minlength=len(unique))
        if not np.all(found) or np.any(left < 0):
            raise DatasetFileError(
                f"dataset {path or 'given'} holds transitions that {self.path} does not: not a dataset of "
                "this file; delete it to take the file's again"
            )
        order = np.argsort(inverse, kind="stable")  # rows grouped by key, in file order within a group
        start = np.cumsum(counts) - counts
        rank = np.arange(len(order)) - start[inverse[order]]
        keep = np.sort(order[rank < left[inverse[order]]])
        return _take(self.all_transitions, keep)

    def reference(self, dataset: Transitions | None = None) -> dict:
        """The split's sizes and, with held-out transitions, ``zero_q_bellman_residual``, the residual of
        ``Q ≡ 0`` (the mean squared held-out reward)."""
        out = {"transitions": len(self.all_transitions)}
        if dataset is not None:
            held = self.held_out(dataset)
            out["held_out_transitions"] = len(held)
            if len(held):
                out["zero_q_bellman_residual"] = float(np.mean(np.asarray(held.reward, np.float64) ** 2))
        return out

    def evaluate(self, params: np.ndarray, dataset: Transitions | None = None) -> list[dict]:
        """Per parameter vector of ``params [n, d]``: the rollout metrics (with a gym id) and the held-out
        Bellman residual (with held-out transitions; ``dataset`` is the run's training dataset)."""
        params = np.asarray(params, np.float32)
        metrics = [{} for _ in range(len(params))]
        if self._gym_id is not None:
            from pbo_tf.envs.gym.evaluation import evaluate_greedy

            rollouts = evaluate_greedy(
                self.q_family(), params, self._gym_id, n_episodes=self.eval_episodes,
                max_steps=self.eval_max_steps, gamma=self.gamma, seed=self.eval_seed,
            )  # fmt: skip
            for entry, rollout in zip(metrics, rollouts, strict=True):
                entry.update(rollout)
        if self.holdout_fraction > 0:
            if dataset is None:
                raise ValueError("the held-out Bellman residual needs the run's training dataset (dataset=)")
            held = self.held_out(dataset)
            residual = bellman_residual(self.q_family(), params, held, self.gamma)
            for entry, value in zip(metrics, residual, strict=True):
                entry.update(bellman_residual=float(value), bellman_residual_rms=float(np.sqrt(value)))
        return metrics

    def _check_gym_env(self) -> tuple[int, int | None]:
        """``(n actions, registered episode cut)`` of the gym env, after checking it fits the dataset."""
        import gymnasium

        from pbo_tf.envs import make

        if self.tabular:
            raise ValueError(
                f"DatasetProblem: rollouts in {self._gym_id} need vector observations; the dataset "
                f"{self.path} has integer states (evaluate on held-out data instead)"
            )
        env = make(self._gym_id)
        try:
            obs_space, action_space = env.observation_space, env.action_space
            max_steps = env.spec.max_episode_steps if env.spec is not None else None
        finally:
            env.close()
        if not isinstance(action_space, gymnasium.spaces.Discrete):
            raise ValueError(f"DatasetProblem: {self._gym_id}'s actions are not discrete ({action_space})")
        state_shape = tuple(self.all_transitions.state.shape[1:])
        if tuple(obs_space.shape or ()) != state_shape:
            raise DatasetFileError(
                f"dataset {self.path}: field {self.source.keys['state']!r} has states of shape "
                f"{list(state_shape)}, {self._gym_id} observes {list(obs_space.shape or ())}"
            )
        return int(action_space.n), max_steps


def bellman_residual(q_family, params: np.ndarray, data: Transitions, gamma: float) -> np.ndarray:
    """``mean_i (r_i + γ(1 − done_i) max_a' Q_ω(s'_i, a') − Q_ω(s_i, a_i))²`` for each ``ω`` of
    ``params [n, d]`` over the transitions ``data``: ``[n]`` (float64)."""
    q_next = np.asarray(q_family.q_all(params, data.next_state), np.float64)  # [n, B, |A|]
    q_now = np.asarray(q_family.q_all(params, data.state), np.float64)
    q_sa = np.take_along_axis(q_now, np.asarray(data.action, np.int64)[None, :, None], axis=2)[..., 0]
    reward, done = np.asarray(data.reward, np.float64), np.asarray(data.done, np.float64)
    target = reward[None] + gamma * (1.0 - done)[None] * q_next.max(axis=2)
    return np.mean((target - q_sa) ** 2, axis=1)


def _take(data: Transitions, rows: np.ndarray) -> Transitions:
    return Transitions(**{name: value[rows] for name, value in data.as_dict().items()})


def _row_keys(data: Transitions) -> np.ndarray:
    """One opaque key per transition (its fields' bytes as float64), equal for equal rows: ``[N]``."""
    n = len(data)
    columns = [np.asarray(v, np.float64).reshape(n, -1) for v in data.as_dict().values()]
    rows = np.ascontiguousarray(np.concatenate(columns, axis=1))
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))[:, 0]
