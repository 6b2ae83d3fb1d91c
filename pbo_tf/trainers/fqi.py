"""Fitted Q-iteration (Ernst et al. 2005), the paper's offline baseline.

Iteration k fits ``Q_{ω_k}`` to the empirical Bellman targets ``ΓQ_{ω_{k−1}}`` by Adam on shuffled
mini-batches, starting from ``ω_{k−1}``; the optimizer state and the linear learning-rate schedule are
reset at every iteration (as in the reference), and the fit stops early after ``patience`` epochs without
an improvement of the epoch loss, or after ``max_epochs`` epochs. One compiled call runs a whole
iteration, early stopping included (a graph ``while`` loop over epochs, each a ``tf.range`` loop over
batches); a checkpoint is written after each iteration. ``jit_compile`` compiles the gradient step with
XLA, ``jit_compile="round"`` the whole iteration loop. The Bellman targets ``ΓQ_{ω_{k−1}}`` are fixed
during an iteration: with ``cache_targets=True`` (default) they are computed once per iteration on the whole
dataset and each gradient step gathers its batch's; ``cache_targets=False`` recomputes them at every step.
Both give the same iterates (tested).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

from pbo_tf.configs import FQIConfig
from pbo_tf.data.transitions import gather_batch
from pbo_tf.losses import fqi_loss
from pbo_tf.optimizers import (
    AnnealedAdam,
    build_optimizer,
    check_optimizer,
    optimizer_variables,
    resolve_optimizer,
)
from pbo_tf.trainers.base import OfflineTrainer


class FQITrainer(OfflineTrainer):
    """Runs K FQI iterations from ``initial_params``; ``iterates`` holds ``ω_0 .. ω_K``. Every argument is
    a keyword.

    Args:
      config: the hyper-parameters (`pbo_tf.configs.FQIConfig`: K, the epochs and patience of each
        iteration, the batch size, compilation, target caching, the checkpoint and progress periods).
      q_family, dataset, gamma, seed, checkpoint_dir, summary_dir, log: see `OfflineTrainer`.
      initial_params: ``ω_0``, ``[d]``.
      optimizer: an `pbo_tf.optimizers.AnnealedAdam` (Adam with its learning rate annealed linearly over
        each iteration's ``max_epochs`` epochs: ``lr_start``, ``lr_end``, ε and its placement) or a
        tf_keras optimizer, used with its own learning rate. Its state (step count and moments) is reset
        at every iteration, so a schedule restarts with each.
    """

    def __init__(
        self,
        *,
        config: FQIConfig,
        q_family,
        dataset: tf.data.Dataset,
        initial_params: np.ndarray,
        gamma: float,
        optimizer: AnnealedAdam | tf_keras.optimizers.Optimizer,
        seed: int,
        checkpoint_dir: str | None = None,
        summary_dir: str | None = None,
        log=print,
    ):
        check_optimizer(optimizer)
        super().__init__(
            config=config, q_family=q_family, dataset=dataset, gamma=gamma, seed=seed,
            checkpoint_dir=checkpoint_dir, summary_dir=summary_dir, log=log,
        )  # fmt: skip
        initial_params = np.asarray(initial_params, dtype=np.float32).reshape(-1)
        if initial_params.shape != (q_family.d,):
            raise ValueError(f"initial_params must have {q_family.d} entries, got {initial_params.shape}")
        self.max_epochs, self.patience = config.max_epochs, config.patience
        self.cache_targets = bool(config.cache_targets)
        self.params = tf.Variable(initial_params[None, :], name="q_params")
        self.iterates = tf.Variable(
            np.repeat(initial_params[None, :], self.K + 1, axis=0), trainable=False, name="iterates"
        )
        self.epochs_run = tf.Variable(np.zeros(self.K, np.int64), trainable=False, name="epochs_run")
        self.optimizer, _ = resolve_optimizer(optimizer, self.max_epochs * self.batches_per_pass)
        build_optimizer(self.optimizer, [self.params])
        self.manager = self.make_checkpoint_manager(
            params=self.params,
            iterates=self.iterates,
            iterations_done=self._rounds_done,
            epochs_run=self.epochs_run,
        )
        self.run_round = tf.function(
            self._run_iteration, jit_compile=True if self.compile_round else None, autograph=False
        )
        self._step = (
            tf.function(self._gradient_step, jit_compile=True, autograph=False)
            if self.compile_step
            else self._gradient_step
        )

    def _gradient_step(self, batch, target_params, targets):
        with tf.GradientTape() as tape:
            loss = fqi_loss(self.q_family, self.params, target_params, batch, self.gamma, targets=targets)
        self.optimizer.apply_gradients([(tape.gradient(loss, self.params), self.params)])
        return loss

    def _run_epoch(self, iteration, epoch, target_params, all_targets):
        """One shuffled pass over the dataset in one compiled loop; returns the mean batch loss."""
        indices = self.pass_indices(iteration, epoch)

        def batch_step(b, total):
            batch = gather_batch(self.data, indices[b])
            if all_targets is None:
                return b + 1, total + self._step(batch, target_params, None)
            return b + 1, total + self._step(batch, None, tf.gather(all_targets, indices[b], axis=1))

        _, total = tf.while_loop(
            lambda b, _: b < self.batches_per_pass, batch_step, (tf.constant(0), tf.constant(0.0))
        )
        return total / self.batches_per_pass

    def _run_iteration(self, iteration, target_params):
        """Fits one iteration with early stopping, in one compiled loop.

        Returns ``(epochs_run, best_epoch_loss, epoch_losses [max_epochs])`` (entries past
        ``epochs_run`` are 0).
        """
        all_targets = None  # [1, N]
        if self.cache_targets:
            data = self.data
            all_targets = self.q_family.bellman_targets(
                target_params, data["reward"], data["next_state"], data["done"], self.gamma
            )
        losses = tf.zeros([self.max_epochs], tf.float32)
        best = tf.constant(np.inf, tf.float32)
        since_best = tf.constant(0, tf.int64)

        def one_epoch(epoch, best, since_best, losses):
            loss = self._run_epoch(iteration, epoch, target_params, all_targets)
            losses = tf.tensor_scatter_nd_update(losses, tf.reshape(epoch, [1, 1]), tf.reshape(loss, [1]))
            since_best = tf.where(loss < best, tf.constant(0, tf.int64), since_best + 1)
            return epoch + 1, tf.minimum(best, loss), since_best, losses

        epoch, best, _, losses = tf.while_loop(
            lambda epoch, _, since_best, __: tf.logical_and(
                epoch < self.max_epochs, since_best < self.patience
            ),
            one_epoch,
            (tf.constant(0, tf.int64), best, since_best, losses),
        )
        return epoch, best, losses

    algorithm, round_name, rounds_name = "FQI", "iteration", "iterations"

    @property
    def num_rounds(self) -> int:
        return self.K

    def begin_round(self, k: int) -> tuple[tf.Tensor, tf.Tensor]:
        """Warm start from ``ω_k`` with a fresh optimizer; returns ``(k, ω_k [1, d])``."""
        target = tf.constant(self.iterates[k].numpy()[None, :])
        self.params.assign(target)
        self.reset_optimizer()
        return tf.constant(k, tf.int64), target

    def diagnose(self) -> str:
        """Names what is non-finite: the parameters being fitted, or their Q values."""
        params = self.params.numpy()
        if not np.all(np.isfinite(params)):
            return "the Q parameters ω are non-finite"
        return self.nonfinite_q(tf.constant(params), "ω")

    def end_round(self, k: int, outputs, elapsed: float, share: int = 1) -> list[float]:
        """Checks, logs and summarises iteration ``k + 1`` from `run_round`'s outputs and stores ``ω_{k+1}``;
        returns its epoch losses."""
        epochs, best, losses = (np.asarray(x) for x in outputs)
        epochs = int(epochs)
        losses = losses[:epochs]
        self.check_finite(losses, f"FQI iteration {k + 1} (seed {self.seed})")
        for epoch, loss in enumerate(losses):
            self.write_scalars(k * self.max_epochs + epoch, fqi_loss=float(loss))
        self.iterates[k + 1].assign(self.params[0])
        self.epochs_run[k].assign(epochs)
        self._rounds_done.assign(k + 1)
        self.train_seconds += float(elapsed) / share
        self.log(
            f"FQI iteration {k + 1}/{self.K}: {epochs} epochs, best epoch loss {float(best):.4g}, "
            f"{self.round_steps(outputs) / max(elapsed, 1e-9):.0f} gradient steps/s"
            + (f", {self.eta}" if self.eta else "")
        )
        return losses.tolist()

    @property
    def steps_done(self) -> int:
        """Gradient steps made so far: the epochs run times the batches per pass."""
        return int(np.sum(self.epochs_run.numpy())) * self.batches_per_pass

    def round_steps(self, outputs) -> int:
        return int(outputs[0]) * self.batches_per_pass

    def reset_optimizer(self) -> None:
        """Fresh Adam state and learning-rate schedule (iteration counter back to 0)."""
        for v in optimizer_variables(self.optimizer):
            v.assign(tf.zeros_like(v))
