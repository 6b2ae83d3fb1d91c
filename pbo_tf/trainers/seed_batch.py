"""Seeds as a batch axis: train S independent single-seed trainers inside one compiled graph.

Each seed keeps its own trainer (its own dataset, set W, initialisation, data order, optimizer and
checkpoints), so its results are those of a separate single-seed run with the same seed (tested to float
tolerance). What is shared is the compiled program: one `tf.function` holds the S seeds' loops of an outer
step (ProFQI) or an iteration (FQI) side by side, so one call dispatches all of them and TensorFlow runs the
independent loops concurrently on the available cores instead of one after the other.

Resume: each seed checkpoints after every outer step / iteration. A batch killed between two seeds' saves
restarts with some seeds one step behind; those catch up alone first, then the batch continues together.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from pbo_tf.trainers.base import ProgressTimer
from pbo_tf.trainers.fqi import FQITrainer
from pbo_tf.trainers.profqi import ProFQITrainer


def _check_same(trainers: Sequence, attributes: Sequence[str]) -> None:
    if not trainers:
        raise ValueError("need at least one trainer")
    for name in attributes:
        values = {getattr(t, name) for t in trainers}
        if len(values) > 1:
            raise ValueError(f"the batched trainers must share {name}, got {sorted(values)}")


def train_profqi_seeds(trainers: Sequence[ProFQITrainer], log=print) -> list[list[float]]:
    """Runs (or resumes) S ProFQI trainers together; returns each seed's per-epoch losses of this call."""
    _check_same(trainers, ("training_steps", "epochs", "steps_per_epoch"))
    done = [t.steps_done for t in trainers]
    losses: list[list[float]] = [[] for _ in trainers]
    for i, t in enumerate(trainers):  # catch up seeds left one step behind by a kill
        if done[i] < max(done):
            losses[i] += t.train(max_training_steps=max(done) - done[i])

    @tf.function
    def run_all(firsts, chains):
        return [t._run_outer(f, c) for t, f, c in zip(trainers, firsts, chains, strict=True)]

    timer = ProgressTimer()
    training_steps = trainers[0].training_steps
    for outer in range(max(done), training_steps):
        firsts, chains = zip(*(t.begin_outer_step(outer) for t in trainers), strict=True)
        outputs = run_all(list(firsts), list(chains))
        elapsed = timer.lap()
        for i, (t, out) in enumerate(zip(trainers, outputs, strict=True)):
            losses[i] += t.end_outer_step(outer, out.numpy(), elapsed, share=len(trainers))
        if log is not None:
            steps = sum(int(np.size(o)) for o in outputs)
            log(
                f"ProFQI × {len(trainers)} seeds: training step {outer + 1}/{training_steps}, "
                f"{steps / max(elapsed, 1e-9):.0f} gradient steps/s over all seeds"
            )
    return losses


def train_fqi_seeds(trainers: Sequence[FQITrainer], log=print) -> list[np.ndarray]:
    """Runs (or resumes) S FQI trainers together; returns each seed's iterates ``[K + 1, d]``.

    Each seed keeps its own early stopping: its loop ends when it stops improving, the others go on.
    """
    _check_same(trainers, ("K",))
    done = [t.steps_done for t in trainers]
    for i, t in enumerate(trainers):
        if done[i] < max(done):
            timer = ProgressTimer()
            for k in range(done[i], max(done)):
                t.end_iteration(k, t._iteration(*t.begin_iteration(k)), timer.lap())

    @tf.function
    def run_all(iterations, targets):
        return [t._iteration(k, p) for t, k, p in zip(trainers, iterations, targets, strict=True)]

    timer = ProgressTimer()
    K = trainers[0].K
    for k in range(max(done), K):
        iterations, targets = zip(*(t.begin_iteration(k) for t in trainers), strict=True)
        outputs = run_all(list(iterations), list(targets))
        elapsed = timer.lap()
        for t, out in zip(trainers, outputs, strict=True):
            t.end_iteration(k, out, elapsed, share=len(trainers))
        if log is not None:
            log(f"FQI × {len(trainers)} seeds: iteration {k + 1}/{K} in {elapsed:.1f}s")
    return [t.iterates.numpy() for t in trainers]
