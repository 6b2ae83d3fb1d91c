"""ProFQI (paper Algorithm 1, offline): learn a PBO from a fixed dataset and a fixed set W of parameters.

The loop, in the paper's order (its "#epochs" E is ``refreshes``, its "#training steps" is
``passes_per_refresh``)::

    for r in range(refreshes):                       # target refreshes (the paper's E epochs)
        φ̄ ← φ
        for p in range(passes_per_refresh):          # passes over D between two refreshes
            for each batch W_b of a shuffled W:
                for each batch D_b of a shuffled pass over the dataset:
                    one Adam step on pbo_loss(φ; W_b, D_b, φ̄)

Car-on-hill (E = 1000, 10 passes, 11 batches of D, one batch of W): the target is refreshed every 110
gradient steps, 1000 times. Adam's learning rate is annealed linearly (``optimizer``, an
`pbo_tf.optimizers.AnnealedAdam`, from its ``lr_start`` to its ``lr_end``); the
schedule's length is counted as the reference implementation counts it (refreshes × passes × batches of
D, not multiplied by the batches of W; with several W batches the rate reaches ``lr_end`` early and stays
there), or over every Adam step with ``lr_schedule_counts_w_batches=True``.

Between two refreshes the target chain ``Λ̄^{k−1}(ω)`` of the fixed set W does not change, and neither do
its Bellman targets on the fixed dataset: with ``cache_targets=True`` (default) they are computed once per
refresh for every (ω, transition) pair, ``[K, n_W, N]``, and each gradient step gathers its slice;
``cache_targets=False`` recomputes chain and targets at every step. Both give the same loss (tested).
With ``omega0_chain_rows = n`` every W batch also holds ω₀'s chain points ``Λ̄^j(ω₀)``, j = 1..n, of the
refresh's target (fixed during the refresh, their chain and targets computed as W's), so the loss is also
taken along ω₀'s own chain, where the operator is applied.

One compiled call runs all the passes between two refreshes (nested `tf.range` loops).
``jit_compile=True`` compiles each gradient step with XLA inside that loop; ``jit_compile="round"``
compiles the whole refresh, every pass of it, as one XLA program (faster on CPU and GPU: the per-step
launch from TensorFlow's loop costs as much as a small step's arithmetic). Checkpoints are written every
``checkpoint_every_s`` seconds and at the end of a `train` call; a resumed run replays exactly the steps
an uninterrupted one would have taken (data order and W batches are functions of the seed and counters).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

from pbo_tf.configs import ProFQIConfig
from pbo_tf.data.transitions import gather_batch, seeded_permutation
from pbo_tf.learner import PBOLearner
from pbo_tf.loss_terms import chain_targets, progress_text, summary_scalars
from pbo_tf.operators.base import PBO
from pbo_tf.optimizers import (
    AnnealedAdam,
    build_optimizer,
    check_optimizer,
    current_learning_rate,
    resolve_optimizer,
)
from pbo_tf.trainers.base import OfflineTrainer
from pbo_tf.utils import data_seed


class ProFQITrainer(OfflineTrainer):
    """Trains ``pbo`` with the PBO loss; see the module docstring.

    Args:
      config: the hyper-parameters (`pbo_tf.configs.ProFQIConfig`: K, refreshes, passes per refresh, W's
        batch, the learning-rate schedule's length, compilation, the loss terms, target caching, the
        monitor's period, the checkpoint and progress periods).
      pbo: the operator to train (its weights are updated in place).
      target_pbo: a second instance of the same operator, used as the frozen target ``φ̄``.
      q_family, dataset, gamma, seed, checkpoint_dir, summary_dir, log: see `OfflineTrainer`.
      w_set: the set W, ``[n_W, d]`` (``n_W = config.w_size``).
      optimizer: an `pbo_tf.optimizers.AnnealedAdam` (Adam with its learning rate annealed linearly over
        the run, ``lr_schedule_steps`` Adam steps) or a tf_keras optimizer, used with its own learning rate
        (``lr_schedule`` is then None).
      omega0: ``[d]`` the start of the curve, ω₀ (needed by a `pbo_tf.loss_terms.FixedPointTerm` estimate).
      monitor: ``monitor(pbo) -> (scalars, text)``, what the operator does now (e.g. its active units and
        spread over W: `pbo_tf.evaluation.operator_activity`), called through the learner every
        ``config.monitor_every`` refreshes and after the last; the scalars go to TensorBoard with the
        learning rate and the text into the progress line. None: the learning rate only.
    """

    def __init__(
        self,
        *,
        config: ProFQIConfig,
        pbo: PBO,
        target_pbo: PBO,
        q_family,
        dataset: tf.data.Dataset,
        w_set: np.ndarray,
        gamma: float,
        optimizer: AnnealedAdam | tf_keras.optimizers.Optimizer,
        seed: int,
        omega0: np.ndarray | None = None,
        monitor=None,
        checkpoint_dir: str | None = None,
        summary_dir: str | None = None,
        log=print,
    ):
        check_optimizer(optimizer)
        super().__init__(
            config=config, q_family=q_family, dataset=dataset, gamma=gamma, seed=seed,
            checkpoint_dir=checkpoint_dir, summary_dir=summary_dir, log=log,
        )  # fmt: skip
        self.learner = PBOLearner(
            pbo=pbo, target_pbo=target_pbo, q_family=q_family, w_set=w_set, K=config.K, gamma=self.gamma,
            loss_terms=config.loss_terms, omega0=omega0, omega0_chain_rows=config.omega0_chain_rows,
            monitor=monitor,
        )  # fmt: skip
        w_size = self.learner.w_size
        if w_size != config.w_size:
            raise ValueError(f"the set W has {w_size} rows but ProFQIConfig.w_size is {config.w_size}")
        self.w_set = self.learner.w_set
        self.omega0_chain_rows = self.learner.omega0_chain_rows
        self.w_size, self.w_batch_size = w_size, config.w_batch_size or w_size
        self.w_batches = w_size // self.w_batch_size
        self.passes_per_refresh = config.passes_per_refresh
        self.steps_per_pass = self.w_batches * self.batches_per_pass
        self.schedule = self.schedule.with_steps_per_refresh(self.passes_per_refresh * self.steps_per_pass)
        # the reference's count ignores the W batches (ProFQIConfig.lr_schedule_counts_w_batches)
        self.lr_schedule_steps = self.total_steps // (
            1 if config.lr_schedule_counts_w_batches else self.w_batches
        )
        self.cache_targets = config.cache_targets
        self.monitor_every = config.monitor_every
        self.monitor_text = ""  # the latest monitor text, for the progress line
        self._probe_metrics = None

        self.optimizer, self.lr_schedule = resolve_optimizer(optimizer, self.lr_schedule_steps)
        build_optimizer(self.optimizer, pbo.trainable_variables)
        self.manager = self.make_checkpoint_manager(
            pbo=pbo, optimizer=self.optimizer, refreshes_done=self._rounds_done
        )
        self.run_round = tf.function(
            self.refresh, jit_compile=True if self.compile_round else None, autograph=False
        )
        self.gradient_step = (
            tf.function(self._gradient_step, jit_compile=True, autograph=False)
            if self.compile_step
            else self._gradient_step
        )

    # -------------------------------------------------------------------------------- compiled parts
    def _gradient_step(self, w_batch, batch, chain_batch, targets_batch):
        with tf.GradientTape() as tape:
            loss, _ = self.learner.loss(w_batch, batch, chain_batch, targets=targets_batch)
        variables = self.pbo.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    def w_batch_indices(self, pass_index, w_batch_index):
        """Rows of W of batch ``w_batch_index`` in pass ``pass_index`` (counted over the whole run)."""
        # seeded_permutation draws the same order in graph mode and under XLA (stateless_uniform does not),
        # so a run can switch jit_compile modes, or resume in another one, and keep its W batches.
        order = seeded_permutation(self.w_size, data_seed(self.seed, pass_index))
        # tf.slice with a constant size keeps the shape static under XLA (a strided slice with tensor
        # bounds gives a bounded dynamic shape, which XLA pads and JAX's importer of the HLO refuses).
        start = tf.cast(w_batch_index * self.w_batch_size, tf.int32)
        return tf.slice(order, tf.reshape(start, [1]), [self.w_batch_size])

    def dataset_targets(self, chain):
        """Bellman targets of the chain of the training rows on every transition, ``[K, n_W + n, N]`` (n: ω₀'s
        chain rows, `pbo_tf.learner.PBOLearner.training_rows`).

        Computed chunk by chunk in a loop (`tf.map_fn` with one iteration at a time, a while loop under
        XLA), so the memory peak is one chunk's Q evaluations whatever the dataset size."""
        rows = self.learner.rows_size
        chunk = max(1, min(self.dataset_size, 2**22 // max(1, self.K * rows * self.q_family.n_actions)))
        n_chunks = -(-self.dataset_size // chunk)
        padding = n_chunks * chunk - self.dataset_size
        chunked = {  # [n_chunks, chunk, ...]: the last chunk padded with copies of the first transitions
            name: tf.reshape(
                tf.concat([value, value[:padding]], axis=0) if padding else value,
                [n_chunks, chunk, *value.shape[1:]],
            )
            for name, value in self.data.items()
        }
        parts = tf.map_fn(
            lambda part: chain_targets(self.q_family, chain, part, self.gamma),
            chunked,
            fn_output_signature=tf.TensorSpec([self.K, rows, chunk], tf.float32),
            parallel_iterations=1,
        )  # [n_chunks, K, n_W + n, chunk]
        targets = tf.reshape(tf.transpose(parts, [1, 2, 0, 3]), [self.K, rows, n_chunks * chunk])
        return targets[:, :, : self.dataset_size]

    def refresh(self, first_pass):
        """One refresh, uncompiled (`run_round` is its compiled form): ``φ̄ ← φ``, the frozen target chain
        ``Λ̄^{k−1}`` of W (and of ω₀'s chain rows), then the passes of `refresh_loop`. Returns their
        ``[steps_per_refresh]`` losses."""
        self.learner.sync_target(progress=self.progress(first_pass))
        return self.refresh_loop(first_pass, self.learner.frozen_chain())

    def refresh_loop(self, first_pass, chain):
        """The gradient steps between two refreshes, given the frozen chain (uncompiled).

        Args:
          first_pass: int64 index, over the whole run, of the refresh's first pass.
          chain: the frozen target chain ``Λ̄^{k−1}`` of the training rows, ``[K, n_W + n, d]``
            (`pbo_tf.learner.PBOLearner.frozen_chain`).

        Returns:
          ``[steps_per_refresh]`` losses.
        """
        return run_refresh_loop(
            [self], lambda w, b, c, t: self.gradient_step(w[0], b[0], c[0], t[0]), [first_pass], [chain]
        )

    # ------------------------------------------------------------------------------------- public
    @property
    def pbo(self) -> PBO:
        """The operator being trained (the learner's)."""
        return self.learner.pbo

    @property
    def target_pbo(self) -> PBO:
        """The frozen target operator (the learner's)."""
        return self.learner.target_pbo

    algorithm, round_name, rounds_name = "ProFQI", "refresh", "refreshes"

    @property
    def num_rounds(self) -> int:
        return self.refreshes

    def progress(self, first_pass) -> tf.Tensor:
        """The fraction of the run's refreshes done before the refresh whose first pass is ``first_pass``."""
        return tf.cast(first_pass, tf.float32) / float(self.refreshes * self.passes_per_refresh)

    def first_pass(self, refresh: int) -> tf.Tensor:
        """The index over the whole run of refresh ``refresh``'s first pass."""
        return tf.constant(refresh * self.passes_per_refresh, tf.int64)

    def begin_round(self, r: int) -> tuple:
        return (self.first_pass(r),)

    def end_round(self, r: int, outputs, elapsed: float, share: int = 1) -> list[float]:
        """Checks refresh ``r``'s step losses for divergence, writes the last pass's mean loss as a summary
        and counts the refresh as done; returns the per-pass mean losses."""
        losses = np.asarray(outputs)
        self.check_finite(losses, f"refresh {r + 1} (seed {self.seed})")
        per_pass = losses.reshape(self.passes_per_refresh, self.steps_per_pass).mean(axis=1)
        scalars = {"profqi_loss": per_pass[-1], "learning_rate": self.learning_rate()}
        if (r + 1) % self.monitor_every == 0 or r + 1 == self.refreshes:
            monitored = self.learner.monitor()
            if monitored is not None:
                scalars.update(monitored[0])
                self.monitor_text = monitored[1]
            self.loss_metrics = self.probe_loss_metrics()
            scalars.update(summary_scalars(self.loss_metrics))
        self.write_scalars(r + 1, **scalars)
        self._rounds_done.assign(r + 1)
        self.train_seconds += float(elapsed) / share
        return per_pass.tolist()

    def round_steps(self, outputs) -> int:
        return self.steps_per_refresh

    def probe_loss_metrics(self) -> dict[str, float]:
        """The loss terms' metrics (`pbo_tf.loss_terms.combine_terms`) at the current ``φ`` and ``φ̄`` on a
        fixed probe: every training row (W and ω₀'s chain rows) and the first batch of the run's first pass
        over the dataset. Written to TensorBoard (``loss_terms/<metric>``), the progress line and
        ``metrics.json`` every ``monitor_every`` refreshes and after the last."""
        if self._probe_metrics is None:
            batch = gather_batch(
                self.data, self.pass_indices(tf.constant(0, tf.int64), tf.constant(0, tf.int64))[0]
            )

            def probe():
                return self.learner.loss(self.learner.training_rows(), batch, self.learner.frozen_chain())[1]

            self._probe_metrics = tf.function(probe, autograph=False)
        return {key: float(value) for key, value in self._probe_metrics().items()}

    def diagnose(self) -> str:
        """Names the first non-finite piece of the state: φ's weights, the operator's output ``Λ_φ^k(W)``
        (the smallest such k), the Q values of ``Λ_φ^k(W)``, or the fixed-point term's estimate ``Λ̄^N(ω₀)``
        or its Q values."""
        if not all(np.all(np.isfinite(w.numpy())) for w in self.pbo.weights):
            return "the operator's weights φ are non-finite"
        chain = self.pbo.chain(self.w_set, self.K).numpy()  # [K, n_W, d]
        for k in range(self.K):
            if not np.all(np.isfinite(chain[k])):
                return f"the operator's output Λ^{k + 1}(W) is non-finite"
        for k in range(self.K):
            found = self.nonfinite_q(tf.constant(chain[k]), f"Λ^{k + 1}(W)")
            if found:
                return found
        return self.learner.diagnose(self.nonfinite_q)

    def learning_rate(self) -> float:
        """The learning rate of Adam's last step (the schedule at that step)."""
        return current_learning_rate(self.optimizer)

    def progress_line(self, round_losses: list[float], steps_per_s: float) -> str:
        return (
            f"ProFQI refresh {self.rounds_done}/{self.refreshes}: loss {round_losses[-1]:.4g} "
            f"(first pass {round_losses[0]:.4g}), lr {self.learning_rate():.3g}, {steps_per_s:.0f} gradient "
            f"steps/s" + self._terms_and_monitor_text()
        )

    def _terms_and_monitor_text(self) -> str:
        terms = progress_text(self.learner.terms, self.loss_metrics)
        return "".join(f"; {text}" for text in (terms, self.monitor_text) if text)

    def seed_progress(self) -> str:
        """This seed's part of a batched run's progress line: its loss, and the monitor's text."""
        return f"seed {self.seed}: lr {self.learning_rate():.3g}" + self._terms_and_monitor_text()


def run_refresh_loop(trainers, step, first_passes, chains) -> tf.Tensor:
    """The gradient steps between two refreshes of ``trainers`` (one seed, or S seeds stepped together),
    for use inside a `tf.function`: nested `tf.while_loop` over passes, W batches and dataset batches
    (written out, so that the refresh traces without autograph).

    Each trainer draws its own W batch and data order from its seed; its learner's `batch_rows` appends ω₀'s
    chain rows to every W batch (``omega0_chain_rows``). ``step(ws, batches, chains, targets)``
    takes the S trainers' step inputs as lists (``chains[i]`` is None with cached targets, ``targets[i]``
    None without) and returns the loss: a scalar, or ``[S]``. Returns the losses of every step, stacked.
    """
    t0, seeds = trainers[0], range(len(trainers))
    rows = [trainers[s].learner.training_rows() for s in seeds]  # W (and ω₀'s chain rows), fixed here
    cached = [trainers[s].dataset_targets(chains[s]) if trainers[s].cache_targets else None for s in seeds]

    def batch_step(b, i, losses, w_idx, ws, indices):
        batches = [gather_batch(trainers[s].data, indices[s][b]) for s in seeds]
        step_chains = [
            None if trainers[s].cache_targets else trainers[s].learner.frozen_chain(w_idx[s]) for s in seeds
        ]
        targets = [
            tf.gather(tf.gather(cached[s], indices[s][b], axis=2), w_idx[s], axis=1)
            if trainers[s].cache_targets
            else None
            for s in seeds
        ]
        return b + 1, i + 1, losses.write(i, step(ws, batches, step_chains, targets))

    def w_batch(p, wb, i, losses):
        w_idx = [
            trainers[s].learner.batch_rows(trainers[s].w_batch_indices(first_passes[s] + p, wb))
            for s in seeds
        ]
        ws = [tf.gather(rows[s], w_idx[s]) for s in seeds]
        indices = [trainers[s].pass_indices(first_passes[s] + p, wb) for s in seeds]
        _, i, losses = tf.while_loop(
            lambda b, *_: b < t0.batches_per_pass,
            lambda b, i, losses: batch_step(b, i, losses, w_idx, ws, indices),
            (tf.constant(0), i, losses),
        )
        return wb + 1, i, losses

    def one_pass(p, i, losses):
        _, i, losses = tf.while_loop(
            lambda wb, *_: wb < t0.w_batches,
            lambda wb, i, losses: w_batch(p, wb, i, losses),
            (tf.constant(0, tf.int64), i, losses),
        )
        return p + 1, i, losses

    losses = tf.TensorArray(tf.float32, size=t0.steps_per_refresh)
    _, _, losses = tf.while_loop(
        lambda p, *_: p < t0.passes_per_refresh, one_pass, (tf.constant(0, tf.int64), tf.constant(0), losses)
    )
    return losses.stack()
