"""Iterated FQI (i-FQI), the reference code's iterated offline baseline: K Bellman iterations learned at once.

One `pbo_tf.q.multi_head.MultiHeadQ` with K + 1 heads; head k is fitted to the Bellman target of head
k − 1 under a frozen copy θ̄ of all the heads (`pbo_tf.losses.iterated_bellman_loss`), head 0 gets no term
and stays ``Q_0``. The loop is the reference's (``experiments/base/IFQI.py``): for each of ``refreshes``
rounds, ``θ̄ ← θ``, then ``passes_per_refresh`` shuffled passes over D, one Adam step per batch, with Adam's
learning rate annealed linearly over the whole run. The curve evaluates head k for k = 0..K; an iterated
method has no k > K.

A round is one compiled call (``jit_compile="round"``: one XLA program), as ProFQI's refresh is; the
targets ``ΓQ_{θ̄_{k−1}}`` are fixed during a round, so with ``cache_targets=True`` (default) they are
computed once per round on the whole dataset and each step gathers its batch's.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

from pbo_tf.configs import IFQIConfig
from pbo_tf.data.transitions import gather_batch
from pbo_tf.losses import iterated_bellman_loss
from pbo_tf.optimizers import (
    AnnealedAdam,
    build_optimizer,
    check_optimizer,
    current_learning_rate,
    resolve_optimizer,
)
from pbo_tf.q.multi_head import MultiHeadQ
from pbo_tf.trainers.base import OfflineTrainer


class IFQITrainer(OfflineTrainer):
    """i-FQI on a `tf.data.Dataset`; ``iterates()`` gives the heads ``ω_0 .. ω_K`` as ``q_family`` vectors.
    Every argument is a keyword.

    Args:
      config: the hyper-parameters (`pbo_tf.configs.IFQIConfig`: K, the refreshes and the passes between
        them, the batch size, compilation, target caching, the checkpoint and progress periods).
      q_family: the family of every head (e.g. `FlatMLPQ`); the trainer's own family is
        ``MultiHeadQ(q_family, K + 1)`` (`multi_q`).
      dataset, gamma, seed, checkpoint_dir, summary_dir, log: see `OfflineTrainer`.
      initial_params: the K + 1 heads' starting vectors, ``[K + 1, d]`` or flat ``[(K + 1) · d]``; head 0
        is ``ω_0``.
      optimizer: an `pbo_tf.optimizers.AnnealedAdam` (Adam with its learning rate annealed linearly over
        the run's ``refreshes × passes_per_refresh × batches per pass`` Adam steps) or a tf_keras optimizer,
        used with its own learning rate.

    Raises:
      TypeError: an ``optimizer`` that is neither an `AnnealedAdam` nor a tf_keras optimizer.
      ValueError: ``initial_params`` does not hold K + 1 heads of ``q_family.d``.
    """

    algorithm, round_name, rounds_name = "i-FQI", "refresh", "refreshes"

    def __init__(
        self,
        *,
        config: IFQIConfig,
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
        multi = MultiHeadQ(q_family, int(config.K) + 1)
        super().__init__(
            config=config, q_family=multi, dataset=dataset, gamma=gamma, seed=seed,
            checkpoint_dir=checkpoint_dir, summary_dir=summary_dir, log=log,
        )  # fmt: skip
        self.multi_q, self.base_q = multi, q_family
        initial_params = np.asarray(initial_params, np.float32)
        if initial_params.size != multi.d:
            raise ValueError(
                f"initial_params must hold K + 1 = {multi.n_heads} heads of {q_family.d} parameters "
                f"({multi.d} values), got shape {list(initial_params.shape)}"
            )
        self.passes_per_refresh = config.passes_per_refresh
        self.cache_targets = bool(config.cache_targets)
        self.schedule = self.schedule.with_steps_per_refresh(self.passes_per_refresh * self.batches_per_pass)
        self.params = tf.Variable(initial_params.reshape(1, multi.d), name="q_heads")
        self.optimizer, _ = resolve_optimizer(optimizer, self.total_steps)
        build_optimizer(self.optimizer, [self.params])
        self.manager = self.make_checkpoint_manager(
            params=self.params, optimizer=self.optimizer, refreshes_done=self._rounds_done
        )
        self.run_round = tf.function(
            self._run_refresh, jit_compile=True if self.compile_round else None, autograph=False
        )
        self._step = (
            tf.function(self._gradient_step, jit_compile=True, autograph=False)
            if self.compile_step
            else self._gradient_step
        )

    def iterates(self) -> np.ndarray:
        """The heads ``ω_0 .. ω_K`` of the current parameters, ``[K + 1, d]`` (``q_family`` vectors)."""
        return self.multi_q.heads(self.params).numpy()[0]

    # -------------------------------------------------------------------------------------- the round
    def _gradient_step(self, batch, target_params, targets):
        with tf.GradientTape() as tape:
            loss = iterated_bellman_loss(
                self.multi_q, self.params, batch, self.gamma, target_params=target_params, targets=targets
            )
        self.optimizer.apply_gradients([(tape.gradient(loss, self.params), self.params)])
        return loss

    def _run_refresh(self, first_pass):
        """``θ̄ ← θ``, then the refresh's passes in one compiled loop; returns every step's loss."""
        target = tf.identity(self.params)
        all_targets = None
        if self.cache_targets:
            data = self.data
            heads = self.multi_q.bellman_targets_heads(
                target, data["reward"], data["next_state"], data["done"], self.gamma
            )
            all_targets = heads[:, :-1]  # [1, K, N]: the targets of heads 1..K

        def batch_step(p, b, i, losses, indices):
            batch = gather_batch(self.data, indices[b])
            if all_targets is None:
                loss = self._step(batch, target, None)
            else:
                loss = self._step(batch, None, tf.gather(all_targets, indices[b], axis=2))
            return b + 1, i + 1, losses.write(i, loss)

        def one_pass(p, i, losses):
            indices = self.pass_indices(first_pass + p)
            _, i, losses = tf.while_loop(
                lambda b, *_: b < self.batches_per_pass,
                lambda b, i, losses: batch_step(p, b, i, losses, indices),
                (tf.constant(0), i, losses),
            )
            return p + 1, i, losses

        losses = tf.TensorArray(tf.float32, size=self.steps_per_refresh)
        _, _, losses = tf.while_loop(
            lambda p, *_: p < self.passes_per_refresh,
            one_pass,
            (tf.constant(0, tf.int64), tf.constant(0), losses),
        )
        return losses.stack()

    @property
    def num_rounds(self) -> int:
        return self.refreshes

    def begin_round(self, r: int) -> tuple:
        return (tf.constant(r * self.passes_per_refresh, tf.int64),)

    def end_round(self, r: int, outputs, elapsed: float, share: int = 1) -> list[float]:
        """Checks refresh ``r``'s step losses for divergence, writes the last pass's mean loss and counts
        the refresh as done; returns the per-pass mean losses."""
        losses = np.asarray(outputs)
        self.check_finite(losses, f"i-FQI refresh {r + 1} (seed {self.seed})")
        per_pass = losses.reshape(self.passes_per_refresh, self.batches_per_pass).mean(axis=1)
        self.write_scalars(r + 1, ifqi_loss=per_pass[-1], learning_rate=self.learning_rate())
        self._rounds_done.assign(r + 1)
        self.train_seconds += float(elapsed) / share
        return per_pass.tolist()

    def round_steps(self, outputs) -> int:
        return self.steps_per_refresh

    def learning_rate(self) -> float:
        """The learning rate of Adam's last step."""
        return current_learning_rate(self.optimizer)

    def progress_line(self, round_losses: list[float], steps_per_s: float) -> str:
        return (
            f"i-FQI refresh {self.rounds_done}/{self.refreshes}: loss {round_losses[-1]:.4g} "
            f"(first pass {round_losses[0]:.4g}), lr {self.learning_rate():.3g}, {steps_per_s:.0f} gradient "
            "steps/s"
        )

    def diagnose(self) -> str:
        """Names what is non-finite: the heads' parameters, or a head's Q values."""
        heads = self.iterates()
        for k, head in enumerate(heads):
            if not np.all(np.isfinite(head)):
                return f"the parameters of head {k} are non-finite"
        for k, head in enumerate(heads):
            found = self.nonfinite_q_of(head, f"head {k}")
            if found:
                return found
        return ""

    def nonfinite_q_of(self, head: np.ndarray, label: str) -> str:
        q = self.base_q.q_all(tf.constant(head[None]), self.data["state"][:1000]).numpy()
        return "" if np.all(np.isfinite(q)) else f"the Q values of {label} are non-finite"
