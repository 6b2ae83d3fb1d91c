"""Helpers shared by the offline trainers, the online agent and the experiments: divergence errors, seeds
derived from loop counters, timers for progress and checkpoints, and checks of checkpoint folders."""

from __future__ import annotations

import logging
import os
import time

import tensorflow as tf


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


class Every:
    """``due()`` is True when ``seconds`` have passed since it was last True (or since construction); with
    ``seconds=0`` it is always True."""

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
    """Measures the wall time between laps (steps/s between progress lines)."""

    def __init__(self):
        self.start = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        elapsed, self.start = now - self.start, now
        return elapsed


def first_line(error: BaseException, limit: int = 300) -> str:
    """The first line of ``error``'s message, at most ``limit`` characters (TensorFlow's run long)."""
    lines = str(error).strip().splitlines()
    line = lines[0] if lines else type(error).__name__
    return line if len(line) <= limit else line[:limit] + " ..."


def check_checkpoint_index(checkpoint_dir: str) -> None:
    """Raises ValueError when ``checkpoint_dir`` has a ``checkpoint`` index file that TensorFlow cannot read
    (TensorFlow would log a warning, ignore it and start the run over). A missing index is fine: the
    index is written last, so a run killed during its first save has none and starts over."""
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


def restore_newest_readable(
    checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager, log=None, check=None
):
    """Restores the newest of ``manager``'s checkpoints that reads back whole and matches ``checkpoint``'s
    objects; returns its path (None when there is no checkpoint). A newer one that does not (a damaged data
    or index file) is reported in one line through ``log`` and skipped, so a run keeping its last two
    checkpoints loses only the work since the previous one.

    ``check(status)`` says whether a restore matched, raising if not; default
    ``status.assert_existing_objects_matched()`` (every object of ``checkpoint`` is in the file). The
    online runner passes ``assert_nontrivial_match``, which also takes a checkpoint written before a
    variable was added.

    Raises:
      ValueError: no checkpoint reads back (the message names the newest and says why it failed).
    """
    if check is None:

        def check(status):
            status.assert_existing_objects_matched()

    candidates = list(reversed(manager.checkpoints)) or (
        [manager.latest_checkpoint] if manager.latest_checkpoint else []
    )
    failures = []
    for path in candidates:
        try:
            check(checkpoint.restore(path))
        except Exception as e:  # TF raises OpError, IndexError, AssertionError, ... for bad files
            failures.append((path, e))
            continue
        for bad, error in failures:
            if log is not None:
                log(
                    f"checkpoint {bad} is corrupt ({first_line(error, 160)}): resumed from the previous one, "
                    f"{path}"
                )
        return path
    if not failures:
        return None
    path, error = failures[0]
    raise ValueError(
        f"checkpoint {path!r} is corrupt or does not match this run (a damaged or missing piece; delete "
        f"{os.path.dirname(path)!r} to start over): {first_line(error)}"
        + (f" (and the {len(failures) - 1} older one(s) too)" if len(failures) > 1 else "")
    ) from error
