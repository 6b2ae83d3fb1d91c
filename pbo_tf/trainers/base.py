"""The offline trainers' skeleton: the train loop (one seed, or S seeds in one compiled graph), seeded data
order, checkpoints that resume exactly, TensorBoard summaries, progress output and divergence checks.

A trainer's outer loop is a sequence of *rounds*: an FQI iteration, a ProFQI target refresh. Each round is
one compiled call (`run_round`) between host-side preparation (`begin_round`) and bookkeeping
(`end_round`: divergence checks, summaries, counters); `train` and `train_seeds` run that loop once for
every trainer, checkpointing every ``checkpoint_every_s`` seconds and after the last round.

The trainers take a `tf.data.Dataset` of transitions and read it once into memory (offline datasets are
small); every pass then draws its batches with stateless ops inside the compiled round, which is faster
than iterating a `tf.data` pipeline there.

Every random choice of a run (data order, W batches) is a pure function of ``(seed, counters)``, and the
counters live in the checkpoint, so a killed run restarted from its last checkpoint replays exactly the
same sequence of gradient steps as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from pbo_tf.data.transitions import materialise, shuffled_batch_indices
from pbo_tf.io import write_text_atomic
from pbo_tf.progress_log import eta_text, metrics_text, numeric_metrics
from pbo_tf.utils import (
    DivergenceError,
    Every,
    ProgressTimer,
    check_checkpoint_index,
    data_seed,
    restore_newest_readable,
)

TRAIN_TIME_FILE = "train_time.json"


class OfflineTrainer:
    """Holds what FQI and ProFQI share, the train loop included; subclasses implement the round
    (`begin_round`, `run_round`, `end_round`, `round_steps`) and say what their rounds are called.

    Every argument is a keyword.

    Args:
      config: the algorithm's config (`pbo_tf.configs`: `FQIConfig`, `IFQIConfig`, `ProFQIConfig`); the
        skeleton reads its ``K`` (Bellman iterations, >= 1), ``batch_size`` (transitions per gradient step),
        ``jit_compile`` (False: graph mode; True: XLA on each gradient step; ``"round"``: the whole round,
        an FQI iteration with its early stopping or a refresh with all its passes, as one XLA program),
        ``checkpoint_every_s`` (seconds between checkpoints; 0: after every round; one is always written
        after the last round of a `train` call) and ``progress_every_s`` (seconds between progress lines;
        0: after every round).
      q_family: the Q family.
      dataset: unbatched `tf.data.Dataset` of transition dicts (see `pbo_tf.data.transitions`), finite; the
        trainer reads it once into memory and counts its transitions.
      gamma: discount factor.
      seed: run seed (data order and W batches derive from it).
      checkpoint_dir: where to keep `tf.train.Checkpoint`s (None = no checkpoints).
      summary_dir: TensorBoard log dir (None = no summaries).
      log: progress printer (default `print`; None silences).
    """

    #: the algorithm's name and its round's name and plural, for progress lines ("ProFQI", "refresh")
    algorithm = "offline"
    round_name, rounds_name = "round", "rounds"
    #: the operator's learner (`pbo_tf.learner.PBOLearner`) of a trainer that learns one; None otherwise
    learner = None
    #: evaluation during training (`set_evaluation`): ``() -> metrics`` of the greedy policy at K now
    evaluator = None
    eval_every = 0
    progress_csv = None
    #: the ETA of the run, set by `train_seeds` before each round's end (for trainers that log each round)
    eta = ""

    def __init__(
        self,
        *,
        config,
        q_family,
        dataset: tf.data.Dataset,
        gamma: float,
        seed: int,
        checkpoint_dir: str | None = None,
        summary_dir: str | None = None,
        log: Callable[[str], None] | None = print,
    ):
        batch_size = config.batch_size  # the config checked its fields (K >= 1, jit_compile's modes, ...)
        self.config = config
        #: the run's `pbo_tf.schedule.Schedule` (K, refreshes), from the config; a trainer with refreshes sets
        #: their Adam steps once it knows the dataset
        self.schedule = config.schedule()
        self.q_family = q_family
        self.data = materialise(dataset)
        self.dataset_size = int(next(iter(self.data.values())).shape[0])
        if batch_size < 1 or batch_size > self.dataset_size:
            raise ValueError(
                f"{type(config).__name__}.batch_size must be in [1, {self.dataset_size}] (the dataset "
                f"size), got {batch_size}"
            )
        self.gamma = float(gamma)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.batches_per_pass = self.dataset_size // self.batch_size
        self.checkpoint_dir = checkpoint_dir
        self.summary_writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None
        self._log = log
        self.jit_compile = config.jit_compile
        self.checkpoint_every_s = float(config.checkpoint_every_s)
        self.progress_every_s = float(config.progress_every_s)
        self.train_seconds = 0.0  # training wall time of this run over every process (resumes included)
        # the loss terms' metrics at the last probe (`pbo_tf.loss_terms`), saved with the checkpoints
        self.loss_metrics: dict[str, float] = {}
        self._rounds_done = tf.Variable(0, dtype=tf.int64, trainable=False, name="rounds_done")
        self.manager = None

    @property
    def K(self) -> int:
        """Bellman iterations: the schedule's."""
        return self.schedule.K

    @property
    def refreshes(self) -> int | None:
        """Target refreshes (ProFQI, i-FQI): the schedule's."""
        return self.schedule.refreshes

    @property
    def steps_per_refresh(self) -> int | None:
        """Adam steps per refresh (ProFQI, i-FQI): the schedule's."""
        return self.schedule.steps_per_refresh

    @property
    def total_steps(self) -> int:
        """The run's Adam steps (ProFQI, i-FQI): the schedule's ``refreshes × steps_per_refresh``."""
        return self.schedule.total_steps

    @property
    def compile_round(self) -> bool:
        """Whether each round is one XLA program (``jit_compile="round"``)."""
        return self.jit_compile == "round"

    @property
    def compile_step(self) -> bool:
        """Whether each gradient step is its own XLA program (``jit_compile=True``)."""
        return self.jit_compile is True

    # ------------------------------------------------------------------------------ the round (subclasses)
    @property
    def num_rounds(self) -> int:
        """Rounds of a whole run (FQI: K iterations; ProFQI: the refreshes)."""
        raise NotImplementedError

    @property
    def rounds_done(self) -> int:
        """Rounds complete (restored from the checkpoint on resume)."""
        return int(self._rounds_done.numpy())

    def begin_round(self, r: int) -> tuple:
        """Host-side preparation of round ``r``; returns the arguments of `run_round`."""
        raise NotImplementedError

    def run_round(self, *args):
        """Round ``r``'s compiled computation (set by the subclass to a `tf.function`)."""
        raise NotImplementedError

    def end_round(self, r: int, outputs, elapsed: float, share: int = 1) -> list[float]:
        """Checks round ``r``'s outputs (numpy) for divergence, writes summaries, counts the round as done
        and adds ``elapsed / share`` seconds of training (``share`` seeds ran in the call); returns the
        round's losses."""
        raise NotImplementedError

    def round_steps(self, outputs) -> int:
        """Gradient steps that round's outputs stand for."""
        raise NotImplementedError

    def progress_line(self, round_losses: list[float], steps_per_s: float) -> str:
        """The line printed after a round of a single-seed run; "" (the default) prints nothing, for
        trainers whose `end_round` logs each round itself."""
        return ""

    def seed_progress(self) -> str:
        """This seed's own line under a batched run's progress line ("" = none, the default)."""
        return ""

    def checkpoint(self) -> None:
        """Saves the trainer at its current round count (and the training time so far)."""
        self.save_checkpoint(self.rounds_done)

    def train(self, max_rounds: int | None = None) -> list[float]:
        """Runs (or resumes) training; returns the losses of the rounds run in this call (FQI: each
        iteration's epoch losses; ProFQI: each pass's mean loss).

        Args:
          max_rounds: stop after this many rounds in this call (a budget slice; the next call, or a new
            trainer on the same checkpoint_dir, continues where it stopped).
        """
        return train_seeds([self], log=self._log, max_rounds=max_rounds)[0]

    # ------------------------------------------------------------------------- evaluation during training
    @property
    def steps_done(self) -> int:
        """Gradient steps made so far (rounds with refreshes: ``rounds_done × steps_per_refresh``)."""
        return self.rounds_done * self.steps_per_refresh

    def set_evaluation(self, evaluator, every: int, progress_csv) -> None:
        """Evaluates the greedy policy at K every ``every`` rounds and after the last one: ``evaluator()``
        returns its metrics, written to ``progress_csv`` (a `pbo_tf.experiments.progress_log.ProgressCSV`; the
        rows of rounds after the restored checkpoint are dropped, as those rounds run again), to TensorBoard
        (``eval/<metric>`` at the round) and to the progress line."""
        if int(every) < 1:
            raise ValueError(f"the evaluation's period must be >= 1 round, got {every}")
        self.evaluator, self.eval_every, self.progress_csv = evaluator, int(every), progress_csv
        progress_csv.rewind(self.rounds_done + 1)

    def evaluation_due(self, rounds: int) -> bool:
        """Whether the round count ``rounds`` is evaluated."""
        return self.evaluator is not None and (rounds % self.eval_every == 0 or rounds == self.num_rounds)

    def evaluate_progress(self) -> str:
        """Evaluates now (see `set_evaluation`); returns the progress line's text."""
        metrics = numeric_metrics(self.evaluator())
        row = {
            "round": self.rounds_done,
            "gradient_steps": self.steps_done,
            "wall_time_s": self.train_seconds,
        }
        self.progress_csv.append({**row, **metrics})
        self.write_scalars(self.rounds_done, **{f"eval/{key}": value for key, value in metrics.items()})
        return f"eval at K: {metrics_text(metrics)}"

    # ------------------------------------------------------------------------------------ helpers
    def log(self, message: str) -> None:
        if self._log is not None:
            self._log(message)

    def pass_indices(self, *counters) -> tf.Tensor:
        """Batch indices ``[batches_per_pass, batch_size]`` of one shuffled pass over the dataset; the order
        is a function of the seed and the (possibly symbolic) counters only."""
        return shuffled_batch_indices(self.dataset_size, self.batch_size, data_seed(self.seed, *counters))

    def make_checkpoint_manager(self, **objects) -> tf.train.CheckpointManager | None:
        """A manager over ``objects``, restored from the latest complete checkpoint if there is one.

        TensorFlow writes the checkpoint's data files first and the ``checkpoint`` index last, so a run
        killed mid-save resumes from the previous complete checkpoint; the last two are kept, and a newest one
        that does not read back is reported in one line and the previous one restored
        (`pbo_tf.utils.restore_newest_readable`).
        """
        if self.checkpoint_dir is None:
            return None
        checkpoint = tf.train.Checkpoint(**objects)
        check_checkpoint_index(self.checkpoint_dir)
        manager = tf.train.CheckpointManager(checkpoint, self.checkpoint_dir, max_to_keep=2)
        restored = restore_newest_readable(checkpoint, manager, self.log)
        if restored:
            self.log(f"restored checkpoint {restored}")
            path = os.path.join(self.checkpoint_dir, TRAIN_TIME_FILE)
            if os.path.exists(path):
                try:
                    with open(path) as f:
                        ledger = json.load(f)
                    # the entry of the checkpoint restored (the previous one where the newest was corrupt);
                    # a ledger of one entry, without "checkpoints", is read as the newest's
                    entry = ledger.get("checkpoints", {}).get(os.path.basename(restored), ledger)
                    self.train_seconds = float(entry["train_seconds"])
                    self.loss_metrics = {k: float(v) for k, v in entry.get("loss_metrics", {}).items()}
                except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                    raise ValueError(f"{path} is corrupt (delete it to restart the time ledger): {e}") from e
        return manager

    def save_checkpoint(self, number: int) -> None:
        """Checkpoints after ``number`` rounds, with `train_seconds` and the last `loss_metrics` saved beside
        the checkpoints, so a resumed run reports the time of all its processes, not just the last, and the
        metrics of its last probe. Flushes the summaries too."""
        if self.summary_writer is not None:
            self.summary_writer.flush()
        # The ledger first: a kill between the two leaves it ahead of the checkpoint, whose rerun of the
        # refresh rewrites it; behind, a run whose last checkpoint is its last refresh would report stale
        # metrics.
        # Each kept checkpoint's entry ("ckpt-<number>") stays beside the newest's, which is also the top
        # level, so a run resumed from the previous checkpoint (the newest corrupt) takes that one's time
        # and does not count the redone rounds twice.
        if self.checkpoint_dir is not None:
            entry = {"train_seconds": self.train_seconds}
            if self.loss_metrics:
                entry["loss_metrics"] = self.loss_metrics
            kept = [os.path.basename(c) for c in (self.manager.checkpoints if self.manager else [])][-1:]
            path = os.path.join(self.checkpoint_dir, TRAIN_TIME_FILE)
            previous = {}
            if os.path.exists(path):
                try:
                    with open(path) as f:
                        previous = json.load(f).get("checkpoints", {})
                except (OSError, ValueError, AttributeError):
                    previous = {}
            entries = {name: previous[name] for name in kept if name in previous}
            entries[f"ckpt-{number}"] = entry
            write_text_atomic(path, json.dumps({**entry, "checkpoints": entries}) + "\n")
        if self.manager is not None:
            self.manager.save(checkpoint_number=number)

    def write_scalars(self, step: int, **scalars) -> None:
        if self.summary_writer is None:
            return
        with self.summary_writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)

    def check_finite(self, losses: np.ndarray, where: str) -> None:
        """Raises `DivergenceError` if a step loss is NaN or infinite, naming the step and what is
        non-finite after it (`diagnose`: the weights, the operator's output or the Q values)."""
        if not np.all(np.isfinite(losses)):
            bad = int(np.argmin(np.isfinite(losses)))
            found = self.diagnose()
            raise DivergenceError(
                f"training diverged: the loss became {losses[bad]} at step {bad} of {where}"
                + (f" ({found})" if found else "")
                + "; the last good checkpoint is kept (try a smaller learning rate or PBO init std)",
                where=where,
                step=bad,
            )

    def diagnose(self) -> str:
        """What is non-finite in the trainer's state, in words ("" when nothing is); subclasses look at
        their weights, their operator's output and the Q values."""
        return ""

    def nonfinite_q(self, params: tf.Tensor, label: str) -> str:
        """A description of the non-finite Q values of ``params`` ``[n, d]`` on the first transitions, or
        "" when they are all finite."""
        q = self.q_family.q_all(params, self.data["state"][:1000]).numpy()
        return "" if np.all(np.isfinite(q)) else f"the Q values of {label} are non-finite"


def check_same(trainers: Sequence[OfflineTrainer], attributes: Sequence[str]) -> None:
    """Raises ValueError unless there is a trainer and the trainers (one per seed, trained together) agree
    on each of ``attributes``."""
    if not trainers:
        raise ValueError("need at least one trainer")
    for name in attributes:
        values = {getattr(t, name) for t in trainers}
        if len(values) > 1:
            shown = sorted(getattr(v, "__name__", str(v)) for v in values)  # classes by name
            raise ValueError(f"the trainers trained together must share {name.strip('_')}, got {shown}")


def train_seeds(
    trainers: Sequence[OfflineTrainer],
    log: Callable[[str], None] | None = print,
    run_all: Callable | None = None,
    max_rounds: int | None = None,
) -> list[list[float]]:
    """Runs (or resumes) the rounds of S trainers of one kind together; returns each one's losses of this
    call (see `OfflineTrainer.train`).

    Each trainer keeps its own data, seed, optimizer and checkpoints, so a seed's results are those of its
    own single-seed run. With S > 1 the S rounds run in one `tf.function` (TensorFlow runs the independent
    loops side by side), or in ``run_all(args) -> [outputs per trainer]`` when given (ProFQI's seed axis,
    `pbo_tf.trainers.seed_batch.seed_axis_rounds`). Seeds left behind by a kill between two seeds' saves
    catch up alone first.

    Args:
      trainers: one per seed, of the same class and number of rounds.
      log: progress printer (None silences): one line per round of a single seed (`progress_line`), or
        one for all seeds, every ``progress_every_s`` seconds and after the last round.
      run_all: ``[begin_round(r) of each trainer] -> [run_round outputs of each trainer]``.
      max_rounds: stop after this many rounds in this call.
    """
    check_same(trainers, ("__class__", "num_rounds"))
    t0 = trainers[0]
    losses: list[list[float]] = [[] for _ in trainers]
    done = [t.rounds_done for t in trainers]
    for i, t in enumerate(trainers):  # catch up seeds left behind by a kill
        if done[i] < max(done):
            losses[i] += t.train(max_rounds=max(done) - done[i])
    start = max(done)
    stop = t0.num_rounds if max_rounds is None else min(t0.num_rounds, start + max_rounds)
    if start >= t0.num_rounds and log is not None:
        log(f"{t0.algorithm}: all {t0.num_rounds} {t0.rounds_name} already done")
    if run_all is None and len(trainers) == 1:
        run_all = lambda args: [t0.run_round(*args[0])]  # noqa: E731
    elif run_all is None:
        run_all = tf.function(
            lambda args: [t.run_round(*a) for t, a in zip(trainers, args, strict=True)], autograph=False
        )

    checkpoint_due, progress_due = Every(t0.checkpoint_every_s), Every(t0.progress_every_s)
    timer, window = ProgressTimer(), ProgressTimer()
    steps_in_window, seconds = 0, 0.0
    for r in range(start, stop):
        outputs = run_all([t.begin_round(r) for t in trainers])
        outputs = [tf.nest.map_structure(np.asarray, out) for out in outputs]
        elapsed = timer.lap()
        # the ETA's rate leaves out the call's first round, which traces and compiles
        seconds += elapsed if r > start else 0.0
        eta = eta_text(t0.num_rounds - r - 1, (r - start) / seconds if seconds > 0 else None)
        for t in trainers:
            t.eta = eta
        round_losses = [
            t.end_round(r, out, elapsed, share=len(trainers))
            for t, out in zip(trainers, outputs, strict=True)
        ]
        evaluations = [t.evaluate_progress() if t.evaluation_due(r + 1) else "" for t in trainers]
        for i, got in enumerate(round_losses):
            losses[i] += got
        steps_in_window += sum(t.round_steps(out) for t, out in zip(trainers, outputs, strict=True))
        last = r + 1 == stop
        if checkpoint_due() or last:
            for t in trainers:
                t.checkpoint()
        if log is not None and (progress_due() or last):
            rate = steps_in_window / max(window.lap(), 1e-9)
            if len(trainers) == 1:
                line = t0.progress_line(round_losses[0], rate)
                line += f", {eta}" if line and eta else ""
                line += f"; {evaluations[0]}" if line and evaluations[0] else ""
            else:
                line = (
                    f"{t0.algorithm} × {len(trainers)} seeds: {t0.round_name} {r + 1}/{t0.num_rounds}, "
                    f"{rate:.0f} gradient steps/s over all seeds" + (f", {eta}" if eta else "")
                )
                for t, evaluation in zip(trainers, evaluations, strict=True):
                    parts = [text for text in (t.seed_progress(), evaluation) if text]
                    if parts:
                        own = "; ".join(parts)
                        line += f"\n  {own}" if own.startswith("seed") else f"\n  seed {t.seed}: {own}"
            if line:
                log(line)
            steps_in_window = 0
        elif log is not None and any(evaluations):
            for t, text in zip(trainers, evaluations, strict=True):
                if text:
                    log(f"{t0.algorithm} {t0.round_name} {r + 1}/{t0.num_rounds}, seed {t.seed}: {text}")
    return losses
