"""Any gymnasium id with discrete actions and vector observations, online: `GymOnlineEnv`, named ``gym`` in
the registry (``OnlineExperiment.env = 'gym'``, ``GymOnlineEnv.gym_id = 'CartPole-v1'``).

Everything is read from the id's spaces: the state size from the observation ``Box``, the action set from
the ``Discrete`` action space (action ``i`` fed to the Q network as ``action_values[i]``, default the index
``i`` as one scalar, or one output per action with ``per_action_outputs``), and the Q network's input
scaling from the observation bounds (`box_scaling`: each dimension with finite bounds mapped onto [-1, 1],
the unbounded ones fed as they are), so an exported policy takes raw observations. Training episodes and
evaluation episodes are cut at the id's registered episode limit unless told otherwise. Evaluation:
`pbo_tf.envs.gym.evaluation.evaluate_greedy` (greedy, first action on ties, episode j of every policy from
the same seeded reset), metrics ``discounted_return``, ``return`` (undiscounted) and ``episode_length``.

A run's ``metrics.json["env"]`` is ``gym_<id>`` (`env_name`), so runs of different ids are grouped apart by
`pbo_tf.analysis`, and ``metrics.json["gym_id"]`` is the id itself.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import gin
import numpy as np
from gymnasium import spaces

from pbo_tf.envs.base import OnlineEnv

#: The metrics `evaluate` returns (each may be a run's ``main_metric``).
METRICS = ("discounted_return", "return", "episode_length")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def env_name(gym_id: str) -> str:
    """The name a run of ``gym_id`` records as ``metrics.json["env"]``: ``gym_`` and the id, each character
    outside ``[A-Za-z0-9_.-]`` (a namespace's ``/``, a module's ``:``) replaced by ``_``, so that it is also
    a file name (`pbo-report`'s figures are named after it)."""
    return "gym_" + _UNSAFE.sub("_", gym_id)


def box_scaling(low, high) -> tuple[np.ndarray, np.ndarray]:
    """The input scaling of a ``Box`` with bounds ``low``, ``high`` (``[n]`` each): ``(shift [n], scale [n])``
    float32 with ``(s - shift) * scale`` = -1 at ``low`` and 1 at ``high`` on each dimension whose bounds are
    both finite, smaller in magnitude than float32's largest value (which some environments use for
    "unbounded") and ``high > low``; ``shift = 0``, ``scale = 1`` (the dimension as it is) elsewhere."""
    low = np.asarray(low, np.float64).reshape(-1)
    high = np.asarray(high, np.float64).reshape(-1)
    big = float(np.finfo(np.float32).max)
    bounded = np.isfinite(low) & np.isfinite(high) & (np.abs(low) < big) & (np.abs(high) < big) & (high > low)
    low, high = np.where(bounded, low, -1.0), np.where(bounded, high, 1.0)  # unscaled dims: shift 0, scale 1
    shift = (low + high) / 2.0
    scale = 2.0 / (high - low)
    return shift.astype(np.float32), scale.astype(np.float32)


def _spaces(gym_id: str) -> tuple[spaces.Space, spaces.Space, int | None]:
    """``(observation_space, action_space, registered max_episode_steps)`` of ``gym_id``."""
    from pbo_tf.envs import make

    env = make(gym_id)
    try:
        return env.observation_space, env.action_space, env.spec.max_episode_steps if env.spec else None
    finally:
        env.close()


@gin.configurable
class GymOnlineEnv(OnlineEnv):
    """The online view of any gymnasium id with a ``Discrete`` action space and a 1-D ``Box`` observation.

    Args:
      gym_id: the gymnasium id (``'CartPole-v1'``, ``'Acrobot-v1'``, any registered one).
      hidden: hidden widths of the Q network, ``concat(s, enc(a)) -> ... -> 1`` (or ``s -> ... -> |A|``
        with ``per_action_outputs``).
      action_values: the encoding of each action fed to the Q network, ``[|A|]`` or ``[|A|, action_dim]``;
        None: the index ``0 .. |A| - 1`` as one scalar.
      per_action_outputs: the Q network takes the state alone and has one output per action
        (`pbo_tf.q.PerActionMLPQ`, DQN's own network) instead of the action fed as an input
        (`pbo_tf.q.FlatMLPQ`, the paper's); it takes no ``action_values``.
      q_negative_slope: α of the Q network's leaky hidden units ``max(x, α·x)`` (`pbo_tf.q.FlatMLPQ`); 0,
        the default, is ReLU.
      scale_observations: feed the Q network the bounded observation dimensions mapped onto [-1, 1]
        (`box_scaling`); False feeds raw observations.
      gamma: discount factor (training targets and ``discounted_return``).
      train_max_episode_steps: training episodes are cut after this many steps; None: the id's registered
        limit.
      eval_max_steps: evaluation episode cut; None: the id's registered limit.
      eval_seed: seed of the evaluation resets.
      eval_max_envs: at most this many evaluation environments stepped together (memory, not results).
      main_metric: the metric of progress lines and plots: ``discounted_return``, ``return`` or
        ``episode_length``.
      paper_budget: the published schedule of this id, if any (`pbo_tf.envs.base.OnlineEnv`: ``refreshes``,
        ``train_steps_per_refresh``, ``dqn_train_steps_per_update``), against which ``metrics["budget"]``
        counts a run's training steps; None: no budget is recorded.

    Raises:
      ValueError: (one line naming the id and the space) the action space is not ``Discrete`` starting at
        0, the observation space is not a 1-D ``Box``, ``action_values`` has another number of rows than
        there are actions or is given with ``per_action_outputs``, an episode cut is None with no
        registered limit, a ``q_negative_slope`` outside [0, 1), or an unknown ``main_metric``.
    """

    def __init__(
        self,
        gym_id: str = gin.REQUIRED,
        hidden: Sequence[int] = (30, 30),
        action_values: Sequence[float] | None = None,
        per_action_outputs: bool = False,
        q_negative_slope: float = 0.0,
        scale_observations: bool = True,
        gamma: float = 0.99,
        train_max_episode_steps: int | None = None,
        eval_max_steps: int | None = None,
        eval_seed: int = 0,
        eval_max_envs: int | None = None,
        main_metric: str = "discounted_return",
        paper_budget: dict | None = None,
    ):
        observation_space, action_space, registered_limit = _spaces(gym_id)
        if not isinstance(action_space, spaces.Discrete) or int(action_space.start) != 0:
            raise ValueError(
                f"{gym_id}: GymOnlineEnv needs a Discrete action space starting at 0 (Q-learning takes a max "
                f"over a finite action set), got {action_space}"
            )
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 1:
            raise ValueError(
                f"{gym_id}: GymOnlineEnv needs vector observations (a 1-D Box), got {observation_space}"
            )
        n_actions = int(action_space.n)
        if per_action_outputs and action_values is not None:
            raise ValueError(
                f"{gym_id}: GymOnlineEnv.action_values encodes the actions fed to the Q network as an input; "
                "with per_action_outputs the network takes the state alone (unbind one of them)"
            )
        if action_values is None:
            action_values = np.arange(n_actions, dtype=np.float32)
        action_values = np.asarray(action_values, np.float32)
        if action_values.ndim not in (1, 2) or len(action_values) != n_actions:
            raise ValueError(
                f"{gym_id} has {n_actions} actions ({action_space}) but action_values has shape "
                f"{list(action_values.shape)}; give one row per action"
            )
        limits = dict(train_max_episode_steps=train_max_episode_steps, eval_max_steps=eval_max_steps)
        for key, value in limits.items():
            if value is None and registered_limit is None:
                raise ValueError(f"{gym_id} registers no episode limit: bind GymOnlineEnv.{key}")
        if not 0.0 <= float(q_negative_slope) < 1.0:
            raise ValueError(
                f"{gym_id}: GymOnlineEnv.q_negative_slope must be in [0, 1) (0: ReLU), got {q_negative_slope}"
            )
        if main_metric not in METRICS:
            raise ValueError(f"main_metric must be one of {list(METRICS)}, got {main_metric!r}")
        super().__init__(
            hidden,
            action_values,
            gamma,
            registered_limit if train_max_episode_steps is None else train_max_episode_steps,
            registered_limit if eval_max_steps is None else eval_max_steps,
            eval_seed,
            per_action_outputs,
            q_negative_slope,
        )
        self.gym_id = str(gym_id)
        self.name = env_name(self.gym_id)
        self.state_dim = int(observation_space.shape[0])
        self.observation_space = observation_space
        self.n_actions = n_actions
        self.scale_observations = bool(scale_observations)
        self.eval_max_envs = eval_max_envs
        self.main_metric = main_metric
        self.paper_budget = None if paper_budget is None else dict(paper_budget)

    @property
    def env_id(self) -> str:
        """The gymnasium id this instance runs (``gym_id``)."""
        return self.gym_id

    def input_scaling(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The Q network's ``(state_shift, state_scale)`` (`box_scaling` of the observation bounds), or None
        when ``scale_observations`` is off or no dimension is bounded."""
        if not self.scale_observations:
            return None
        shift, scale = box_scaling(self.observation_space.low, self.observation_space.high)
        if not np.any(scale != 1.0) and not np.any(shift != 0.0):
            return None
        return shift, scale

    def evaluate(self, q_family, params, n_episodes):
        from pbo_tf.envs.gym.evaluation import evaluate_greedy  # imports TensorFlow

        return evaluate_greedy(
            q_family,
            params,
            self.env_id,
            n_episodes=n_episodes,
            max_steps=self.eval_max_steps,
            gamma=self.gamma,
            seed=self.eval_seed,
            max_envs=self.eval_max_envs,
        )
