"""Online environments: what an online experiment needs to know about one environment.

An online environment bundles the gymnasium id, the discount, the Q family, the training episode cut and
the greedy evaluation protocol. Each is gin-configurable; `pbo_tf.experiments.online.OnlineExperiment`
looks them up by name in `ONLINE_ENVS` (``OnlineExperiment.env = 'lunar_lander'``), as the offline runner
looks up `pbo_tf.experiments.problems.PROBLEMS`.

They live beside the offline problems rather than among them: an offline `Problem` is a dataset, its
structured and oracle operators and an exact solution, none of which an online run has, while an online
run needs a TF-Agents environment to collect from, which no offline run does.

Q families: lunar lander ``FlatMLPQ(8, [30, 30], [0, 1, 2, 3])``, the action index fed as one scalar input,
which gives the paper's d = 1261 (and its PBO width 2522 = 2d); bicycle ``FlatMLPQ(4, [30], ACTIONS /
(0.02, 2))`` as the offline `pbo_tf.experiments.problems.BicycleProblem` (d = 241, PBO width 482). Training
episodes are cut at 1000 steps (lunar lander) and 20 steps (bicycle, as the paper); truncations bootstrap.

Evaluation (greedy, first action on ties), ``n_episodes`` per parameter vector:

* lunar lander (`pbo_tf.evaluation.lunar_lander.evaluate_lunar_lander`): episodes of at most
  ``eval_max_steps`` (1000) steps, episode j of every policy from the same seeded reset; metrics
  ``discounted_return`` (the paper's J), ``return`` and ``episode_length``;
* bicycle (`pbo_tf.evaluation.bicycle.evaluate_params`, the offline evaluation): noisy rollouts from
  upright of at most ``eval_max_steps`` (50 000) steps; metrics ``balancing_time_s`` and
  ``discounted_return`` (the compiled rollouts do not accumulate the undiscounted return).
"""

from __future__ import annotations

from collections.abc import Sequence

import gin
import numpy as np

try:
    from tf_agents.environments import tf_py_environment
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.envs.tf_agents_adapter import to_tf_agents
from pbo_tf.q import FlatMLPQ


class OnlineEnv:
    """Interface (see the module docstring).

    Attributes:
      name: the name written as ``metrics.json["env"]``.
      env_id: the gymnasium id.
      state_dim: size of an observation.
      gamma: discount factor.
      train_max_episode_steps: training episodes are cut (truncated) after this many steps.
      eval_max_steps: evaluation episodes are cut after this many steps.
      eval_seed: seed of the evaluation episodes (the same for every k and run).
      main_metric: the metric shown in progress output and plots.
    """

    name: str = ""
    env_id: str = ""
    state_dim: int = 0
    main_metric: str = ""

    def __init__(
        self,
        hidden: Sequence[int],
        action_values,
        gamma: float,
        train_max_episode_steps: int,
        eval_max_steps: int,
        eval_seed: int,
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

    def q_family(self) -> FlatMLPQ:
        return FlatMLPQ(self.state_dim, self.hidden, self.action_values)

    def tf_env(self, seed: int) -> tf_py_environment.TFPyEnvironment:
        """The training environment: episodes cut at ``train_max_episode_steps``, discount 1 on every step
        but terminations (the agents apply γ)."""
        return tf_py_environment.TFPyEnvironment(
            to_tf_agents(self.env_id, seed=seed, max_episode_steps=self.train_max_episode_steps, discount=1.0)
        )

    def evaluate(self, q_family, params: np.ndarray, n_episodes: int) -> list[dict]:
        """Metrics of the greedy policy of each ``Q_{params[i]}`` (``params [n, d]``), one dict each."""
        raise NotImplementedError

    def reference(self) -> dict:
        """Facts written under ``metrics.json["reference"]``."""
        return {}


@gin.configurable
class LunarLanderEnv(OnlineEnv):
    """Lunar lander (paper Sec. 6.2), online.

    Args:
      hidden: hidden widths of the Q network (paper: [30, 30]).
      action_values: the action encoding fed to the Q network (default the index 0..3 as one scalar).
      gamma: discount factor.
      train_max_episode_steps: training episode cut.
      eval_max_steps: evaluation episode cut (the horizon).
      eval_seed: seed of the evaluation resets.
      eval_max_envs: at most this many evaluation environments stepped together (memory, not results).
    """

    name = "lunar_lander"
    env_id = "LunarLander-v3"
    state_dim = 8
    main_metric = "discounted_return"

    def __init__(
        self,
        hidden: Sequence[int] = (30, 30),
        action_values: Sequence[float] = (0.0, 1.0, 2.0, 3.0),
        gamma: float = 0.99,
        train_max_episode_steps: int = 1000,
        eval_max_steps: int = 1000,
        eval_seed: int = 0,
        eval_max_envs: int | None = None,
    ):
        super().__init__(hidden, action_values, gamma, train_max_episode_steps, eval_max_steps, eval_seed)
        self.eval_max_envs = eval_max_envs

    def evaluate(self, q_family, params, n_episodes):
        from pbo_tf.evaluation.lunar_lander import evaluate_lunar_lander

        return evaluate_lunar_lander(
            q_family,
            params,
            n_episodes=n_episodes,
            max_steps=self.eval_max_steps,
            gamma=self.gamma,
            seed=self.eval_seed,
            max_envs=self.eval_max_envs,
            env_id=self.env_id,
        )


@gin.configurable
class BicycleOnlineEnv(OnlineEnv):
    """Bicycle balancing (paper Sec. 6.2), online: 20-step training episodes, evaluation as offline.

    Args:
      hidden: hidden widths of the Q network (paper: [30]).
      action_values: the action encoding (default the offline one, (d / 0.02, T / 2) per action).
      gamma: discount factor.
      train_max_episode_steps: training episode cut (paper: 20).
      eval_max_steps: evaluation rollout cut (50 000 steps = 500 s).
      eval_seed: seed of the evaluation noise.
      eval_jit_compile: compile the rollouts with XLA (faster for long rollouts; turning it off saves the
        compilation in tiny runs).
    """

    name = "bicycle"
    state_dim = 4
    main_metric = "balancing_time_s"

    def __init__(
        self,
        hidden: Sequence[int] = (30,),
        action_values=None,
        gamma: float | None = None,
        train_max_episode_steps: int = 20,
        eval_max_steps: int | None = None,
        eval_seed: int = 0,
        eval_jit_compile: bool = True,
    ):
        from pbo_tf.envs import ENV_IDS
        from pbo_tf.envs import bicycle as bk

        self.env_id = ENV_IDS["bicycle"]
        self.dt = bk.DT
        super().__init__(
            hidden,
            bk.ACTION_ENCODING if action_values is None else action_values,
            bk.GAMMA if gamma is None else gamma,
            train_max_episode_steps,
            bk.MAX_EPISODE_STEPS if eval_max_steps is None else eval_max_steps,
            eval_seed,
        )
        self.eval_jit_compile = bool(eval_jit_compile)

    def evaluate(self, q_family, params, n_episodes):
        from pbo_tf.evaluation.bicycle import evaluate_params

        return evaluate_params(
            q_family,
            params,
            n_rollouts=n_episodes,
            max_steps=self.eval_max_steps,
            gamma=self.gamma,
            seed=self.eval_seed,
            jit_compile=self.eval_jit_compile,
        )

    def reference(self):
        return {"max_balancing_time_s": self.eval_max_steps * self.dt}


ONLINE_ENVS = {"lunar_lander": LunarLanderEnv, "bicycle": BicycleOnlineEnv}


def make_online_env(name: str) -> OnlineEnv:
    """The online environment called ``name`` (its gin bindings applied).

    Raises:
      ValueError: unknown name, listing the known ones.
    """
    if name not in ONLINE_ENVS:
        raise ValueError(f"unknown online environment {name!r}; known: {sorted(ONLINE_ENVS)}")
    return ONLINE_ENVS[name]()
