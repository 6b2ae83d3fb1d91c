"""Several seeds of one online run in one process: ``OnlineExperiment.num_seeds = S > 1`` (``NUM_SEEDS``).

Each seed ``s = seed .. seed + S − 1`` is a `SeedMember`: an `OnlineExperiment` of its own, built exactly as
the single-seed run of ``s`` builds itself (environment, agent, W and ω₀, ε, replay buffer, drivers,
checkpointer), with its files in ``D/seed_<s>/``. `SeedBatch` steps the seeds together, one training step
at a time: each seed's collect (its own driver and environment), each seed's replay batch, then ONE
compiled function that runs every seed's ``agent.train`` (one graph, in which TensorFlow runs the
independent steps side by side; one XLA program where the config compiles the train step), then each
seed's checks, progress line, evaluation and checkpoint, at the training steps of its single-seed run.

Run folder (``D`` = ``root_dir``): ``D/fingerprint.json``, ``D/config.gin``, ``D/metrics.json`` (or
``D/failure.json``) as a single-seed run's; in ``D/seed_<s>/`` what a single-seed run writes beside them
(``checkpoints/``, ``tensorboard/``, ``progress.csv``, ``iterates.npz``, ``policy/``). ``D/metrics.json``
holds the run's ``env``, ``gym_id``, ``setting``, ``algorithm``, ``K``, ``main_metric``, ``seed`` (the
first) and ``seeds``, each seed's own metrics (those of a single-seed run's ``metrics.json`` but the
run's keys) under ``per_seed``, the curve's mean and 95% Student-t half width over seeds (``curve``,
``curve_ci95``), the mean ``reference`` and ``budget`` (`pbo_tf.evaluation.stats.summarise_seeds`) and
``wall_time_s_per_seed``, as the offline batched runs write it, so `pbo_tf.analysis.results.load_runs`
and `pbo_tf.experiments.reader.RunReader` give one record per seed.

Time: a seed's ``wall_time_s`` is its share of the batch's wall time (each stretch of time divided among
the seeds that trained in it), its collect time its own, its train time its share of the combined train
step's; its rates (``env_steps_per_s``, ``train_steps_per_s``, ...) are per seed on those times. The ETA
of each seed's progress line is the batch's: the steps left at the batch's rate of training steps.

Checkpoints: every seed saves its own checkpoint at the same training steps; a run killed between two seeds'
saves resumes with the seeds left behind catching up alone before the others join them.

Divergence: a seed whose loss or acting parameters hold a NaN or an Inf after a training step stops alone,
as its single-seed run would: its ``D/seed_<s>/failure.json`` names the seed, what diverged and the step
(its checkpoints keep the last good state), and the other seeds train on. ``D/metrics.json`` then holds the
seeds that finished (``seeds``, ``per_seed``, the mean curve over them) and ``failed_seeds``; a resumed run
leaves a seed with a ``failure.json`` out. When every seed has diverged, the run fails as a single-seed run
does (``D/failure.json``, `DivergenceError`).

The same draws as the single-seed runs. TensorFlow seeds a random op that has no seed of its own from the
global seed at the time its function is traced and from the op's position in that function, and
``tf.random.set_seed`` restarts the random streams of every function that has run. So each seed's
functions with random ops (its initial and collect drivers: the random and ε-greedy policies; its replay
dataset's sampling) are traced right after that seed's build, under its seed, and nothing sets the global
seed once any of them has run. The combined train step holds no random op (ProDQN's W order is a stateless
shuffle). With deterministic ops (``pbo-train --deterministic``) seed ``s`` of a batch then gives the
metrics of the single-seed run of ``s`` (tests/experiments/test_online_seeds.py); without them, the replay
dataset samples its next batches ahead of the loop at times that vary from run to run, so two single-seed
runs of one config differ as much.
"""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np
import tensorflow as tf

try:
    from tf_agents.utils import common
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.analysis.results import seed_folder_name
from pbo_tf.evaluation.stats import summarise_seeds
from pbo_tf.experiments import run_folder
from pbo_tf.experiments.online import OnlineExperiment, _timings
from pbo_tf.progress_log import ProgressCSV
from pbo_tf.utils import DivergenceError

#: ``metrics.json`` keys of the run as a whole; the other keys of a seed's metrics go to its ``per_seed``.
RUN_KEYS = ("env", "gym_id", "setting", "algorithm", "K", "main_metric")


class SeedMember(OnlineExperiment):
    """One seed of a batched run: an `OnlineExperiment` in ``D/seed_<s>/`` that does not claim its folder
    (the batch's run folder holds the fingerprint and the config)."""

    def claim_folder(self) -> str:
        os.makedirs(self.root_dir, exist_ok=True)
        return "new"


class _Seed:
    """What the batched loop keeps of one seed besides its `SeedMember`."""

    def __init__(self, member: SeedMember):
        self.member = member
        self.time_step = self.policy_state = None
        self.initial = self.collect = None  # the seed's compiled drivers, traced under its seed
        self.dataset = self.iterator = None
        self.writer = None
        self.progress_csv = None
        self.wall0 = 0.0  # the wall time restored from the checkpoint
        self.elapsed = 0.0  # the seed's share of this call's wall time
        self.acc = self.window = None
        self.loss = float("nan")


class SeedBatch:
    """The seeds of an `OnlineExperiment` with ``num_seeds > 1`` (see the module docstring)."""

    def __init__(self, root: OnlineExperiment):
        self.root = root
        self.seeds: list[_Seed] | None = None
        self.failed: set[int] = set()  # the seeds that diverged
        self._train_functions: dict[tuple[int, ...], object] = {}
        self._finite_functions: dict[tuple[int, ...], object] = {}

    @property
    def members(self) -> list[SeedMember]:
        """Every seed's experiment (after `build`)."""
        return [s.member for s in self.seeds or []]

    # ------------------------------------------------------------------------------------------ build
    def build(self) -> None:
        """Builds every seed as its single-seed run builds itself (restoring its latest checkpoint) and traces
        its functions with random ops under its seed."""
        root = self.root
        root.claim_folder()
        if self.seeds is not None:
            return
        seeds = []
        for seed in root.seeds:
            folder = root.path(seed_folder_name(seed))
            failure = os.path.join(folder, run_folder.FAILURE_FILE)
            if os.path.exists(failure):  # diverged in an earlier call: stays out
                self.failed.add(seed)
                root.log(f"seed {seed}: left out, it diverged ({failure})")
                continue
            member = SeedMember(
                **{
                    **root.init_args,
                    "root_dir": folder,
                    "seed": seed,
                    "num_seeds": 1,
                    "agent": type(root.algorithm),  # a builder of its own, configured as the root's
                    "log": _prefixed(root.log, seed),
                }
            )
            member.build()  # tf_keras.utils.set_random_seed(seed), as the single-seed run
            seeds.append(self._trace(member))
        if not seeds:
            raise DivergenceError(
                f"training diverged: every seed of {root.root_dir} diverged (their seed_<s>/failure.json)",
                where="every seed",
                step=None,
            )
        self.seeds = seeds

    @staticmethod
    def _trace(member: SeedMember) -> _Seed:
        """The seed's drivers traced and its replay dataset made while the global seed is its own (right after
        its build): the op seeds of its single-seed run."""
        s = _Seed(member)
        s.time_step = member.tf_env.reset()
        s.policy_state = member.agent.collect_policy.get_initial_state(member.tf_env.batch_size)
        if not bool(member.progress.initial_collect_done.numpy()):
            s.initial = common.function(member.collector.initial_driver.run)
            s.initial.get_concrete_function(time_step=s.time_step)
        s.collect = common.function(member.collector.collect_driver.run)
        s.collect.get_concrete_function(time_step=s.time_step, policy_state=s.policy_state)
        s.dataset = member.collector.replay_dataset()
        return s

    def _train_function(self, group: list[_Seed]):
        """One compiled function running the ``agent.train`` of every seed of ``group`` on its replay batch,
        each seed's summaries into its own TensorBoard folder (none under XLA, as a single-seed run)."""
        key = tuple(id(s) for s in group)
        if key not in self._train_functions:
            jit = self.root.jit_compile

            def train_all(experiences):
                out = []
                for s, experience in zip(group, experiences, strict=True):
                    m = s.member
                    if jit:
                        recording = tf.summary.record_if(False)
                    else:
                        recording = contextlib.ExitStack()
                        recording.enter_context(s.writer.as_default())
                        recording.enter_context(
                            tf.summary.record_if(lambda m=m: tf.equal(m.train_step % m.summary_interval, 0))
                        )
                    with recording:
                        out.append(m.agent.train(experience))
                return out

            self._train_functions[key] = common.function(train_all, jit_compile=jit)
        return self._train_functions[key]

    def _check_finite(self, group: list[_Seed], losses, step: int) -> list[_Seed]:
        """The single-seed run's check after training step ``step`` (`OnlineExperiment.check_finite`) of
        every seed of ``group``, in one call: one function gives every seed's two flags (loss, acting
        parameters); a seed with a NaN or an Inf gets its own `DivergenceError` and leaves the batch
        (`_drop`). Returns the seeds that left."""
        key = tuple(id(s) for s in group)
        if key not in self._finite_functions:

            def finite_all(losses):
                flags = []
                for s, loss in zip(group, losses, strict=True):
                    params = s.member.algorithm.acting_params()
                    flags.append(
                        tf.stack(
                            [tf.reduce_all(tf.math.is_finite(loss)), tf.reduce_all(tf.math.is_finite(params))]
                        )
                    )
                return tf.stack(flags)

            self._finite_functions[key] = tf.function(finite_all, autograph=False)
        flags = self._finite_functions[key]([loss_info.loss for loss_info in losses]).numpy()
        dropped = []
        for s, loss_info, ok in zip(group, losses, flags, strict=True):
            if not ok.all():
                try:
                    s.member.check_finite(loss_info, step)  # raises, naming what diverged
                except DivergenceError as error:
                    self._drop(s, error)
                    dropped.append(s)
        return dropped

    def _drop(self, s: _Seed, error: DivergenceError) -> None:
        """Records a diverged seed in its folder's ``failure.json`` and takes it out of the batch; re-raises
        ``error`` when it was the last seed training."""
        m = s.member
        if s.writer is not None:
            s.writer.flush()
        if len(self.seeds) == 1:
            raise error
        path = run_folder.write_failure(
            m.root_dir, error, **m.run_identity(), where=error.where, train_step=error.step,
            last_checkpoint_step=m.last_saved_step,
        )  # fmt: skip
        self.failed.add(m.seed)
        self.seeds.remove(s)
        self.root.log(f"seed {m.seed}: {error} (recorded in {path}); the other seeds train on")

    # ------------------------------------------------------------------------------------------ train
    def train(self) -> bool:
        """Initial collects where not done, then the seeds' training steps together (the seeds a kill left
        behind first catch up); True when every seed finished training."""
        if self.seeds is None:
            self.build()
        root = self.root
        self._last = time.perf_counter()
        for s in self.seeds:
            m = s.member
            s.wall0, s.elapsed = float(m.progress.wall_time_s.numpy()), 0.0
            s.writer = s.writer or tf.summary.create_file_writer(m.path("tensorboard"))
        for s in self.seeds:
            if not bool(s.member.progress.initial_collect_done.numpy()):
                t0 = time.perf_counter()
                s.time_step, _ = s.initial(time_step=s.time_step)
                s.member.progress.initial_collect_done.assign(True)
                s.member.log(
                    f"initial collect: {s.member.collector.initial_collect_steps} random steps "
                    f"in {time.perf_counter() - t0:.1f}s"
                )
                self._tick([s])
                self._save(s)
        total = root.total_train_steps
        steps = {id(s): int(s.member.train_step.numpy()) for s in self.seeds}
        limit = total
        if root.max_train_steps_this_call is not None:
            limit = min(total, min(steps.values()) + int(root.max_train_steps_this_call))
        for s in self.seeds:
            if root.eval_interval and steps[id(s)] < total:
                s.progress_csv = ProgressCSV(s.member.root_dir, "train_step")
                s.progress_csv.rewind(steps[id(s)] + 1)  # the steps after the restored checkpoint run again
        first = min(steps.values())
        if first < limit:
            root.log(
                f"{root.env.name} / {root.label}: K={root.K}, seeds {root.seeds[0]}..{root.seeds[-1]} in one "
                f"process, d={self.seeds[0].member.q.d}, train steps {first} -> {limit} of {total} "
                f"-> {root.root_dir}"
            )
        while True:
            behind = [step for step in steps.values() if step < limit]
            if not behind:
                break
            low = min(behind)
            group = [s for s in self.seeds if steps[id(s)] == low]
            target = min([limit] + [step for step in steps.values() if step > low])
            self._train_group(group, low, target)
            for s in group:
                if s in self.seeds:
                    steps[id(s)] = target
                else:  # diverged
                    steps.pop(id(s))
        for s in self.seeds:
            s.writer.flush()
            if not np.isfinite(s.loss):
                s.member.log(f"warning: the last logged loss is {s.loss}")
        finished = all(step >= total for step in steps.values())
        if not finished:
            root.log(f"stopped at train step {min(steps.values())} of {total}")
        return finished

    def _tick(self, active: list[_Seed]) -> None:
        """Shares the wall time since the last tick among the seeds ``active`` in it."""
        now = time.perf_counter()
        for s in active:
            s.elapsed += (now - self._last) / len(active)
        self._last = now

    @staticmethod
    def _save(s: _Seed) -> None:
        s.member.progress.wall_time_s.assign(s.wall0 + s.elapsed)
        s.member._save()  # noqa: SLF001

    def _train_group(self, group: list[_Seed], step: int, limit: int) -> None:
        """Trains the seeds of ``group`` (all at training step ``step``) together up to ``limit``, with the
        progress lines, evaluations and checkpoints of the single-seed loop
        (`pbo_tf.experiments.online.OnlineExperiment._train_loop`)."""
        root = self.root
        train = self._train_function(group)
        n = len(group)
        for s in group:
            if s.iterator is None:
                s.iterator = iter(s.dataset)
            s.acc, s.window = _timings(), _timings()
        lead = group[0]  # its periods' starts, the same for every seed, time the logs and checkpoints
        warm_up = True  # the first step of a call traces the compiled functions and is not timed
        while step < limit:
            collect_s = []
            for s in group:
                t0 = time.perf_counter()
                s.time_step, s.policy_state = s.collect(time_step=s.time_step, policy_state=s.policy_state)
                collect_s.append(time.perf_counter() - t0)
            t1 = time.perf_counter()
            experiences = [next(s.iterator)[0] for s in group]
            losses = train(experiences)
            t2 = time.perf_counter()
            step += 1
            dropped = self._check_finite(group, losses, step)  # before any checkpoint of this step
            if dropped:
                kept = [i for i, s in enumerate(group) if s not in dropped]
                group, losses = [group[i] for i in kept], [losses[i] for i in kept]
                collect_s = [collect_s[i] for i in kept]
                train, n, lead = self._train_function(group), len(group), group[0]
            if not warm_up:
                for s, seconds in zip(group, collect_s, strict=True):
                    for timing in (s.acc, s.window):
                        timing["n"] += 1
                        timing["collect"] += seconds
                        timing["train"] += (t2 - t1) / n
            warm_up = bool(dropped)  # after a seed left, the next step traces the function of the others
            for s in group:
                s.member.algorithm.after_train_step(step)
            now = time.perf_counter()
            if (
                step % root.log_interval == 0
                or step == limit
                or now - lead.window["since"] >= root.log_interval_s
            ):
                # the ETA at the batch's rate: a training step of the batch takes every seed's collect and
                # the combined train step, the sum of the seeds' shares (each seed's own rate is S times it)
                loop_s = sum(s.window["collect"] + s.window["train"] for s in group)
                batch_rate = lead.window["n"] / loop_s if loop_s > 0 else None
                for s, loss_info in zip(group, losses, strict=True):
                    with s.writer.as_default():
                        s.loss = s.member._log_progress(step, loss_info, s.window, batch_rate)  # noqa: SLF001
                    s.window = _timings()
            if root.eval_interval and (step % root.eval_interval == 0 or step == root.total_train_steps):
                t3 = time.perf_counter()
                self._tick(group)
                for s in group:
                    with s.writer.as_default():
                        s.member._evaluate_progress(step, s.progress_csv, s.wall0 + s.elapsed)  # noqa: SLF001
                for s in group:
                    for timing in (s.acc, s.window):  # the periods count training time only
                        timing["since"] += time.perf_counter() - t3
            if (
                step % root.checkpoint_interval == 0
                or step == limit
                or now - lead.acc["since"] >= root.checkpoint_interval_s
            ):
                self._tick(group)
                for s in group:
                    s.member._add_timings(s.acc)  # noqa: SLF001
                    s.acc = _timings()
                    self._save(s)

    # ------------------------------------------------------------------------------------------ results
    def results(self) -> dict:
        """Every seed's results (`OnlineExperiment.results`: its curve, iterates, policy and metrics in its
        folder) and their summary over seeds."""
        root = self.root
        per_seed = []
        root.eval_time = 0.0
        for s in self.seeds:
            metrics = s.member.results()
            root.eval_time += s.member.eval_time
            per_seed.append({key: value for key, value in metrics.items() if key not in RUN_KEYS})
        metrics = {
            "env": root.env.name,
            "gym_id": root.env.env_id,
            "setting": "online",
            "algorithm": root.label,
            "K": root.K,
            "seed": root.seed,
            "main_metric": root.env.main_metric,
            "seeds": [s.member.seed for s in self.seeds],
            **({"failed_seeds": sorted(self.failed)} if self.failed else {}),
            **summarise_seeds(per_seed),
            "per_seed": per_seed,
            "wall_time_s_per_seed": float(np.mean([p["wall_time_s"] for p in per_seed])),
        }
        return metrics

    def failure_details(self, error) -> dict:
        saved = [m.last_saved_step for m in self.members]
        last = None if not saved or None in saved else min(saved)
        return {"where": error.where, "train_step": error.step, "last_checkpoint_step": last}

    def done_line(self, metrics: dict) -> str:
        root = self.root
        main, curve = root.env.main_metric, metrics["curve"]
        at_k = root.curve_at(curve, main)
        failed = f", seeds {sorted(self.failed)} diverged" if self.failed else ""
        return (
            f"done ({len(self.seeds)} seeds, mean over seeds{failed}): {main} at k=0: {at_k.get(0)}, "
            f"k=K: {at_k.get(root.K)}, last k={len(curve) - 1}: {at_k.get(len(curve) - 1)} "
            f"(eval {root.eval_time:.1f}s)"
        )


def _prefixed(log, seed: int):
    return lambda line: log(f"seed {seed}: {line}")
