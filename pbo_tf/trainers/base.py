"""Shared skeleton of the offline trainers: seeded data order, Adam with a linear LR schedule,
checkpoints that resume exactly, TensorBoard summaries, progress output and divergence checks.

The trainers take a `tf.data.Dataset` of transitions and read it once into memory (offline datasets are
small); every pass then draws its batches with stateless ops inside one compiled loop, which is faster
than iterating a `tf.data` pipeline inside the loop.

Every random choice of a run (data order, W batches) is a pure function of ``(seed, counters)``, and the
counters live in the checkpoint, so a killed run restarted from its last checkpoint replays exactly the
same sequence of gradient steps as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from pbo_tf.data.transitions import materialise, shuffled_batch_indices
from pbo_tf.io import write_text_atomic
from pbo_tf.operators.base import check_iterations

TRAIN_TIME_FILE = "train_time.json"


class DivergenceError(FloatingPointError):
    """Raised when a training loss, an iterate or a Q value becomes NaN or infinite; the last good
    checkpoint is kept.

    Attributes:
      where: what diverged (e.g. ``"refresh 3 (seed 0)"``, ``"ProDQN loss"``).
      step: the step at which it did (its unit is ``where``'s: a step of the refresh, a training step, k).
    """

    def __init__(self, message: str, where: str | None = None, step: int | None = None):
        super().__init__(message)
        self.where, self.step = where, step


def data_seed(seed: int | tf.Tensor, *counters) -> tf.Tensor:
    """A deterministic int64 seed for one pass over the data, from the run seed and loop counters."""
    out = tf.cast(seed, tf.int64) * 1_000_003
    for c in counters:
        out = out * 10_007 + tf.cast(c, tf.int64)
    return out % (2**62)


class OfflineTrainer:
    """Holds what FQI and ProFQI share; subclasses implement `train`.

    Args:
      q_family: the Q family.
      dataset: unbatched `tf.data.Dataset` of transition dicts (see `pbo_tf.data.transitions`).
      dataset_size: its number of transitions.
      K: number of Bellman iterations (FQI iterations / terms of the PBO loss), >= 1.
      gamma: discount factor.
      batch_size: transitions per gradient step.
      seed: run seed (data order and W batches derive from it).
      checkpoint_dir: where to keep `tf.train.Checkpoint`s (None = no checkpoints).
      summary_dir: TensorBoard log dir (None = no summaries).
      log: progress printer (default `print`; None silences).
      jit_compile: compile the hot loop with XLA.
    """

    def __init__(
        self,
        q_family,
        dataset: tf.data.Dataset,
        dataset_size: int,
        K: int,
        gamma: float,
        batch_size: int,
        seed: int,
        checkpoint_dir: str | None = None,
        summary_dir: str | None = None,
        log: Callable[[str], None] | None = print,
        jit_compile: bool = False,
    ):
        self.K = check_iterations(K)
        if batch_size < 1 or batch_size > dataset_size:
            raise ValueError(
                f"batch_size must be in [1, {dataset_size}] (the dataset size), got {batch_size}"
            )
        self.q_family = q_family
        self.data = materialise(dataset)
        self.dataset_size = int(next(iter(self.data.values())).shape[0])
        if self.dataset_size != int(dataset_size):
            raise ValueError(
                f"dataset_size={dataset_size} but the dataset holds {self.dataset_size} transitions"
            )
        self.gamma = float(gamma)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.batches_per_pass = self.dataset_size // self.batch_size
        self.checkpoint_dir = checkpoint_dir
        self.summary_writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None
        self._log = log
        self.jit_compile = bool(jit_compile)
        self.train_seconds = 0.0  # training wall time of this run over every process (resumes included)

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
        killed mid-save resumes from the previous complete checkpoint.
        """
        if self.checkpoint_dir is None:
            return None
        checkpoint = tf.train.Checkpoint(**objects)
        check_checkpoint_index(self.checkpoint_dir)
        manager = tf.train.CheckpointManager(checkpoint, self.checkpoint_dir, max_to_keep=2)
        if manager.latest_checkpoint:
            try:
                checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
            except Exception as e:  # TF raises OpError, IndexError, AssertionError, ... for bad files
                raise ValueError(
                    f"checkpoint {manager.latest_checkpoint!r} is corrupt or does not match this run (a "
                    f"damaged or missing piece; delete {self.checkpoint_dir!r} to start over): "
                    f"{_first_line(e)}"
                ) from e
            self.log(f"restored checkpoint {manager.latest_checkpoint}")
            path = os.path.join(self.checkpoint_dir, TRAIN_TIME_FILE)
            if os.path.exists(path):
                try:
                    with open(path) as f:
                        self.train_seconds = float(json.load(f)["train_seconds"])
                except (OSError, ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{path} is corrupt (delete it to restart the time ledger): {e}") from e
        return manager

    def save_checkpoint(self, number: int, seconds: float = 0.0) -> None:
        """Checkpoints after ``number`` refreshes / iterations, adding ``seconds`` of training to
        `train_seconds`, which is saved beside the checkpoints, so a resumed run reports the time of all
        its processes, not just the last. Flushes the summaries too."""
        if self.summary_writer is not None:
            self.summary_writer.flush()
        if self.manager is not None:
            self.manager.save(checkpoint_number=number)
        self.train_seconds += float(seconds)
        if self.checkpoint_dir is not None:
            text = json.dumps({"train_seconds": self.train_seconds}) + "\n"
            write_text_atomic(os.path.join(self.checkpoint_dir, TRAIN_TIME_FILE), text)

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


def check_checkpoint_index(checkpoint_dir: str) -> None:
    """Raises ValueError when ``checkpoint_dir`` has a ``checkpoint`` index file that TensorFlow cannot read
    (TensorFlow would log a warning, ignore it and start the run over). A missing index is fine: the
    index is written last, so a run killed during its first save has none and starts over."""
    import logging

    path = os.path.join(checkpoint_dir, "checkpoint")
    if not os.path.exists(path):
        return
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)  # (its "Checkpoint ignored" warning: the error below says it)
    try:
        state = tf.train.get_checkpoint_state(checkpoint_dir)
    except Exception:  # noqa: BLE001 (any failure to read it is the same fault)
        state = None
    finally:
        tf_logger.setLevel(level)
    if state is None or not state.model_checkpoint_path:
        raise ValueError(
            f"the checkpoint index {path!r} is corrupt (a damaged piece; delete {checkpoint_dir!r} to start "
            "over)"
        )


def _first_line(error: BaseException, limit: int = 300) -> str:
    """The first line of ``error``'s message, at most ``limit`` characters (TensorFlow's run long)."""
    lines = str(error).strip().splitlines()
    line = lines[0] if lines else type(error).__name__
    return line if len(line) <= limit else line[:limit] + " ..."


class Every:
    """``due()`` is True when ``seconds`` have passed since it was last True (or since construction)."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.last = time.perf_counter()

    def __call__(self) -> bool:
        now = time.perf_counter()
        if now - self.last >= self.seconds:
            self.last = now
            return True
        return False


class ProgressTimer:
    """Measures steps/s between progress lines."""

    def __init__(self):
        self.start = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        elapsed, self.start = now - self.start, now
        return elapsed
