"""ProFQI seeds on a seed axis: one compiled gradient step for S seeds, their operators stacked.

`pbo_tf.trainers.base.train_seeds` trains S seeds in one graph with their loops side by side; here the S
seeds go further and share each gradient step: the deep PBO's matmuls become batched matmuls over the seed
axis, one op per layer instead of S, which pays on accelerators more than on a few CPU cores. Each seed
keeps its own trainer (dataset, W, data order, optimizer, checkpoints), so its results are those of its own
single-seed run (tested to float tolerance).
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from pbo_tf.operators.base import chain_stacked
from pbo_tf.trainers.base import check_same
from pbo_tf.trainers.profqi import ProFQITrainer, run_refresh_loop


def stacked_gradient_step(trainers: Sequence[ProFQITrainer]):
    """One ProFQI gradient step of S seeds as one computation, ``(ws, batches, chains, targets) → [S]``
    losses (the arguments are per-seed lists, as `run_refresh_loop` gives them).

    The S operators' prediction chains run together (`chain_stacked`: batched matmuls over seeds for the
    deep PBO); each seed's loss is its learner's (`pbo_tf.learner.PBOLearner.loss`) on its own slice of
    them, and each seed's own Adam applies its own gradients (a seed's loss depends on its own weights only,
    so the gradient of the sum is each seed's gradient). XLA-compiled when the trainers are on their
    gradient step (``jit_compile=True``); with ``jit_compile="round"`` the caller compiles the loop around it
    instead.
    """
    check_same(trainers, ("K", "w_batch_size", "omega0_chain_rows", "jit_compile", "compile_round"))
    if len({t.learner.stop_gradient_between for t in trainers}) > 1:
        raise ValueError("the trainers trained together must share stop_gradient_between")
    pbos = [t.pbo for t in trainers]
    variables = [t.pbo.trainable_variables for t in trainers]
    stop_between = trainers[0].learner.stop_gradient_between

    def step(ws, batches, chains, targets):
        with tf.GradientTape() as tape:
            predicted = chain_stacked(pbos, tf.stack(ws), trainers[0].K, stop_between)  # [K, S, n_w, d]
            losses = []
            for s, t in enumerate(trainers):
                loss, _ = t.learner.loss(
                    ws[s], batches[s], chains[s], targets=targets[s], predicted=predicted[:, s]
                )
                losses.append(loss)
            total = tf.add_n(losses)
        grads = tape.gradient(total, [v for vs in variables for v in vs])
        start = 0
        for t, vs in zip(trainers, variables, strict=True):
            t.optimizer.apply_gradients(zip(grads[start : start + len(vs)], vs, strict=True))
            start += len(vs)
        return tf.stack(losses)

    return tf.function(step, jit_compile=True, autograph=False) if trainers[0].compile_step else step


def stacked_refresh_loop(trainers: Sequence[ProFQITrainer]):
    """``firsts → [steps, S]`` losses: one refresh of all S seeds (each ``φ̄ ← φ`` and frozen chain, then
    the passes through `stacked_gradient_step`) in one `tf.function` (one XLA program with
    ``jit_compile="round"``); ``firsts`` are the seeds' `ProFQITrainer.first_pass`."""
    step = stacked_gradient_step(trainers)

    def refresh(firsts):
        for t, first in zip(trainers, firsts, strict=True):
            t.learner.sync_target(progress=t.progress(first))
        return run_refresh_loop(trainers, step, firsts, [t.learner.frozen_chain() for t in trainers])

    return tf.function(
        refresh,
        jit_compile=True if trainers[0].compile_round else None,
        autograph=False,
    )


def seed_axis_rounds(trainers: Sequence[ProFQITrainer]):
    """The ``run_all`` of `pbo_tf.trainers.base.train_seeds` that steps S ProFQI seeds together on the seed
    axis (`stacked_refresh_loop`): ``[(first_pass,) per seed] -> [losses per seed]``."""
    check_same(trainers, ("w_batches", "batches_per_pass", "passes_per_refresh", "steps_per_pass"))
    stacked = stacked_refresh_loop(trainers)

    def run_all(args):
        return tf.unstack(stacked([a[0] for a in args]), len(trainers), axis=1)

    return run_all
