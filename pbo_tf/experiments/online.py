"""Online experiments: DQN and ProDQN on TF-Agents (paper Sec. 6.2, lunar lander and online bicycle).

`OnlineExperiment` is the online sibling of `pbo_tf.experiments.runner.Experiment`, a loop in the shape of
TF-Agents' ``train_eval`` examples assembled from gin-configured pieces: the environment (an
`pbo_tf.envs.base.OnlineEnv` named in `pbo_tf.envs.registry`: Q family, episode cut, evaluation), the
agent's builder (`pbo_tf.agents.builders`: ``@DQN`` or ``@ProDQN``, Adam, ε), and the collection
(`pbo_tf.experiments.online_collect.Collector`: replay buffer, drivers, replay batches). The unit of the
loop is the training step: one collect of ``Collector.steps_per_update`` environment steps, one replay
batch and one ``agent.train`` on it, with ``common.function`` around ``driver.run`` and ``agent.train``;
``refreshes · train_steps_per_refresh`` of them in all. Checkpoints, progress lines and
``max_train_steps_this_call`` count training steps. After training, the curve's ``ω_k`` (the builder's
``iterates``) are evaluated in one batched evaluation (the greedy evaluation does not influence training,
so this is the same curve as evaluating along the way, only vectorised over k).

Run folder contract (``D`` = ``root_dir``; `pbo_tf.experiments.run_folder.RunFolder`):

* ``D/fingerprint.json``: the fingerprint of the config; a relaunch with another config is refused;
* ``D/config.gin``: the gin config (written at the start, the operative config at the end);
* ``D/checkpoints/``: checkpoints of the agent (networks, optimizer, target, train step), the replay buffer,
  the training metrics, the run's progress (initial collect done, time spent) and the builder's own state
  (DQN's ``ω_k`` snapshots), as `tf_agents.utils.common.Checkpointer` writes them, saved every
  ``checkpoint_interval`` training steps (or ``checkpoint_interval_s`` seconds), after the initial collect
  and at the end of training, so a killed run resumes from there. The last two are kept: a newest one that
  does not read back is reported in one line and the run resumes from the one before
  (`pbo_tf.utils.restore_newest_readable`), losing only the training steps since it (``progress.csv`` drops
  its rows past the step restored, as on every resume). A resumed run starts a new episode (the environment
  and the policies' random streams are not checkpointed): it is a continuation, not a bit-exact replay, and
  the replay pair that joins the last stored step before the restart to the first one after it is one
  spurious transition per restart;
* ``D/tensorboard/``: the agent's training summaries (loss, ε, ...) every ``summary_interval`` steps, the
  training metrics, throughput and loss terms' metrics (``loss_terms/<metric>``) at every log line, and the
  evaluation metrics per k (``curve/<metric>``);
* ``D/iterates.npz``: the parameter vectors ``ω_k`` of the curve (``iterates [n_k, d]``);
* ``D/policy/``: the greedy policy at k = K exported with `tf_agents.policies.policy_saver.PolicySaver`
  (a SavedModel: ``tf.saved_model.load(D/policy).action(time_step)`` needs TensorFlow and TF-Agents, not
  pbo_tf);
* ``D/metrics.json``: written last and atomically: ``env``, ``gym_id`` (the gymnasium id trained and
  evaluated on), ``setting`` (``"online"``), ``algorithm`` (the label), ``K``, ``seed``, ``main_metric``
  (the environment's, which `pbo_tf.analysis` plots by default),
  ``curve`` (``[{"k": k, metric: value, ...}]``), ``reference`` (``{}`` for lunar lander), ``wall_time_s``
  (training, summed over resumed calls), ``eval_time_s``, ``env_steps_per_s`` (collect driver steps per
  second of driver time), ``grad_steps_per_s`` (Adam steps per second of train time),
  ``train_steps_per_s`` (training steps per second of train time), ``loop_steps_per_s`` (training steps per
  second of the whole collect + train loop), ``env_steps``, ``train_steps`` (training steps),
  ``adam_steps``, ``skipped_replay_batches`` (ProDQN: replay batches without a transition, which took no
  Adam step; 0 for DQN), ``budget`` (``{train_steps_done, train_steps_scheduled, train_steps_paper,
  fraction}``: training steps against the paper's schedule, the environment's ``paper_budget``;
  ``fraction`` = scheduled / paper) and, for ProDQN, ``operator_activity`` (whether the trained
  operator is still a function of ω, as `pbo_tf.experiments.runner` records it offline) and
  ``loss_terms`` (the loss terms' metrics at the last progress line, `pbo_tf.loss_terms`). A run folder is
  complete only when it exists; `OnlineExperiment.run` then returns it without re-running;
* ``D/failure.json``: written instead of ``metrics.json`` when training diverged. After every training
  step the loss and the parameters the greedy policy acts with (DQN: the online ω; ProDQN:
  ``Λ_φ^K(ω_0)``) are checked; a NaN or an Inf stops the run before the next checkpoint is written, so
  the checkpoints keep the last good state, and `run` raises `DivergenceError` naming what diverged and
  at which training step.

With ``num_seeds = S > 1`` (``NUM_SEEDS``) the seeds ``seed .. seed + S − 1`` train in this one process, each
with its own environment, replay buffer, ε-greedy collection and weights, their training steps in one
compiled step (`pbo_tf.experiments.online_seeds`): each seed's checkpoints, summaries, ``progress.csv``,
iterates and policy go to ``D/seed_<s>/``, and ``D/metrics.json`` holds every seed's metrics under
``per_seed`` with their mean curve, as a batched offline run's.

The lifecycle (claim, config, train, failure record, curve, iterates, activity, budget, ``metrics.json``)
is `pbo_tf.experiments.lifecycle.RunLifecycle`, shared with the offline runner.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable

import gin
import numpy as np
import tensorflow as tf
import tf_keras

try:
    from tf_agents.eval import metric_utils
    from tf_agents.metrics import tf_metrics
    from tf_agents.utils import common
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.agents.builders import EpsilonSchedule, OnlineAgentBuilder
from pbo_tf.envs import registry
from pbo_tf.experiments.export import save_policy
from pbo_tf.experiments.lifecycle import RunLifecycle, check_seeds
from pbo_tf.experiments.online_collect import Collector
from pbo_tf.loss_terms import progress_text, summary_scalars
from pbo_tf.progress_log import ProgressCSV, eta_text, metrics_text, numeric_metrics
from pbo_tf.utils import DivergenceError, check_checkpoint_index, restore_newest_readable

# Every registered online spec's gin configurables (``LunarLanderEnv.hidden``, ...) exist once this runner is
# imported: the gin files, and the config.gin of every run folder, import only the runners.
registry.import_modules("online")


def _timings() -> dict:
    return {"n": 0, "collect": 0.0, "train": 0.0, "since": time.perf_counter()}


def _rate(count: int, seconds: float) -> float | None:
    return count / seconds if count > 0 and seconds > 0 else None


class _Progress(tf.Module):
    """The run's bookkeeping that must survive a restart (checkpointed with the agent)."""

    def __init__(self):
        super().__init__(name="progress")
        self.initial_collect_done = tf.Variable(False, name="initial_collect_done")
        self.wall_time_s = tf.Variable(0.0, dtype=tf.float64, name="wall_time_s")
        self.collect_s = tf.Variable(0.0, dtype=tf.float64, name="collect_s")
        self.train_s = tf.Variable(0.0, dtype=tf.float64, name="train_s")
        self.loop_env_steps = tf.Variable(0, dtype=tf.int64, name="loop_env_steps")
        self.loop_train_steps = tf.Variable(0, dtype=tf.int64, name="loop_train_steps")


@gin.configurable(denylist=["root_dir", "log", "overwrite"])
class OnlineExperiment(RunLifecycle):
    """One online (environment, algorithm, K, seed) run on TF-Agents, configured by gin.

    Args:
      root_dir: the run folder (see the module docstring for its contract).
      env: ``lunar_lander``, ``bicycle`` or ``gym`` (any gymnasium id, `pbo_tf.envs.gym.online`): an online
        entry of `pbo_tf.envs.registry`.
      agent: the algorithm's builder, ``@DQN``, ``@IDQN`` or ``@ProDQN`` (`pbo_tf.agents.builders`); K, the
        refresh schedule and ``jit_compile`` are its config's (``DQNConfig.*``, ``IDQNConfig.*``,
        ``ProDQNConfig.*``, `pbo_tf.configs`). XLA (``jit_compile``) cannot compile summary ops, so the
        agent's own summaries are then off; the progress lines still write the loss (and ProDQN's per-k
        terms) and ε.
      seed: run seed (W, initialisation, environment, replay sampling).
      num_seeds: train the seeds ``seed .. seed + num_seeds − 1`` together in one process, their training
        steps in one compiled step (`pbo_tf.experiments.online_seeds`: each seed's files in
        ``D/seed_<s>/``, ``D/metrics.json`` holds every seed's entries under ``per_seed``).
      n_eval_episodes: evaluation episodes (bicycle: rollouts) per k.
      label: name written as ``metrics.json["algorithm"]``; default the builder's name.
      checkpoint_interval, checkpoint_interval_s: a checkpoint every this many training steps or seconds,
        whichever comes first.
      log_interval, log_interval_s: a progress line (and its TensorBoard scalars) every this many
        training steps or seconds, whichever comes first.
      summary_interval: training steps between the agent's own TensorBoard summaries (without XLA only).
      eval_interval: evaluate the greedy policy at K as training stands (DQN: the online network; ProDQN:
        ``Λ_φ^K(ω_0)``; i-DQN: the last head) every this many training steps and after the last, on
        ``eval_episodes`` of the environment's own evaluation episodes: ``D/progress.csv``, TensorBoard
        ``eval/<metric>`` (against training steps) and ``eval_by_env_steps/<metric>``, and a progress line
        (`pbo_tf.progress_log`). None or 0: no evaluation during training. The evaluation uses its own
        environments and seeds, so training is the same with it or without it.
      eval_episodes: evaluation episodes (bicycle: rollouts) of each evaluation during training (default
        ``min(10, n_eval_episodes)``).
      max_train_steps_this_call: stop (checkpointed, `run` returns None) after this many training steps in
        this call; None = train to the end. For time-limited jobs and the resume test.
      log: progress printer (None silences).
      overwrite: a run folder that holds another experiment (another config fingerprint) is moved aside
        and the run starts afresh; False refuses it (`pbo_tf.experiments.run_folder`).
    """

    def __init__(
        self,
        root_dir: str,
        env: str = gin.REQUIRED,
        agent: Callable[[], OnlineAgentBuilder] = gin.REQUIRED,
        seed: int = 0,
        num_seeds: int = 1,
        n_eval_episodes: int = 100,
        label: str | None = None,
        checkpoint_interval: int = 1000,
        checkpoint_interval_s: float = 900.0,
        log_interval: int = 1000,
        log_interval_s: float = 60.0,
        summary_interval: int = 100,
        eval_interval: int | None = None,
        eval_episodes: int | None = None,
        max_train_steps_this_call: int | None = None,
        log: Callable[[str], None] | None = print,
        overwrite: bool = False,
    ):
        self.init_args = {key: value for key, value in locals().items() if key != "self"}  # (seed members)
        try:
            whole = not isinstance(num_seeds, bool) and int(num_seeds) == num_seeds >= 1
        except (TypeError, ValueError):
            whole = False
        if not whole:
            raise ValueError(f"num_seeds (NUM_SEEDS) must be an integer >= 1, got {num_seeds!r}")
        positive = dict(
            n_eval_episodes=n_eval_episodes,
            checkpoint_interval=checkpoint_interval,
            log_interval=log_interval,
            summary_interval=summary_interval,
            eval_episodes=10 if eval_episodes is None else eval_episodes,
        )
        for key, value in positive.items():
            if int(value) < 1:
                raise ValueError(f"{key} must be >= 1, got {value}")
        self.root_dir = root_dir
        self.env = registry.make_online_env(env)
        self.algorithm = agent() if isinstance(agent, type) else agent
        if not isinstance(self.algorithm, OnlineAgentBuilder):
            raise ValueError(
                f"agent must be an online algorithm's builder (@DQN, @IDQN or @ProDQN), got {agent!r}"
            )
        self.label = label or self.algorithm.name
        self.schedule = self.algorithm.schedule  # K and the refresh schedule: the algorithm's config
        self.num_seeds = int(num_seeds)
        self.seed = check_seeds(seed, self.num_seeds, "OnlineExperiment")
        self.seeds = [self.seed + i for i in range(self.num_seeds)]
        self.collector = Collector()
        self.epsilon = EpsilonSchedule()
        self.adam_steps_per_train_step = self.algorithm.adam_steps_per_train_step
        self.total_adam_steps = self.total_train_steps * self.adam_steps_per_train_step
        self.steps_per_update = self.collector.steps_per_update
        self.total_env_steps = self.total_train_steps * self.steps_per_update  # ε-greedy collection
        self.epsilon_decay_env_steps = self.epsilon.decay_env_steps or self.total_env_steps
        self.epsilon_decay_train_steps = self.epsilon.decay_train_steps(
            self.total_env_steps, self.steps_per_update
        )
        self.n_eval_episodes = int(n_eval_episodes)
        self.checkpoint_interval, self.log_interval = int(checkpoint_interval), int(log_interval)
        self.summary_interval = int(summary_interval)
        if eval_interval is not None and (isinstance(eval_interval, bool) or int(eval_interval) < 0):
            raise ValueError(f"eval_interval must be None or an integer >= 0, got {eval_interval!r}")
        self.eval_interval = int(eval_interval or 0)
        self.eval_episodes = min(10, self.n_eval_episodes) if eval_episodes is None else int(eval_episodes)
        self.checkpoint_interval_s, self.log_interval_s = float(checkpoint_interval_s), float(log_interval_s)
        self.max_train_steps_this_call = max_train_steps_this_call
        self.jit_compile = self.algorithm.jit_compile
        self.log = log or (lambda _: None)
        self.overwrite = bool(overwrite)
        self.agent = None  # set by `build`
        self.last_saved_step = None  # the training step of the last checkpoint written or restored

    # the schedule's numbers, read from the run's `Schedule` (K: `RunLifecycle.K`)
    @property
    def refreshes(self) -> int:
        return self.schedule.refreshes

    @property
    def train_steps_per_refresh(self) -> int:
        return self.schedule.steps_per_refresh

    @property
    def total_train_steps(self) -> int:
        return self.schedule.total_steps

    @property
    def n_curve_points(self) -> int:
        return self.schedule.n_curve_points

    @functools.cached_property
    def seed_batch(self):
        """The seeds of a run with ``num_seeds > 1`` (`pbo_tf.experiments.online_seeds.SeedBatch`)."""
        from pbo_tf.experiments.online_seeds import SeedBatch

        return SeedBatch(self)

    # ------------------------------------------------------------------------------------------ build
    def q_family(self):
        return self.env.q_family()

    def build(self) -> None:
        """Creates the environment, agent, replay buffer, drivers and checkpointer (restoring the latest); of
        every seed with ``num_seeds > 1`` (`seed_batch`)."""
        if self.num_seeds > 1:
            return self.seed_batch.build()
        self.claim_folder()
        tf_keras.utils.set_random_seed(self.seed)
        self.tf_env = self.env.tf_env(self.seed)
        self.q = q = self.q_family()
        self.train_step = common.create_variable("train_step", 0, dtype=tf.int64)
        self.epsilon_fn = self.epsilon(self.train_step, self.epsilon_decay_train_steps)
        self.agent = agent = self.algorithm.build(
            self.tf_env.time_step_spec(),
            self.tf_env.action_spec(),
            q,
            gamma=self.env.gamma,
            seed=self.seed,
            epsilon=self.epsilon_fn,
            train_step=self.train_step,
        )
        self.progress = _Progress()
        self.loss_metrics: dict[str, float] = {}  # the loss terms' metrics at the last progress line
        self.env_steps = tf_metrics.EnvironmentSteps()
        self.train_metrics = [
            tf_metrics.NumberOfEpisodes(),
            self.env_steps,
            tf_metrics.AverageReturnMetric(buffer_size=10),
            tf_metrics.AverageEpisodeLengthMetric(buffer_size=10),
        ]
        self.collector.build(
            self.tf_env, agent.collect_policy, agent.collect_data_spec, self.env_steps, self.train_metrics
        )
        self.replay_buffer = self.collector.replay_buffer
        # Everything a resumed run continues from is in one checkpoint, under the names that
        # `tf_agents.utils.common.Checkpointer` gives: counters, replay buffer, ε's step, progress, the
        # builder's state.
        checkpoints = self.path("checkpoints")
        check_checkpoint_index(checkpoints)
        os.makedirs(checkpoints, exist_ok=True)
        checkpoint = tf.train.Checkpoint(
            agent=agent,
            replay_buffer=self.replay_buffer,
            global_step=self.train_step,
            metrics=metric_utils.MetricsGroup(self.train_metrics, "train_metrics"),
            progress=self.progress,
            **self.algorithm.checkpointed(),
        )
        self.checkpoints = tf.train.CheckpointManager(checkpoint, checkpoints, max_to_keep=2)
        # (a checkpoint from before a new variable, e.g. ProDQN's skipped_batches, still restores)
        restored = restore_newest_readable(
            checkpoint, self.checkpoints, self.log, check=lambda status: status.assert_nontrivial_match()
        )
        if restored:
            self.last_saved_step = int(self.train_step.numpy())
            self.log(f"restored checkpoint {restored} (training step {self.last_saved_step})")

        def finite(loss):
            params = self.algorithm.acting_params()
            return tf.reduce_all(tf.math.is_finite(loss)), tf.reduce_all(tf.math.is_finite(params))

        self._finite = tf.function(finite, autograph=False)

    def _save(self) -> None:
        self.checkpoints.save(checkpoint_number=self.train_step)
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
            where = self.algorithm.acting_params_name
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
        """Builds (restoring the latest checkpoint), then the initial collect (if not done) and the
        collect/train loop; True when training is finished. (An experiment already built, e.g. to inspect
        what it restored, trains on as it is.)"""
        if self.num_seeds > 1:
            return self.seed_batch.train()
        if self.agent is None:
            self.build()
        finished = self._train_loop()
        if not finished:
            self.log(f"stopped at train step {int(self.train_step.numpy())} of {self.total_train_steps}")
        return finished

    def _train_loop(self) -> bool:
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
            time_step, _ = common.function(self.collector.initial_driver.run)(time_step=time_step)
            self.progress.initial_collect_done.assign(True)
            self.log(
                f"initial collect: {self.collector.initial_collect_steps} random steps "
                f"in {time.perf_counter() - t0:.1f}s"
            )
            save()

        step = int(self.train_step.numpy())
        if step >= self.total_train_steps:
            return True
        progress_csv = ProgressCSV(self.root_dir, "train_step") if self.eval_interval else None
        if progress_csv is not None:
            progress_csv.rewind(step + 1)  # the steps after the restored checkpoint run again
        iterator = self.collector.replay_batches()
        collect = common.function(self.collector.collect_driver.run)
        train = common.function(self.agent.train, jit_compile=self.jit_compile)
        # XLA cannot compile summary ops: a compiled train step is traced without the agent's summaries
        # (the progress lines write the loss, its terms and ε instead).
        summaries = (lambda: tf.summary.record_if(False)) if self.jit_compile else contextlib.nullcontext
        limit = self.total_train_steps
        if self.max_train_steps_this_call is not None:
            limit = min(limit, step + int(self.max_train_steps_this_call))
        self.log(
            f"{self.env.name} / {self.label}: K={self.K}, seed={self.seed}, d={self.q.d}, "
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
                self.algorithm.after_train_step(step)
                now = time.perf_counter()
                if (
                    step % self.log_interval == 0
                    or step == limit
                    or now - window["since"] >= self.log_interval_s
                ):
                    loss = self._log_progress(step, loss_info, window)
                    window = _timings()
                if progress_csv is not None and (
                    step % self.eval_interval == 0 or step == self.total_train_steps
                ):
                    t3 = time.perf_counter()
                    self._evaluate_progress(step, progress_csv, wall0 + t3 - start)
                    for timing in (acc, window):  # the periods count training time only
                        timing["since"] += time.perf_counter() - t3
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

    def _log_progress(
        self, step: int, loss_info, window: dict, eta_steps_per_s: float | None = None
    ) -> float:
        """Prints a progress line, writes its scalars to TensorBoard and returns the loss. ProDQN's line and
        scalars include its operator's activity on W and on fresh vectors and its learning rate
        (`pbo_tf.agents.builders.OnlineAgentBuilder.monitor`), so a collapse shows when it
        happens. The ETA is at ``eta_steps_per_s`` training steps per second where given (seeds in one
        process: the batch's rate), else at this run's loop rate."""
        loss = float(loss_info.loss.numpy())
        n = window["n"]
        rates = {
            "env_steps_per_s": _rate(n * self.steps_per_update, window["collect"]),
            "grad_steps_per_s": _rate(n * self.adam_steps_per_train_step, window["train"]),
            "train_steps_per_s": _rate(n, window["train"]),
            "loop_steps_per_s": _rate(n, window["collect"] + window["train"]),
        }
        epsilon = float(self.epsilon_fn().numpy())
        monitored = self.algorithm.monitor()  # the operator's activity and learning rate (ProDQN)
        metrics = getattr(loss_info.extra, "metrics", None)  # the loss terms' (ProDQN)
        if metrics:
            self.loss_metrics = {key: float(value) for key, value in metrics.items()}
        terms = progress_text(self.algorithm.loss_terms(), self.loss_metrics)
        avg_return = float(self.train_metrics[2].result().numpy())
        eta = eta_text(self.total_train_steps - step, eta_steps_per_s or rates["loop_steps_per_s"])

        def fmt(value):
            return "n/a" if value is None else f"{value:.2f}"

        self.log(
            f"training step {step}/{self.total_train_steps}  "
            f"env steps {int(self.env_steps.result().numpy())}  "
            f"loss {loss:.4g}  eps {epsilon:.3f}  train return (last 10 episodes) {avg_return:.3g}  "
            f"{fmt(rates['env_steps_per_s'])} env steps/s  {fmt(rates['grad_steps_per_s'])} Adam steps/s  "
            f"{fmt(rates['loop_steps_per_s'])} training steps/s (loop)"
            + (f"  {eta}" if eta else "")
            + (f"; {terms}" if terms else "")
            + (f"; {monitored[1]}" if monitored else "")
        )
        with tf.summary.record_if(True):
            for key, value in (monitored[0] if monitored else {}).items():
                tf.summary.scalar(key, value, step=step)
            tf.summary.scalar("train/loss", loss, step=step)
            tf.summary.scalar("train/epsilon", epsilon, step=step)
            for key, value in rates.items():
                if value is not None:
                    tf.summary.scalar(f"train/{key}", value, step=step)
            for metric in self.train_metrics:
                tf.summary.scalar(f"train/{metric.name}", metric.result(), step=step)
            for key, value in summary_scalars(self.loss_metrics).items():
                tf.summary.scalar(key, value, step=step)
        return loss

    def _evaluate_progress(self, step: int, progress_csv: ProgressCSV, wall_time_s: float) -> None:
        """The evaluation during training at training step ``step`` (see ``eval_interval``)."""
        t0 = time.perf_counter()
        params = np.asarray(self.algorithm.greedy_params(), np.float32).reshape(1, -1)
        values = self.env.evaluate(self.q, params, self.eval_episodes)[0]
        metrics = numeric_metrics(values)
        env_steps = int(self.env_steps.result().numpy())
        progress_csv.append(
            {"train_step": step, "env_steps": env_steps, "wall_time_s": wall_time_s, **metrics}
        )
        with tf.summary.record_if(True):
            for key, value in metrics.items():
                tf.summary.scalar(f"eval/{key}", value, step=step)
                tf.summary.scalar(f"eval_by_env_steps/{key}", value, step=env_steps)
        self.log(
            f"eval at K, training step {step}/{self.total_train_steps} ({self.eval_episodes} episodes, "
            f"{time.perf_counter() - t0:.1f}s): {metrics_text(metrics)}"
        )

    # ------------------------------------------------------------------------------------------ curve
    def iterates(self) -> np.ndarray:
        """``ω_k`` of the curve, ``[n_curve_points, d]``."""
        return self.algorithm.iterates()

    def evaluate(self, params: np.ndarray) -> list[dict]:
        """The evaluation metrics of every greedy policy ``Q_{params[i]}`` (one batched evaluation)."""
        return self.env.evaluate(self.q, params, self.n_eval_episodes)

    def export_policy(self) -> None:
        """Saves the greedy policy at k = K into ``D/policy`` (`pbo_tf.experiments.export.save_policy`)."""
        self.algorithm.prepare_export()
        save_policy(self.agent.policy, self.path("policy"), train_step=self.train_step)

    # ------------------------------------------------------------------------------------------ run
    def run_identity(self) -> dict:
        return {
            "env": self.env.name,
            "setting": "online",
            "algorithm": self.label,
            "K": self.K,
            "seeds": self.seeds,
        }

    def failure_details(self, error) -> dict:
        if self.num_seeds > 1:
            return self.seed_batch.failure_details(error)
        return {"where": error.where, "train_step": error.step, "last_checkpoint_step": self.last_saved_step}

    def results(self) -> dict:
        """After training: evaluates the curve, writes the iterates and the policy; returns the metrics."""
        if self.num_seeds > 1:
            return self.seed_batch.results()
        t0 = time.perf_counter()
        params = self.iterates()
        curve = [{"k": k, **values} for k, values in enumerate(self.evaluate(params))]
        self.eval_time = eval_time = time.perf_counter() - t0
        self.write_iterates(self.root_dir, params)
        self.write_curve_summaries(self.root_dir, curve)
        self.export_policy()

        p = self.progress
        collect_s, train_s = float(p.collect_s.numpy()), float(p.train_s.numpy())
        train_steps = int(p.loop_train_steps.numpy())
        metrics = {
            "env": self.env.name,
            "gym_id": self.env.env_id,
            "setting": "online",
            "algorithm": self.label,
            "K": self.K,
            "seed": self.seed,
            "main_metric": self.env.main_metric,
            "curve": curve,
            "reference": self.env.reference(),
            "wall_time_s": float(p.wall_time_s.numpy()),
            "eval_time_s": eval_time,
            "env_steps_per_s": _rate(int(p.loop_env_steps.numpy()), collect_s),
            "grad_steps_per_s": _rate(train_steps * self.adam_steps_per_train_step, train_s),
            "train_steps_per_s": _rate(train_steps, train_s),
            "loop_steps_per_s": _rate(train_steps, collect_s + train_s),
            "env_steps": int(self.env_steps.result().numpy()),
            "train_steps": int(self.train_step.numpy()),
            "adam_steps": int(self.algorithm.optimizer.iterations.numpy()),
            "skipped_replay_batches": self.algorithm.skipped_batches(),
        }
        if self.loss_metrics:
            metrics["loss_terms"] = self.loss_metrics
        budget = self.algorithm.budget(self.agent, self.env.paper_budget)
        if budget is not None:
            metrics["budget"] = budget
        activity = self.algorithm.operator_activity(self.algorithm.pbo, self.q, self.seed, params)
        if activity is not None:
            metrics["operator_activity"] = self.note_activity(activity)
        return metrics

    def done_line(self, metrics: dict) -> str:
        if self.num_seeds > 1:
            return self.seed_batch.done_line(metrics)
        main, curve = self.env.main_metric, metrics["curve"]
        at_k = self.curve_at(curve, main)
        return (
            f"done: {main} at k=0: {at_k.get(0)}, k=K: {at_k.get(self.K)}, "
            f"last k={len(curve) - 1}: {at_k.get(len(curve) - 1)} (eval {self.eval_time:.1f}s)"
        )
