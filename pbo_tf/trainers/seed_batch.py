"""Seeds as a batch axis: train S independent single-seed trainers inside one compiled graph.

Each seed keeps its own trainer (its own dataset, set W, initialisation, data order, optimizer and
checkpoints), so its results are those of a separate single-seed run with the same seed (tested to float
tolerance). What is shared is the compiled program: one `tf.function` holds the S seeds' loops between two
target refreshes (ProFQI) or of an iteration (FQI) side by side, so one call dispatches all of them and
TensorFlow runs the independent loops concurrently on the available cores instead of one after the other.
ProFQI can go further (``seed_axis=True``): one compiled gradient step serves all S seeds, with the
operators' weights stacked over seeds, so the deep PBO's matmuls become batched matmuls over the seed axis;
that pays on accelerators, where one op per layer instead of S matters more, and not on a few CPU cores
(`launch/benchmark.py --cases=seeds` measures both).

Resume: ProFQI seeds checkpoint together on the trainers' time interval, FQI seeds after every iteration.
A batch killed between two seeds' saves restarts with some seeds behind; those catch up alone first, then
the batch continues together.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from pbo_tf.losses import pbo_loss
from pbo_tf.operators.base import chain_stacked
from pbo_tf.trainers.base import Every, ProgressTimer
from pbo_tf.trainers.fqi import FQITrainer
from pbo_tf.trainers.profqi import ProFQITrainer, run_refresh_loop


def _check_same(trainers: Sequence, attributes: Sequence[str]) -> None:
    if not trainers:
        raise ValueError("need at least one trainer")
    for name in attributes:
        values = {getattr(t, name) for t in trainers}
        if len(values) > 1:
            raise ValueError(f"the batched trainers must share {name}, got {sorted(values)}")


def stacked_gradient_step(trainers: Sequence[ProFQITrainer]):
    """One ProFQI gradient step of S seeds as one computation, ``(ws, batches, chains, targets) → [S]``
    losses (the arguments are per-seed lists, as `run_refresh_loop` gives them).

    The S operators' prediction chains run together (`chain_stacked`: batched matmuls over seeds for the
    deep PBO); each seed's loss is `pbo_loss` on its own slice of them, and each seed's own Adam applies its
    own gradients (a seed's loss depends on its own weights only, so the gradient of the sum is each seed's
    gradient). XLA-compiled when the trainers are on their gradient step (``jit_compile=True``); with
    ``jit_compile="outer"`` the caller compiles the loop around it instead.
    """
    _check_same(trainers, ("K", "w_batch_size", "jit_compile", "compile_outer"))
    if len({t.loss_options["stop_gradient_between"] for t in trainers}) > 1:
        raise ValueError("the batched trainers must share stop_gradient_between")
    pbos = [t.pbo for t in trainers]
    variables = [t.pbo.trainable_variables for t in trainers]
    stop_between = trainers[0].loss_options["stop_gradient_between"]

    def step(ws, batches, chains, targets):
        with tf.GradientTape() as tape:
            predicted = chain_stacked(pbos, tf.stack(ws), trainers[0].K, stop_between)  # [K, S, n_w, d]
            losses = []
            for s, t in enumerate(trainers):
                loss, _ = pbo_loss(
                    t.pbo, t.q_family, ws[s], batches[s], chains[s], targets=targets[s],
                    predicted=predicted[:, s], **t.loss_options,
                )  # fmt: skip
                losses.append(loss)
            total = tf.add_n(losses)
        grads = tape.gradient(total, [v for vs in variables for v in vs])
        start = 0
        for t, vs in zip(trainers, variables, strict=True):
            t.optimizer.apply_gradients(zip(grads[start : start + len(vs)], vs, strict=True))
            start += len(vs)
        return tf.stack(losses)

    return tf.function(step, jit_compile=True) if trainers[0].compile_step else step


def stacked_refresh_loop(trainers: Sequence[ProFQITrainer]):
    """``firsts → [steps, S]`` losses: one refresh of all S seeds (each ``φ̄ ← φ`` and frozen chain, then
    the passes through `stacked_gradient_step`) in one `tf.function` (one XLA program with
    ``jit_compile="outer"``); ``firsts`` are the seeds' `ProFQITrainer.first_pass`."""
    step = stacked_gradient_step(trainers)

    def refresh(firsts):
        for t in trainers:
            t.sync_target()
        return run_refresh_loop(trainers, step, firsts, [t.frozen_chain() for t in trainers])

    return tf.function(
        refresh,
        jit_compile=True if trainers[0].compile_outer else None,
    )


def train_profqi_seeds(
    trainers: Sequence[ProFQITrainer], log=print, seed_axis: bool = False
) -> list[list[float]]:
    """Runs (or resumes) S ProFQI trainers together; returns each seed's per-pass losses of this call.

    Args:
      trainers: one per seed.
      log: progress printer (None silences).
      seed_axis: step the seeds together, their operators stacked (`stacked_gradient_step`: one compiled
        step for all S). False (default) runs the S trainers' own loops side by side in one graph.
    """
    _check_same(trainers, ("refreshes", "passes_per_refresh", "steps_per_pass"))
    if seed_axis:
        _check_same(trainers, ("w_batches", "batches_per_pass"))
    done = [t.refreshes_done for t in trainers]
    losses: list[list[float]] = [[] for _ in trainers]
    for i, t in enumerate(trainers):  # catch up seeds left behind by a kill
        if done[i] < max(done):
            losses[i] += t.train(max_refreshes=max(done) - done[i])

    if seed_axis:
        stacked = stacked_refresh_loop(trainers)

        def run_all(firsts):
            return tf.unstack(stacked(firsts), len(trainers), axis=1)

    else:

        @tf.function
        def run_all(firsts):
            return [t.run_refresh(f) for t, f in zip(trainers, firsts, strict=True)]

    t0 = trainers[0]
    checkpoint_due, progress_due = Every(t0.checkpoint_every_s), Every(t0.progress_every_s)
    timer, window = ProgressTimer(), ProgressTimer()
    steps_in_window = 0
    for refresh in range(max(done), t0.refreshes):
        outputs = [out.numpy() for out in run_all([t.first_pass(refresh) for t in trainers])]
        elapsed = timer.lap()
        for i, (t, out) in enumerate(zip(trainers, outputs, strict=True)):
            losses[i] += t.end_refresh(refresh, out, elapsed, share=len(trainers)).tolist()
        steps_in_window += sum(out.size for out in outputs)
        last = refresh + 1 == t0.refreshes
        if checkpoint_due() or last:
            for t in trainers:
                t.checkpoint()
        if log is not None and (progress_due() or last):
            log(
                f"ProFQI × {len(trainers)} seeds: refresh {refresh + 1}/{t0.refreshes}, "
                f"{steps_in_window / max(window.lap(), 1e-9):.0f} gradient steps/s over all seeds"
            )
            steps_in_window = 0
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
                t.end_iteration(k, t.run_iteration(*t.begin_iteration(k)), timer.lap())

    @tf.function
    def run_all(iterations, targets):
        return [t.run_iteration(k, p) for t, k, p in zip(trainers, iterations, targets, strict=True)]

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
