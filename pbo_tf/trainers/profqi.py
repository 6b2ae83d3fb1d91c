"""ProFQI (paper Algorithm 1, offline): learn a PBO from a fixed dataset and a fixed set W of parameters.

Loop (DESIGN §1)::

    for t in range(training_steps):        # outer steps: refresh the target operator
        φ̄ ← φ
        for e in range(epochs):
            for each batch W_b of a shuffled W:
                for each batch D_b of a full shuffled pass over the dataset:
                    one Adam step on pbo_loss(φ; W_b, D_b, φ̄)

Adam's learning rate is annealed linearly from ``lr_start`` to ``lr_end`` over all the gradient steps of
the run. Between two target refreshes the target chain ``Λ̄^{k−1}(ω)`` of the fixed set W does not change,
and neither do its Bellman targets on the fixed dataset: with ``cache_targets=True`` (default) they are
computed once per outer step for every (ω, transition) pair, ``[K, n_W, N]``, and each gradient step only
gathers its slice; ``cache_targets=False`` recomputes chain and targets at every step. Both give the same
loss (tested). One compiled call (nested `tf.range` loops) runs all the epochs of an outer step; a
checkpoint is written after each outer step. ``jit_compile=True`` compiles each gradient step with XLA
inside that loop; ``jit_compile="outer"`` compiles the whole loop, every epoch of the outer step, as one
XLA program (on the 2-core CPU 1.4-1.8x faster per car-on-hill step than XLA on the step alone, whose
per-step launch from TensorFlow's loop cost as much as the step's arithmetic; `launch/benchmark.py`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

from pbo_tf.data.transitions import gather_batch, seeded_permutation
from pbo_tf.losses import chain_targets, pbo_loss, target_chain
from pbo_tf.operators.base import PBO
from pbo_tf.trainers.base import OfflineTrainer, ProgressTimer, data_seed, linear_schedule

JIT_MODES = (False, True, "outer")


class ProFQITrainer(OfflineTrainer):
    """Trains ``pbo`` with the PBO loss; see the module docstring.

    Args:
      pbo: the operator to train (its weights are updated in place).
      target_pbo: a second instance of the same operator, used as the frozen target ``φ̄``.
      q_family, dataset, dataset_size, gamma, batch_size, seed, checkpoint_dir, summary_dir, log: see
        `OfflineTrainer`.
      jit_compile: False (graph mode), True (XLA on each gradient step) or ``"outer"`` (XLA on the whole
        outer step's loop).
      param_set: the set W, ``[n_W, d]``.
      K: number of Bellman iterations in the loss.
      epochs: epochs per outer step.
      training_steps: outer steps (target refreshes).
      w_batch_size: parameters per gradient step (must divide n_W).
      lr_start, lr_end: linear learning-rate schedule over the whole run.
      normalisation, stop_gradient_between, fixed_point_term: options of `pbo_loss`.
      cache_targets: compute the target chain's Bellman targets on the whole dataset once per outer step
        (True) or the chain and the batch's targets at every step (False).
    """

    def __init__(
        self,
        pbo: PBO,
        target_pbo: PBO,
        q_family,
        dataset: tf.data.Dataset,
        dataset_size: int,
        param_set: np.ndarray,
        K: int,
        gamma: float,
        *,
        epochs: int,
        training_steps: int,
        batch_size: int,
        w_batch_size: int,
        lr_start: float,
        lr_end: float,
        seed: int,
        normalisation: str = "mean",
        stop_gradient_between: bool = False,
        fixed_point_term: bool = False,
        cache_targets: bool = True,
        checkpoint_dir: str | None = None,
        summary_dir: str | None = None,
        log=print,
        jit_compile: bool | str = False,
    ):
        if jit_compile not in JIT_MODES:
            raise ValueError(f"jit_compile must be one of {JIT_MODES}, got {jit_compile!r}")
        super().__init__(
            q_family,
            dataset,
            dataset_size,
            K,
            gamma,
            batch_size,
            seed,
            checkpoint_dir,
            summary_dir,
            log,
            jit_compile,
        )
        if pbo.d != q_family.d or target_pbo.d != q_family.d:
            raise ValueError(
                f"PBO size mismatch: the operator acts on d={pbo.d} parameters but the Q family "
                f"{type(q_family).__name__} has d={q_family.d}"
            )
        param_set = np.asarray(param_set, dtype=np.float32)
        if param_set.ndim != 2 or param_set.shape[1] != q_family.d:
            raise ValueError(f"param_set must be [n_W, {q_family.d}], got {list(param_set.shape)}")
        n_w = param_set.shape[0]
        if w_batch_size < 1 or n_w % w_batch_size:
            raise ValueError(f"w_batch_size={w_batch_size} must divide the size of W ({n_w})")
        for name, value in (("epochs", epochs), ("training_steps", training_steps)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.pbo, self.target_pbo = pbo, target_pbo
        self.param_set = tf.constant(param_set)
        self.n_w, self.w_batch_size = n_w, int(w_batch_size)
        self.w_batches = n_w // self.w_batch_size
        self.epochs, self.training_steps = int(epochs), int(training_steps)
        self.steps_per_epoch = self.w_batches * self.batches_per_pass
        self.total_steps = self.training_steps * self.epochs * self.steps_per_epoch
        self.loss_options = dict(
            gamma=self.gamma,
            normalisation=normalisation,
            stop_gradient_between=stop_gradient_between,
            fixed_point_term=fixed_point_term,
        )
        self.cache_targets = bool(cache_targets)

        pbo.ensure_built()
        target_pbo.ensure_built()
        self.optimizer = tf_keras.optimizers.Adam(linear_schedule(lr_start, lr_end, self.total_steps))
        self.optimizer.build(pbo.trainable_variables)
        self.completed_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="training_steps_done")
        self.manager = self.make_checkpoint_manager(
            pbo=pbo, optimizer=self.optimizer, training_steps_done=self.completed_steps
        )
        self.compile_outer = jit_compile == "outer"
        self._run_outer = tf.function(self._run_outer_step, jit_compile=True if self.compile_outer else None)
        self._grad_step = (
            tf.function(self._gradient_step, jit_compile=True) if self.compile_step else self._gradient_step
        )

    @property
    def compile_step(self) -> bool:
        """Whether each gradient step is its own XLA program (``jit_compile=True``)."""
        return self.jit_compile and not self.compile_outer

    # -------------------------------------------------------------------------------- compiled parts
    def _gradient_step(self, w_batch, batch, chain_batch, targets_batch):
        with tf.GradientTape() as tape:
            loss, _ = pbo_loss(
                self.pbo,
                self.q_family,
                w_batch,
                batch,
                chain_batch,
                targets=targets_batch,
                **self.loss_options,
            )
        variables = self.pbo.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    def _w_batch_indices(self, epoch, w_batch_index):
        # seeded_permutation draws the same order in graph mode and under XLA (stateless_uniform does not),
        # so a run can switch jit_compile modes, or resume in another one, and keep its W batches.
        order = seeded_permutation(self.n_w, data_seed(self.seed, epoch))
        # tf.slice with a constant size keeps the shape static under XLA (a strided slice with tensor
        # bounds gives a bounded dynamic shape, which XLA pads and JAX's importer of the HLO refuses).
        start = tf.cast(w_batch_index * self.w_batch_size, tf.int32)
        return tf.slice(order, tf.reshape(start, [1]), [self.w_batch_size])

    def dataset_targets(self, chain):
        """Bellman targets of the chain on every transition, ``[K, n_W, N]`` (computed in chunks)."""
        chunk = max(1, min(self.dataset_size, 2**22 // max(1, self.K * self.n_w * self.q_family.n_actions)))
        parts = []
        for start in range(0, self.dataset_size, chunk):
            part = {name: value[start : start + chunk] for name, value in self.data.items()}
            parts.append(chain_targets(self.q_family, chain, part, self.gamma))
        return tf.concat(parts, axis=2)

    def _run_outer_step(self, first_epoch, chain):
        """All the gradient steps of one outer step in one compiled loop; returns their losses."""
        return run_outer_loop(
            [self], lambda w, b, c, t: self._grad_step(w[0], b[0], c[0], t[0]), [first_epoch], [chain]
        )

    # ------------------------------------------------------------------------------------- public
    def sync_target(self) -> None:
        """``φ̄ ← φ``."""
        for t, s in zip(self.target_pbo.weights, self.pbo.weights, strict=True):
            t.assign(s)

    @property
    def steps_done(self) -> int:
        """Outer steps completed (restored from the checkpoint on resume)."""
        return int(self.completed_steps.numpy())

    def begin_outer_step(self, outer: int) -> tuple[tf.Tensor, tf.Tensor]:
        """``φ̄ ← φ`` and the frozen chain of outer step ``outer``: the arguments of `_run_outer_step`."""
        self.sync_target()
        chain = target_chain(self.target_pbo, self.param_set, self.K)
        return tf.constant(outer * self.epochs, tf.int64), chain

    def record_losses(self, outer: int, losses: np.ndarray) -> np.ndarray:
        """Checks outer step ``outer``'s step losses for divergence and writes their per-epoch means as
        summaries; returns those means."""
        self.check_finite(losses, f"training step {outer + 1} (seed {self.seed})")
        per_epoch = losses.reshape(self.epochs, self.steps_per_epoch).mean(axis=1)
        for e, value in enumerate(per_epoch):
            self.write_scalars(outer * self.epochs + e, profqi_loss=value)
        return per_epoch

    def end_outer_step(self, outer: int, losses: np.ndarray, elapsed: float, share: int = 1) -> list[float]:
        """Checks, logs, summarises and checkpoints outer step ``outer``; returns its per-epoch losses.

        ``elapsed`` is the wall time of the call that ran it, shared by ``share`` seeds trained together.
        """
        per_epoch = self.record_losses(outer, losses)
        self.completed_steps.assign(outer + 1)
        self.save_checkpoint(outer + 1, elapsed / share)
        lr = float(self.optimizer.learning_rate.numpy())
        self.log(
            f"ProFQI training step {outer + 1}/{self.training_steps}: loss {per_epoch[-1]:.4g} "
            f"(first epoch {per_epoch[0]:.4g}), lr {lr:.3g}, "
            f"{losses.size / max(elapsed, 1e-9):.0f} gradient steps/s"
        )
        return per_epoch.tolist()

    def _stop(self, max_training_steps: int | None) -> int:
        start = self.steps_done
        if max_training_steps is None:
            return self.training_steps
        return min(self.training_steps, start + max_training_steps)

    def train(self, max_training_steps: int | None = None) -> list[float]:
        """Runs (or resumes) training; returns the mean loss of every epoch run in this call.

        Args:
          max_training_steps: stop after this many outer steps in this call (a budget slice; the next call,
            or a new trainer on the same checkpoint_dir, continues where it stopped).
        """
        epoch_losses: list[float] = []
        start = self.steps_done
        if start >= self.training_steps:
            self.log(f"ProFQI: all {self.training_steps} training steps already done")
        timer = ProgressTimer()
        for outer in range(start, self._stop(max_training_steps)):
            losses = self._run_outer(*self.begin_outer_step(outer)).numpy()
            epoch_losses += self.end_outer_step(outer, losses, timer.lap())
        return epoch_losses


def run_outer_loop(trainers, step, first_epochs, chains) -> tf.Tensor:
    """The gradient steps of one outer step of ``trainers`` (one seed, or S seeds stepped together), for use
    inside a `tf.function`: nested `tf.range` loops over epochs, W batches and dataset batches.

    Each trainer draws its own W batch and data order from its seed. ``step(ws, batches, chains, targets)``
    takes the S trainers' step inputs as lists (``chains[i]`` is None with cached targets, ``targets[i]``
    None without) and returns the loss: a scalar, or ``[S]``. Returns the losses of every step, stacked.
    """
    t0, seeds = trainers[0], range(len(trainers))
    cached = [trainers[s].dataset_targets(chains[s]) if trainers[s].cache_targets else None for s in seeds]
    losses = tf.TensorArray(tf.float32, size=t0.epochs * t0.steps_per_epoch)
    i = tf.constant(0)
    for e in tf.range(t0.epochs, dtype=tf.int64):
        for wb in tf.range(t0.w_batches, dtype=tf.int64):
            w_idx = [trainers[s]._w_batch_indices(first_epochs[s] + e, wb) for s in seeds]
            ws = [tf.gather(trainers[s].param_set, w_idx[s]) for s in seeds]
            indices = [trainers[s].pass_indices(first_epochs[s] + e, wb) for s in seeds]
            for b in tf.range(t0.batches_per_pass):
                batches = [gather_batch(trainers[s].data, indices[s][b]) for s in seeds]
                step_chains = [
                    None if trainers[s].cache_targets else target_chain(trainers[s].target_pbo, ws[s], t0.K)
                    for s in seeds
                ]
                targets = [
                    tf.gather(tf.gather(cached[s], indices[s][b], axis=2), w_idx[s], axis=1)
                    if trainers[s].cache_targets
                    else None
                    for s in seeds
                ]
                losses = losses.write(i, step(ws, batches, step_chains, targets))
                i += 1
    return losses.stack()
