"""Online experiments: DQN and ProDQN on TF-Agents (paper Sec. 6.4-6.5, lunar lander and online bicycle).

`OnlineExperiment` is the online sibling of `pbo_tf.experiments.runner.Experiment`, in the shape of
TF-Agents' ``train_eval`` examples: a `TFPyEnvironment` over the gymnasium adapter, a `TFUniformReplayBuffer`
filled first by a random policy (``initial_collect_steps``, the table's "start") and then, at every training
step, by a `DynamicStepDriver` running the agent's ε-greedy collect policy for ``steps_per_update``
environment steps, then one replay batch from ``replay_buffer.as_dataset(sample_batch_size=batch_size,
num_steps=2)`` and one ``agent.train`` call on it, with ``common.function`` around ``driver.run`` and
``agent.train``.

Schedules (Algorithm 1, appendix Table 2). The loop's unit is the training step (one collect, one replay
batch, one ``agent.train``); ``train_step`` counts them, and checkpoints, progress lines and
``max_train_steps_this_call`` are in training steps.

* ProDQN (`pbo_tf.agents.ProDQNAgent`), paper Algorithm 1: ``refreshes`` target refreshes (the paper's
  #epochs E), ``train_steps_per_refresh`` training steps after each (the paper's #training steps), so
  ``refreshes · train_steps_per_refresh`` training steps in all; each takes ``ceil(w_size / w_batch_size)``
  Adam steps, one per W batch, on its replay batch.
* DQN (`pbo_tf.agents.make_dqn_agent`): K hard target updates, each after ``fitting_steps`` training steps of
  one gradient step each (``K · fitting_steps`` in all). ``ω_k`` of the curve is the online parameter vector
  after ``k · fitting_steps`` steps, i.e. the one copied into the target network by the k-th update
  (``ω_0`` = the initial network, W[0] of the seed). The snapshots live in a checkpointed variable and
  are evaluated after training in one batched evaluation (the greedy evaluation does not influence
  training, so this is the same curve as evaluating after each update, only vectorised over k).
* Adam (`pbo_tf.optimizers.make_adam`, ε placed after the bias correction as the reference's optax by
  default) with the learning rate annealed linearly over the run's training steps: the reference's length,
  which for ProDQN ignores the W batches, so with 2 of them the learning rate reaches its end value halfway
  and stays there (``lr_schedule_counts_w_batches=True`` anneals over every Adam step instead).
* ε annealed linearly from ``epsilon_start`` to ``epsilon_end`` over ``epsilon_decay_env_steps`` ε-greedy
  environment steps (default: the whole run's, ``total_train_steps · steps_per_update``, the reference's
  count). ε is a function of the training step: the ``steps_per_update`` environment steps of training step
  t all use ε at ``t · steps_per_update`` environment steps.

Curves: DQN has the K + 1 points k = 0..K. ProDQN evaluates ``Q_{Λ^k(ω_0)}`` for k = 0..K + extra_iterations,
the iterates computed at once by ``pbo.iterate`` and evaluated together (one batched Q evaluation per time
step for every k and episode).

Evaluation (greedy, first action on ties):

* lunar lander (`evaluate_lunar_lander`): ``n_eval_episodes`` episodes per k of at most ``eval_max_steps``
  (1000) steps, stepped in lockstep over every (k, episode) pair with one batched Q evaluation per time
  step; episode j of every k starts from the same seeded reset, so the k compare like with like. Metrics:
  mean ``discounted_return`` (γ = 0.99, the paper's J), mean undiscounted ``return`` and mean
  ``episode_length``.
* bicycle (`pbo_tf.evaluation.bicycle.bicycle_rollouts`): ``n_eval_episodes`` (100) noisy rollouts from
  upright of at most ``eval_max_steps`` (50 000) steps per k. Metrics: ``balancing_time_s`` and
  ``discounted_return``. The undiscounted return is not reported: the compiled rollouts do not accumulate
  it, and it cannot be recovered from what they return.

Q families: lunar lander ``FlatMLPQ(8, [30, 30], [0, 1, 2, 3])`` — the action index fed as one scalar input,
which gives the paper's d = 1261 (and its PBO width 2522 = 2d); bicycle ``FlatMLPQ(4, [30], ACTIONS / (0.02,
2))`` as `pbo_tf.experiments.problems.BicycleProblem` (d = 241, PBO width 482; the paper's appendix says 302,
which is 2 × the car-on-hill d). Both are gin knobs (``hidden``, ``action_values``). Training episodes are
cut at 1000 steps (lunar lander) and 20 steps (bicycle, as the paper); truncations bootstrap.

Run folder contract (``D`` = ``root_dir``):

* ``D/fingerprint.json``: the fingerprint of the config; a relaunch with another config is refused
  (`pbo_tf.experiments.run_folder`);
* ``D/config.gin``: the gin config (written at the start, the operative config at the end);
* ``D/checkpoints/``: a `tf_agents.utils.common.Checkpointer` of the agent (networks, optimizer, target,
  train step), the replay buffer, the training metrics and the run's progress (initial collect done, time
  spent, DQN snapshots), saved every ``checkpoint_interval`` training steps (or ``checkpoint_interval_s``
  seconds), after the initial collect and at the end of training, so a killed run resumes from there. A
  resumed run starts a new episode (the environment and the policies' random streams are not
  checkpointed): it is a continuation, not a bit-exact replay, and the replay pair that joins the last
  stored step before the restart to the first one after it is one spurious transition per restart;
* ``D/tensorboard/``: the agent's training summaries (loss, ε, ...) every ``summary_interval`` steps, the
  training metrics and throughput at every log line, and the evaluation metrics per k (``curve/<metric>``);
* ``D/iterates.npz``: the parameter vectors ``ω_k`` of the curve (``iterates [n_k, d]``);
* ``D/policy/``: the greedy policy at k = K exported with `tf_agents.policies.policy_saver.PolicySaver`
  (a SavedModel: ``tf.saved_model.load(D/policy).action(time_step)`` needs TensorFlow and TF-Agents, not
  pbo_tf);
* ``D/metrics.json``: written last and atomically: ``env``, ``algorithm`` (the label), ``K``, ``seed``,
  ``curve`` (``[{"k": k, metric: value, ...}]``), ``reference`` (``{}`` for lunar lander), ``wall_time_s``
  (training, summed over resumed calls), ``eval_time_s``, ``env_steps_per_s`` (collect driver steps per
  second of driver time), ``grad_steps_per_s`` (Adam steps per second of train time),
  ``train_steps_per_s`` (training steps per second of train time), ``loop_steps_per_s`` (training steps per
  second of the whole collect + train loop), ``env_steps``, ``train_steps`` (training steps),
  ``adam_steps``, ``skipped_replay_batches`` (ProDQN: replay batches without a transition, which took no
  Adam step; 0 for DQN). A run folder is complete only when it exists; `OnlineExperiment.run` then
  returns it without re-running;
* ``D/failure.json``: written instead of ``metrics.json`` when training diverged. After every training
  step the loss and the parameters the greedy policy acts with (DQN: the online ω; ProDQN:
  ``Λ_φ^K(ω_0)``) are checked; a NaN or an Inf stops the run before the next checkpoint is written, so
  the checkpoints keep the last good state, and `run` raises `DivergenceError` naming what diverged and
  at which training step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Sequence

import gin
import numpy as np
import tensorflow as tf
import tf_keras
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import tf_py_environment
from tf_agents.eval import metric_utils
from tf_agents.metrics import tf_metrics
from tf_agents.policies import policy_saver, random_tf_policy
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.utils import common

from pbo_tf.agents import ProDQNAgent, ProDQNLossInfo, linear_epsilon, make_dqn_agent
from pbo_tf.envs.tf_agents_adapter import to_tf_agents
from pbo_tf.experiments import results, run_folder
from pbo_tf.io import atomic_open, write_text_atomic
from pbo_tf.operators import DeepPBO
from pbo_tf.optimizers import EPSILON_PLACEMENTS, linear_schedule, make_adam
from pbo_tf.q import FlatMLPQ
from pbo_tf.trainers.base import DivergenceError, check_checkpoint_index

ALGORITHMS = ("dqn", "prodqn")


@dataclasses.dataclass(frozen=True)
class OnlineEnv:
    """What an online experiment needs to know about an environment (defaults of `OnlineExperiment`)."""

    name: str
    env_id: str
    state_dim: int
    hidden: tuple[int, ...]
    action_values: np.ndarray
    gamma: float
    train_max_episode_steps: int
    eval_max_steps: int
    main_metric: str


def online_env(name: str) -> OnlineEnv:
    """The `OnlineEnv` called ``name`` (``lunar_lander`` or ``bicycle``)."""
    if name == "lunar_lander":
        return OnlineEnv(
            name="lunar_lander",
            env_id="LunarLander-v3",
            state_dim=8,
            hidden=(30, 30),
            action_values=np.arange(4, dtype=np.float32),  # the action index as one scalar input: d = 1261
            gamma=0.99,
            train_max_episode_steps=1000,
            eval_max_steps=1000,
            main_metric="discounted_return",
        )
    if name == "bicycle":
        from pbo_tf.envs import ENV_IDS
        from pbo_tf.envs import bicycle as bk

        return OnlineEnv(
            name="bicycle",
            env_id=ENV_IDS["bicycle"],
            state_dim=4,
            hidden=(30,),
            action_values=bk.ACTION_ENCODING,  # (d, T) -> {-1, 0, 1}, as offline
            gamma=bk.GAMMA,
            train_max_episode_steps=20,
            eval_max_steps=bk.MAX_EPISODE_STEPS,
            main_metric="balancing_time_s",
        )
    raise ValueError(f"unknown online environment {name!r}; known: ['bicycle', 'lunar_lander']")


# ------------------------------------------------------------------------------------------ evaluation
def _paired_greedy_fn(q_family, state_dim: int):
    """A compiled ``(params [n, d], states [n, B, s]) -> actions [n, B]`` (one trace for every shape)."""
    return tf.function(
        q_family.greedy_actions_paired,
        input_signature=(
            tf.TensorSpec([None, q_family.d], tf.float32),
            tf.TensorSpec([None, None, state_dim], tf.float32),
        ),
    )


def _episode_seed(eval_seed: int, episode: int) -> int:
    return int(eval_seed) * 1_000_003 + int(episode)


def evaluate_lunar_lander(
    q_family,
    params,
    n_episodes: int = 100,
    max_steps: int = 1000,
    gamma: float = 0.99,
    seed: int = 0,
    max_envs: int | None = None,
    env_id: str = "LunarLander-v3",
) -> list[dict]:
    """Greedy returns of ``Q_{params[i]}`` on lunar lander, every (policy, episode) stepped in lockstep.

    Args:
      q_family: the Q family (``q_all_paired`` on ``[n, B, 8]`` states).
      params: ``[n, d]`` parameter vectors (one greedy policy each).
      n_episodes: episodes per policy; episode j of every policy starts from ``reset(seed=f(seed, j))``.
      max_steps: episode cut (the horizon, 1000).
      gamma: discount of ``discounted_return``.
      seed: evaluation seed.
      max_envs: at most this many environments are stepped together (whole policies at a time; at least
        one policy); default all ``n × n_episodes``.
      env_id: the gymnasium id.

    Returns:
      Per policy: ``{"discounted_return", "return", "episode_length"}``, means over its episodes.
    """
    from pbo_tf.envs import make

    params = np.asarray(params, np.float32)
    n = len(params)
    state_dim = int(q_family.state_dim)
    greedy = _paired_greedy_fn(q_family, state_dim)
    per_chunk = n if max_envs is None else max(1, min(n, int(max_envs) // int(n_episodes)))
    envs = [make(env_id, max_episode_steps=int(max_steps)) for _ in range(per_chunk * n_episodes)]
    discounted = np.zeros((n, n_episodes))
    undiscounted = np.zeros((n, n_episodes))
    lengths = np.zeros((n, n_episodes), np.int64)
    try:
        for start in range(0, n, per_chunk):
            chunk = params[start : start + per_chunk]
            m = len(chunk)
            active = envs[: m * n_episodes]  # index i = policy (i // n_episodes), episode (i % n_episodes)
            obs = np.stack(
                [env.reset(seed=_episode_seed(seed, i % n_episodes))[0] for i, env in enumerate(active)]
            ).astype(np.float32)
            alive = np.ones(len(active), bool)
            disc_ret = np.zeros(len(active))
            ret = np.zeros(len(active))
            length = np.zeros(len(active), np.int64)
            weight = 1.0
            chunk_tensor = tf.constant(chunk)
            for _ in range(int(max_steps)):
                if not alive.any():
                    break
                actions = greedy(chunk_tensor, obs.reshape(m, n_episodes, state_dim)).numpy().reshape(-1)
                for i in np.flatnonzero(alive):
                    o, r, terminated, truncated, _ = active[i].step(int(actions[i]))
                    obs[i] = o
                    ret[i] += r
                    disc_ret[i] += weight * r
                    length[i] += 1
                    if terminated or truncated:
                        alive[i] = False
                weight *= gamma
            discounted[start : start + m] = disc_ret.reshape(m, n_episodes)
            undiscounted[start : start + m] = ret.reshape(m, n_episodes)
            lengths[start : start + m] = length.reshape(m, n_episodes)
    finally:
        for env in envs:
            env.close()
    return [
        {
            "discounted_return": float(discounted[i].mean()),
            "return": float(undiscounted[i].mean()),
            "episode_length": float(lengths[i].mean()),
        }
        for i in range(n)
    ]


def evaluate_bicycle(
    q_family,
    params,
    n_episodes: int = 100,
    max_steps: int = 50_000,
    gamma: float = 0.99,
    seed: int = 0,
    jit_compile: bool = True,
) -> list[dict]:
    """Greedy balancing time and discounted return of every ``Q_{params[i]}`` (the offline evaluation)."""
    from pbo_tf.evaluation.bicycle import evaluate_params

    return evaluate_params(q_family, params, n_episodes, max_steps, gamma, seed, jit_compile)


# ------------------------------------------------------------------------------------------ experiment
def _timings() -> dict:
    return {"n": 0, "collect": 0.0, "train": 0.0, "since": time.perf_counter()}


def _rate(count: int, seconds: float) -> float | None:
    return count / seconds if count > 0 and seconds > 0 else None


class _Progress(tf.Module):
    """The run's bookkeeping that must survive a restart (checkpointed with the agent)."""

    def __init__(self, n_iterates: int, d: int):
        super().__init__(name="progress")
        self.initial_collect_done = tf.Variable(False, name="initial_collect_done")
        self.wall_time_s = tf.Variable(0.0, dtype=tf.float64, name="wall_time_s")
        self.collect_s = tf.Variable(0.0, dtype=tf.float64, name="collect_s")
        self.train_s = tf.Variable(0.0, dtype=tf.float64, name="train_s")
        self.loop_env_steps = tf.Variable(0, dtype=tf.int64, name="loop_env_steps")
        self.loop_train_steps = tf.Variable(0, dtype=tf.int64, name="loop_train_steps")
        # DQN: ω_k, the online parameters after k · fitting_steps gradient steps (row 0 = ω_0).
        self.iterates = tf.Variable(tf.zeros([n_iterates, d]), name="iterates")


@gin.configurable(denylist=["root_dir", "log", "overwrite"])
class OnlineExperiment:
    """One online (environment, algorithm, K, seed) run on TF-Agents, configured by gin.

    Args:
      root_dir: the run folder (see the module docstring for its contract).
      env: ``lunar_lander`` or ``bicycle`` (online bicycle: 20-step training episodes).
      algorithm: ``dqn`` or ``prodqn``.
      label: name written as ``metrics.json["algorithm"]``; default ``algorithm``.
      K: DQN target updates / ProDQN Bellman iterations in the loss (and PBO applications of its policy).
      seed: run seed (W, initialisation, environment, replay sampling).
      extra_iterations: ProDQN evaluates k = 0..K + extra_iterations (DQN has no iterate beyond K).
      hidden, action_values: the Q family's hidden widths and action encoding (default: the env's, see the
        module docstring).
      gamma: discount factor (default the env's, 0.99).
      train_max_episode_steps: training episode cut (default: lunar lander 1000, bicycle 20).
      replay_capacity: replay buffer size (the table's "max #D").
      initial_collect_steps: random-policy environment steps before training (the table's "#D").
      batch_size: transitions in the replay batch of a training step.
      steps_per_update: environment steps collected by the ε-greedy policy at every training step.
      epsilon_start, epsilon_end: the collect policy's ε, annealed linearly ...
      epsilon_decay_env_steps: ... over this many ε-greedy environment steps (default: the whole run's,
        ``total_train_steps · steps_per_update``; counted at training-step granularity).
      lr_start, lr_end: Adam's learning rate, annealed linearly over ``lr_schedule_steps`` Adam steps.
      lr_schedule_counts_w_batches: ProDQN: anneal the learning rate over every Adam step of the run
        (``total_adam_steps``); False (the reference) anneals over ``total_train_steps``, ignoring the W
        batches, and the rate then stays at ``lr_end`` for the rest of the run. No effect for DQN.
      adam_epsilon, adam_epsilon_placement: Adam's ε and where it goes (`pbo_tf.optimizers.make_adam`):
        ``"reference"`` adds ε after the bias correction (optax, the reference), ``"keras"`` before it.
      fitting_steps: DQN training steps (one gradient step each) per target update.
      refreshes: ProDQN target refreshes ``φ̄ ← φ`` (the paper's #epochs E, Algorithm 1's outer loop).
      train_steps_per_refresh: ProDQN training steps between two refreshes (the paper's #training steps);
        each collects ``steps_per_update`` environment steps, samples one replay batch and takes one Adam
        step per W batch on it.
      w_size, w_batch_size: size of the set W and rows of W per ProDQN Adam step (default all: one Adam step
        per training step).
      pbo_hidden_multiples: the deep PBO's hidden widths as multiples of d.
      pbo_init_std: std of the deep PBO's truncated-normal initialisation.
      target_update_tau: Polyak factor of the target updates (1 = hard copy, the paper).
      cache_target_chain: ProDQN keeps the target chain of W between hard target updates
        (`ProDQNAgent`); False recomputes it at every step (same loss).
      n_eval_episodes: evaluation episodes (bicycle: rollouts) per k.
      eval_max_steps: evaluation episode cut (default: lunar lander 1000, bicycle 50 000).
      eval_seed: seed of the evaluation episodes (the same for every k and run).
      eval_max_envs: lunar lander: at most this many evaluation environments stepped together.
      eval_jit_compile: bicycle: compile the rollouts with XLA (faster for long rollouts; turning it off
        saves the compilation in tiny runs).
      checkpoint_interval, checkpoint_interval_s: a checkpoint every this many training steps or seconds,
        whichever comes first.
      log_interval, log_interval_s: a progress line (and its TensorBoard scalars) every this many
        training steps or seconds, whichever comes first.
      summary_interval: training steps between the agent's own TensorBoard summaries (without XLA only).
      max_train_steps_this_call: stop (checkpointed, `run` returns None) after this many training steps in
        this call; None = train to the end. For time-limited jobs and the resume test.
      fused_adam: Adam as TensorFlow's fused kernel (`make_adam`): the same update in one pass over each
        variable, for large operators trained outside XLA (Lunar Lander's PBO).
      jit_compile: compile ``agent.train`` with XLA (the shipped gin files do, except Lunar Lander's ProDQN,
        which runs in graph mode with the fused Adam). XLA cannot compile summary ops, so the agent's own
        summaries are then off; the progress lines still write the loss (and ProDQN's per-k terms) and ε.
      log: progress printer (None silences).
      overwrite: a run folder that holds another experiment (another config fingerprint) is moved aside
        and the run starts afresh; False refuses it (`pbo_tf.experiments.run_folder`).
    """

    def __init__(
        self,
        root_dir: str,
        env: str = gin.REQUIRED,
        algorithm: str = gin.REQUIRED,
        label: str | None = None,
        K: int = gin.REQUIRED,
        seed: int = 0,
        extra_iterations: int = 10,
        hidden: Sequence[int] | None = None,
        action_values=None,
        gamma: float | None = None,
        train_max_episode_steps: int | None = None,
        replay_capacity: int = 20_000,
        initial_collect_steps: int = 1000,
        batch_size: int = 500,
        steps_per_update: int = 2,
        epsilon_start: float = 1.0,
        epsilon_end: float = 0.01,
        epsilon_decay_env_steps: int | None = None,
        lr_start: float = 1e-3,
        lr_end: float = 1e-5,
        lr_schedule_counts_w_batches: bool = False,
        adam_epsilon: float = 1e-8,
        adam_epsilon_placement: str = "reference",
        fitting_steps: int = 6000,
        refreshes: int = 3000,
        train_steps_per_refresh: int = 25,
        w_size: int = 30,
        w_batch_size: int | None = None,
        pbo_hidden_multiples: Sequence[float] = (2, 2, 2, 2),
        pbo_init_std: float = 5e-7,
        target_update_tau: float = 1.0,
        cache_target_chain: bool = True,
        n_eval_episodes: int = 100,
        eval_max_steps: int | None = None,
        eval_seed: int = 0,
        eval_max_envs: int | None = None,
        eval_jit_compile: bool = True,
        checkpoint_interval: int = 1000,
        checkpoint_interval_s: float = 900.0,
        log_interval: int = 1000,
        log_interval_s: float = 60.0,
        summary_interval: int = 100,
        max_train_steps_this_call: int | None = None,
        jit_compile: bool = False,
        fused_adam: bool = False,
        log: Callable[[str], None] | None = print,
        overwrite: bool = False,
    ):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; known algorithms: {list(ALGORITHMS)}")
        if int(K) < 1:
            raise ValueError(f"K must be >= 1, got {K}")
        if int(extra_iterations) < 0:
            raise ValueError(f"extra_iterations must be >= 0, got {extra_iterations}")
        positive = dict(
            replay_capacity=replay_capacity,
            batch_size=batch_size,
            steps_per_update=steps_per_update,
            fitting_steps=fitting_steps,
            refreshes=refreshes,
            train_steps_per_refresh=train_steps_per_refresh,
            w_size=w_size,
            n_eval_episodes=n_eval_episodes,
            checkpoint_interval=checkpoint_interval,
            log_interval=log_interval,
            summary_interval=summary_interval,
        )
        for key, value in positive.items():
            if int(value) < 1:
                raise ValueError(f"{key} must be >= 1, got {value}")
        if w_batch_size is not None and not 1 <= int(w_batch_size) <= int(w_size):
            raise ValueError(f"w_batch_size must lie in [1, w_size={w_size}], got {w_batch_size}")
        if adam_epsilon_placement not in EPSILON_PLACEMENTS:
            raise ValueError(
                f"adam_epsilon_placement must be 'reference' or 'keras', got {adam_epsilon_placement!r}"
            )
        if int(initial_collect_steps) < 2:
            raise ValueError(
                f"initial_collect_steps must be >= 2 (one pair to sample), got {initial_collect_steps}"
            )
        self.root_dir = root_dir
        self.spec = online_env(env)
        self.env_name, self.algorithm, self.label = env, algorithm, label or algorithm
        self.K, self.seed, self.extra_iterations = int(K), int(seed), int(extra_iterations)
        self.hidden = [int(h) for h in (self.spec.hidden if hidden is None else hidden)]
        self.action_values = np.asarray(
            self.spec.action_values if action_values is None else action_values, np.float32
        )
        self.gamma = float(self.spec.gamma if gamma is None else gamma)
        self.train_max_episode_steps = int(train_max_episode_steps or self.spec.train_max_episode_steps)
        self.replay_capacity, self.initial_collect_steps = int(replay_capacity), int(initial_collect_steps)
        self.batch_size, self.steps_per_update = int(batch_size), int(steps_per_update)
        self.fitting_steps = int(fitting_steps)
        self.refreshes, self.train_steps_per_refresh = int(refreshes), int(train_steps_per_refresh)
        self.w_size = int(w_size)
        self.w_batch_size = None if w_batch_size is None else int(w_batch_size)
        if algorithm == "dqn":
            self.total_train_steps = self.K * self.fitting_steps
            self.adam_steps_per_train_step = 1
        else:
            self.total_train_steps = self.refreshes * self.train_steps_per_refresh
            self.adam_steps_per_train_step = -(-self.w_size // (self.w_batch_size or self.w_size))
        self.total_adam_steps = self.total_train_steps * self.adam_steps_per_train_step
        self.total_env_steps = self.total_train_steps * self.steps_per_update  # ε-greedy collection
        self.epsilon_start, self.epsilon_end = float(epsilon_start), float(epsilon_end)
        self.epsilon_decay_env_steps = int(epsilon_decay_env_steps or self.total_env_steps)
        # ε is a function of the training step, each of which collects steps_per_update env steps
        self.epsilon_decay_train_steps = max(1, -(-self.epsilon_decay_env_steps // self.steps_per_update))
        self.lr_start, self.lr_end = float(lr_start), float(lr_end)
        self.lr_schedule_counts_w_batches = bool(lr_schedule_counts_w_batches)
        self.lr_schedule_steps = (
            self.total_adam_steps if self.lr_schedule_counts_w_batches else self.total_train_steps
        )
        self.adam_epsilon, self.adam_epsilon_placement = float(adam_epsilon), adam_epsilon_placement
        self.pbo_hidden_multiples = [float(m) for m in pbo_hidden_multiples]
        self.pbo_init_std, self.target_update_tau = float(pbo_init_std), float(target_update_tau)
        self.cache_target_chain = bool(cache_target_chain)
        self.n_eval_episodes = int(n_eval_episodes)
        self.eval_max_steps = int(eval_max_steps or self.spec.eval_max_steps)
        self.eval_seed = int(eval_seed)
        self.eval_max_envs = eval_max_envs
        self.eval_jit_compile = bool(eval_jit_compile)
        self.checkpoint_interval, self.log_interval = int(checkpoint_interval), int(log_interval)
        self.summary_interval = int(summary_interval)
        self.checkpoint_interval_s, self.log_interval_s = float(checkpoint_interval_s), float(log_interval_s)
        self.max_train_steps_this_call = max_train_steps_this_call
        self.jit_compile = bool(jit_compile)
        self.fused_adam = bool(fused_adam)
        self.log = log or (lambda _: None)
        self.overwrite = bool(overwrite)
        self._folder_status = None  # set by `claim_folder`
        self.agent = None  # set by `build`
        self.last_saved_step = None  # the training step of the last checkpoint written or restored

    # ------------------------------------------------------------------------------------------ paths
    def path(self, *parts: str) -> str:
        return os.path.join(self.root_dir, *parts)

    @property
    def complete(self) -> bool:
        return os.path.exists(self.path("metrics.json"))

    def claim_folder(self) -> str:
        """Checks that the run folder holds this experiment, or creates it (`run_folder.claim`), once per
        object, before anything is written into it; returns ``"new"``, ``"resume"`` or ``"complete"``."""
        if self._folder_status is None:
            self._folder_status = run_folder.claim(self.root_dir, overwrite=self.overwrite, log=self.log)
        return self._folder_status

    @property
    def n_curve_points(self) -> int:
        return self.K + 1 + (self.extra_iterations if self.algorithm == "prodqn" else 0)

    # ------------------------------------------------------------------------------------------ build
    def q_family(self) -> FlatMLPQ:
        return FlatMLPQ(self.spec.state_dim, self.hidden, self.action_values)

    def build(self) -> None:
        """Creates the environment, agent, replay buffer, drivers and checkpointer (restoring the latest)."""
        self.claim_folder()
        tf_keras.utils.set_random_seed(self.seed)
        self.tf_env = tf_py_environment.TFPyEnvironment(
            to_tf_agents(
                self.spec.env_id, seed=self.seed, max_episode_steps=self.train_max_episode_steps, discount=1.0
            )
        )
        time_step_spec, action_spec = self.tf_env.time_step_spec(), self.tf_env.action_spec()
        self.q = q = self.q_family()
        self.train_step = common.create_variable("train_step", 0, dtype=tf.int64)
        self.lr_schedule = linear_schedule(self.lr_start, self.lr_end, self.lr_schedule_steps)
        self.optimizer = optimizer = make_adam(
            self.lr_schedule,
            epsilon=self.adam_epsilon,
            epsilon_placement=self.adam_epsilon_placement,
            fused=self.fused_adam,
        )
        if self.algorithm == "dqn":
            self.omega0 = q.initial_params(1, self.seed)[0]
            epsilon = linear_epsilon(
                self.train_step, self.epsilon_decay_train_steps, self.epsilon_start, self.epsilon_end
            )
            agent = make_dqn_agent(
                time_step_spec,
                action_spec,
                q,
                seed=self.seed,
                gamma=self.gamma,
                optimizer=optimizer,
                target_update_period=self.fitting_steps,
                epsilon=epsilon,
                train_step_counter=self.train_step,
                initial_params=self.omega0,
                target_update_tau=self.target_update_tau,
            )
            self.epsilon_fn = epsilon
            self.online_omega = agent._q_network.omega  # DqnAgent does not expose its Q network
        else:
            params = q.initial_params(self.w_size, self.seed)
            self.omega0 = params[0]
            pbo = DeepPBO(
                q.d, hidden_multiples=self.pbo_hidden_multiples, init_std=self.pbo_init_std, name="pbo"
            )
            agent = ProDQNAgent(
                time_step_spec,
                action_spec,
                q,
                pbo,
                params,
                self.K,
                self.gamma,
                optimizer,
                w_batch_size=self.w_batch_size,
                seed=self.seed,
                train_steps_per_refresh=self.train_steps_per_refresh,
                target_update_tau=self.target_update_tau,
                cache_target_chain=self.cache_target_chain,
                epsilon_start=self.epsilon_start,
                epsilon_end=self.epsilon_end,
                epsilon_decay_train_steps=self.epsilon_decay_train_steps,
                train_step_counter=self.train_step,
            )
            self.epsilon_fn = agent.epsilon
        self.agent = agent
        self.progress = _Progress(self.K + 1, q.d)
        if self.algorithm == "dqn":
            self.progress.iterates[0].assign(self.omega0)

        self.replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
            agent.collect_data_spec, batch_size=self.tf_env.batch_size, max_length=self.replay_capacity
        )
        self.env_steps = tf_metrics.EnvironmentSteps()
        self.train_metrics = [
            tf_metrics.NumberOfEpisodes(),
            self.env_steps,
            tf_metrics.AverageReturnMetric(buffer_size=10),
            tf_metrics.AverageEpisodeLengthMetric(buffer_size=10),
        ]
        self.initial_driver = dynamic_step_driver.DynamicStepDriver(
            self.tf_env,
            random_tf_policy.RandomTFPolicy(time_step_spec, action_spec),
            observers=[self.replay_buffer.add_batch, self.env_steps],
            num_steps=self.initial_collect_steps,
        )
        self.collect_driver = dynamic_step_driver.DynamicStepDriver(
            self.tf_env,
            agent.collect_policy,
            observers=[self.replay_buffer.add_batch] + self.train_metrics,
            num_steps=self.steps_per_update,
        )
        checkpoints = self.path("checkpoints")
        check_checkpoint_index(checkpoints)
        try:
            self.checkpointer = common.Checkpointer(
                ckpt_dir=checkpoints,
                max_to_keep=1,
                agent=agent,
                replay_buffer=self.replay_buffer,
                global_step=self.train_step,
                metrics=metric_utils.MetricsGroup(self.train_metrics, "train_metrics"),
                progress=self.progress,
            )
            if self.checkpointer.checkpoint_exists:
                # (a checkpoint from before a new variable, e.g. ProDQN's skipped_batches, still restores)
                self.checkpointer._load_status.assert_nontrivial_match()  # noqa: SLF001
        except Exception as e:  # TF raises OpError, ParseError, AssertionError, ... for bad files
            lines = str(e).strip().splitlines() or [type(e).__name__]
            raise ValueError(
                f"the checkpoint in {checkpoints!r} is corrupt or does not match this run (a damaged or "
                f"missing piece; delete the folder to start over): {lines[0][:300]}"
            ) from e
        if self.checkpointer.checkpoint_exists:
            self.last_saved_step = int(self.train_step.numpy())
        acting = self.online_omega if self.algorithm == "dqn" else None

        def finite(loss):
            params = acting if acting is not None else self.agent.q_network.omega_k()
            return tf.reduce_all(tf.math.is_finite(loss)), tf.reduce_all(tf.math.is_finite(params))

        self._finite = tf.function(finite)

    def _save(self) -> None:
        self.checkpointer.save(global_step=self.train_step)
        self.last_saved_step = int(self.train_step.numpy())

    def check_finite(self, loss_info, step: int) -> None:
        """Raises `DivergenceError` when training step ``step`` gave a NaN or Inf loss or greedy-policy
        parameters (see the module docstring)."""
        loss_ok, params_ok = (bool(x.numpy()) for x in self._finite(loss_info.loss))
        if loss_ok and params_ok:
            return
        if not loss_ok:
            where = f"the {self.label} loss"
            value = f"became {float(loss_info.loss.numpy())}"
        else:
            where = "the online Q parameters ω" if self.algorithm == "dqn" else "the policy's Λ_φ^K(ω_0)"
            value = "hold a NaN or an Inf"
        kept = (
            f"the last good checkpoint (training step {self.last_saved_step}) is kept"
            if self.last_saved_step is not None
            else "no checkpoint was written"
        )
        raise DivergenceError(
            f"training diverged: {where} {value} at training step {step} of {self.total_train_steps} "
            f"(seed {self.seed}); {kept} (try a smaller learning rate or PBO init std)",
            where=where,
            step=step,
        )

    # ------------------------------------------------------------------------------------------ train
    def train(self) -> bool:
        """Initial collect (if not done) and the collect/train loop; True when training is finished."""
        summary_writer = tf.summary.create_file_writer(self.path("tensorboard"))
        start = time.perf_counter()
        wall0 = float(self.progress.wall_time_s.numpy())

        def save():
            self.progress.wall_time_s.assign(wall0 + time.perf_counter() - start)
            self._save()

        time_step = self.tf_env.reset()
        policy_state = self.agent.collect_policy.get_initial_state(self.tf_env.batch_size)
        if not bool(self.progress.initial_collect_done.numpy()):
            t0 = time.perf_counter()
            time_step, _ = common.function(self.initial_driver.run)(time_step=time_step)
            self.progress.initial_collect_done.assign(True)
            self.log(
                f"initial collect: {self.initial_collect_steps} random steps "
                f"in {time.perf_counter() - t0:.1f}s"
            )
            save()

        step = int(self.train_step.numpy())
        if step >= self.total_train_steps:
            return True
        dataset = self.replay_buffer.as_dataset(
            sample_batch_size=self.batch_size, num_steps=2, num_parallel_calls=tf.data.AUTOTUNE
        ).prefetch(2)
        iterator = iter(dataset)
        collect = common.function(self.collect_driver.run)
        train = common.function(self.agent.train, jit_compile=self.jit_compile)
        # XLA cannot compile summary ops: a compiled train step is traced without the agent's summaries
        # (the progress lines write the loss, its terms and ε instead).
        summaries = (lambda: tf.summary.record_if(False)) if self.jit_compile else contextlib.nullcontext
        limit = self.total_train_steps
        if self.max_train_steps_this_call is not None:
            limit = min(limit, step + int(self.max_train_steps_this_call))
        self.log(
            f"{self.env_name} / {self.label}: K={self.K}, seed={self.seed}, d={self.q.d}, "
            f"train steps {step} -> {limit} of {self.total_train_steps} -> {self.root_dir}"
        )
        # Timings since the last checkpoint (``acc``) and the last log line (``window``). The first
        # iteration of a call traces the compiled functions and is not timed.
        acc, window = _timings(), _timings()
        loss = float("nan")
        with (
            summary_writer.as_default(),
            tf.summary.record_if(lambda: tf.equal(self.train_step % self.summary_interval, 0)),
        ):
            warm_up = True
            while step < limit:
                t0 = time.perf_counter()
                time_step, policy_state = collect(time_step=time_step, policy_state=policy_state)
                t1 = time.perf_counter()
                experience, _ = next(iterator)
                with summaries():
                    loss_info = train(experience)
                t2 = time.perf_counter()
                step += 1
                self.check_finite(loss_info, step)  # before any checkpoint of this step
                if not warm_up:
                    for timing in (acc, window):
                        timing["n"] += 1
                        timing["collect"] += t1 - t0
                        timing["train"] += t2 - t1
                warm_up = False
                if self.algorithm == "dqn" and step % self.fitting_steps == 0:
                    self.progress.iterates[step // self.fitting_steps].assign(self.online_omega)
                now = time.perf_counter()
                if (
                    step % self.log_interval == 0
                    or step == limit
                    or now - window["since"] >= self.log_interval_s
                ):
                    loss = self._log_progress(step, loss_info, window)
                    window = _timings()
                if (
                    step % self.checkpoint_interval == 0
                    or step == limit
                    or now - acc["since"] >= self.checkpoint_interval_s
                ):
                    self._add_timings(acc)
                    acc = _timings()
                    save()
            summary_writer.flush()
        if not np.isfinite(loss):
            self.log(f"warning: the last logged loss is {loss}")
        return step >= self.total_train_steps

    def _add_timings(self, timing: dict) -> None:
        p = self.progress
        p.collect_s.assign_add(timing["collect"])
        p.train_s.assign_add(timing["train"])
        p.loop_train_steps.assign_add(timing["n"])
        p.loop_env_steps.assign_add(timing["n"] * self.steps_per_update)

    def _log_progress(self, step: int, loss_info, window: dict) -> float:
        """Prints a progress line, writes its scalars to TensorBoard and returns the loss."""
        loss = float(loss_info.loss.numpy())
        n = window["n"]
        rates = {
            "env_steps_per_s": _rate(n * self.steps_per_update, window["collect"]),
            "grad_steps_per_s": _rate(n * self.adam_steps_per_train_step, window["train"]),
            "train_steps_per_s": _rate(n, window["train"]),
            "loop_steps_per_s": _rate(n, window["collect"] + window["train"]),
        }
        epsilon = float(self.epsilon_fn().numpy())
        avg_return = float(self.train_metrics[2].result().numpy())

        def fmt(value):
            return "n/a" if value is None else f"{value:.2f}"

        self.log(
            f"training step {step}/{self.total_train_steps}  "
            f"env steps {int(self.env_steps.result().numpy())}  "
            f"loss {loss:.4g}  eps {epsilon:.3f}  train return (last 10 episodes) {avg_return:.3g}  "
            f"{fmt(rates['env_steps_per_s'])} env steps/s  {fmt(rates['grad_steps_per_s'])} Adam steps/s  "
            f"{fmt(rates['loop_steps_per_s'])} training steps/s (loop)"
        )
        with tf.summary.record_if(True):
            tf.summary.scalar("train/loss", loss, step=step)
            tf.summary.scalar("train/epsilon", epsilon, step=step)
            for key, value in rates.items():
                if value is not None:
                    tf.summary.scalar(f"train/{key}", value, step=step)
            for metric in self.train_metrics:
                tf.summary.scalar(f"train/{metric.name}", metric.result(), step=step)
            if isinstance(loss_info.extra, ProDQNLossInfo):
                for k, term in enumerate(loss_info.extra.per_k.numpy(), start=1):
                    tf.summary.scalar(f"train/loss_term_k{k}", term, step=step)
        return loss

    # ------------------------------------------------------------------------------------------ curve
    def iterates(self) -> np.ndarray:
        """``ω_k`` of the curve, ``[n_curve_points, d]``."""
        if self.algorithm == "dqn":
            return self.progress.iterates.numpy()
        omega0 = tf.constant(np.asarray(self.omega0, np.float32)[None])
        return self.agent.pbo.iterate(omega0, self.K + self.extra_iterations)[:, 0].numpy()

    def evaluate(self, params: np.ndarray) -> list[dict]:
        """The evaluation metrics of every greedy policy ``Q_{params[i]}`` (one batched evaluation)."""
        common_args = dict(
            n_episodes=self.n_eval_episodes,
            max_steps=self.eval_max_steps,
            gamma=self.gamma,
            seed=self.eval_seed,
        )
        if self.env_name == "lunar_lander":
            return evaluate_lunar_lander(
                self.q, params, max_envs=self.eval_max_envs, env_id=self.spec.env_id, **common_args
            )
        return evaluate_bicycle(self.q, params, jit_compile=self.eval_jit_compile, **common_args)

    def reference(self) -> dict:
        if self.env_name == "bicycle":
            from pbo_tf.envs import bicycle as bk

            return {"max_balancing_time_s": self.eval_max_steps * bk.DT}
        return {}

    def export_policy(self) -> None:
        """Saves the greedy policy at k = K (`PolicySaver`) into ``D/policy``."""
        if self.algorithm == "prodqn":
            self.agent.q_network.set_apply_k(self.K)
        saver = policy_saver.PolicySaver(self.agent.policy, batch_size=None, train_step=self.train_step)
        saver.save(self.path("policy"))

    # ------------------------------------------------------------------------------------------ run
    def run(self) -> dict | None:
        """Trains (resuming if interrupted), evaluates the curve and writes the run folder.

        Returns:
          The metrics dict; a folder that already holds ``metrics.json`` is returned as it is. None when
          ``max_train_steps_this_call`` stopped training early (the checkpoint is saved: call again).
        """
        status = self.claim_folder()
        if status == "complete":
            self.log(f"{self.root_dir}: complete (metrics.json exists), skipping")
            return results.load_metrics(self.root_dir)
        write_text_atomic(self.path("config.gin"), gin.config_str())
        self.build()
        try:
            finished = self.train()
        except DivergenceError as e:
            path = run_folder.write_failure(
                self.root_dir, e, where=e.where, train_step=e.step, last_checkpoint_step=self.last_saved_step
            )
            self.log(f"{e} (recorded in {path})")
            raise
        if not finished:
            self.log(f"stopped at train step {int(self.train_step.numpy())} of {self.total_train_steps}")
            return None
        return self.finish()

    def finish(self) -> dict:
        """After training: evaluates the curve, writes the iterates, the policy and (last) metrics.json."""
        t0 = time.perf_counter()
        params = self.iterates()
        curve = [{"k": k, **values} for k, values in enumerate(self.evaluate(params))]
        eval_time = time.perf_counter() - t0
        with atomic_open(self.path("iterates.npz"), "wb") as f:
            np.savez(f, iterates=params)
        writer = tf.summary.create_file_writer(self.path("tensorboard"))
        with writer.as_default(), tf.summary.record_if(True):
            for entry in curve:
                for key, value in entry.items():
                    if key != "k":
                        tf.summary.scalar(f"curve/{key}", value, step=entry["k"])
        writer.flush()
        self.export_policy()

        p = self.progress
        collect_s, train_s = float(p.collect_s.numpy()), float(p.train_s.numpy())
        train_steps = int(p.loop_train_steps.numpy())
        metrics = {
            "env": self.env_name,
            "algorithm": self.label,
            "K": self.K,
            "seed": self.seed,
            "curve": curve,
            "reference": self.reference(),
            "wall_time_s": float(p.wall_time_s.numpy()),
            "eval_time_s": eval_time,
            "env_steps_per_s": _rate(int(p.loop_env_steps.numpy()), collect_s),
            "grad_steps_per_s": _rate(train_steps * self.adam_steps_per_train_step, train_s),
            "train_steps_per_s": _rate(train_steps, train_s),
            "loop_steps_per_s": _rate(train_steps, collect_s + train_s),
            "env_steps": int(self.env_steps.result().numpy()),
            "train_steps": int(self.train_step.numpy()),
            "adam_steps": int(self.optimizer.iterations.numpy()),
            "skipped_replay_batches": (
                int(self.agent.skipped_batches.numpy()) if self.algorithm == "prodqn" else 0
            ),
        }
        write_text_atomic(self.path("config.gin"), gin.operative_config_str())
        results.write_json_atomic(self.path("metrics.json"), metrics)
        run_folder.clear_failure(self.root_dir)
        main = self.spec.main_metric
        at_k = {c["k"]: c.get(main) for c in curve}
        self.log(
            f"done: {main} at k=0: {at_k.get(0)}, k=K: {at_k.get(self.K)}, "
            f"last k={len(curve) - 1}: {at_k.get(len(curve) - 1)} (eval {eval_time:.1f}s)"
        )
        return metrics
