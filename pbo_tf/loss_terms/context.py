"""What a loss term sees at one gradient step (`LossContext`), and the chains of Eq. (3) it is built from.

For a batch ``W_b`` of parameters ``[n_w, d]`` and a batch ``D_b`` of ``B`` transitions, the context holds
the operator ``Λ_φ`` and its frozen target ``Λ_φ̄``, the Q family, the two batches, the discount, K, the
Bellman targets ``ΓQ_{Λ̄^{k−1}(ω)}`` of the frozen chain (given, or computed once on first use), the
prediction chain ``Λ_φ^k(ω)``, k = 1..K (computed once per gradient-stopping choice and shared by every term
that reads it), the run's progress and the weighted sum of the terms before the current one.
"""

from __future__ import annotations

import tensorflow as tf

from pbo_tf.operators.base import PBO, check_iterations, composed_chain
from pbo_tf.q.base import QFamily


def target_chain(target_pbo: PBO, params: tf.Tensor, K: int) -> tf.Tensor:
    """``Λ̄^{k−1}(ω)`` for ``k = 1..K`` with gradients stopped: ``[n_w, d] → [K, n_w, d]``."""
    return tf.stop_gradient(target_pbo.iterate(params, check_iterations(K) - 1))


def prediction_chain(apply, params: tf.Tensor, K: int, stop_gradient_between: bool = False) -> tf.Tensor:
    """``Λ_φ^k(ω)`` for ``k = 1..K``, differentiable: ``[…, n_w, d] → [K, …, n_w, d]``.

    ``apply`` is a `PBO` (its `PBO.chain`, which `DeepPBO` differentiates with one weight-gradient product
    per layer for the whole chain) or any one application of an operator, composed K times.
    ``stop_gradient_between`` stops the gradient between compositions.
    """
    if isinstance(apply, PBO):
        return apply.chain(params, K, stop_gradient_between)
    return composed_chain(apply, params, K, stop_gradient_between)


def chain_targets(q_family: QFamily, params_knd: tf.Tensor, batch, gamma: float) -> tf.Tensor:
    """Bellman targets ``ΓQ_{Λ̄^{k−1}(ω)}`` of a target chain on a batch: ``[K, n_w, d] → [K, n_w, B]``.

    While the target operator and W are fixed, these depend on nothing else: a trainer may compute them once
    for the whole dataset and pass slices to the loss as ``targets``.
    """
    k, n_w = tf.shape(params_knd)[0], tf.shape(params_knd)[1]
    flat = tf.reshape(params_knd, [-1, q_family.d])
    targets = q_family.bellman_targets(flat, batch["reward"], batch["next_state"], batch["done"], gamma)
    return tf.reshape(targets, [k, n_w, -1])


class LossContext:
    """One gradient step's inputs, as every loss term reads them.

    Attributes:
      pbo: the operator being trained, ``Λ_φ``.
      target_pbo: its frozen copy ``Λ_φ̄`` (None where the caller has none, e.g. `pbo_tf.losses.pbo_loss`).
      q_family: the Q family of the parameters.
      params: ``[n_w, d]`` the batch ``W_b`` of starting parameters ω.
      batch: dict of transition tensors ``state [B, …]``, ``action [B]``, ``reward [B]``,
        ``next_state [B, …]``, ``done [B]``.
      gamma: discount factor.
      K: Bellman iterations of Eq. (3).
      target_params: ``[K, n_w, d]`` the frozen chain ``Λ̄^{k−1}(ω)`` of the W batch, or None where the
        caller gave its Bellman targets instead.
      loss_so_far: the weighted sum of the terms before the one being called (set by `combine_terms`).
      learner: the `pbo_tf.learner.PBOLearner` whose loss this is (None for `pbo_tf.losses.pbo_loss`).

    Raises:
      ValueError: an operator of another size than the Q family's, neither or both of ``target_params``
        and ``targets``, or shapes that do not fit (naming them).
    """

    def __init__(
        self,
        *,
        pbo: PBO,
        q_family: QFamily,
        params: tf.Tensor,
        batch: dict,
        gamma: float,
        target_params: tf.Tensor | None = None,
        targets: tf.Tensor | None = None,
        predicted: tf.Tensor | None = None,
        predicted_stop_gradient_between: bool = False,
        target_pbo: PBO | None = None,
        progress: tf.Tensor | float = 0.0,
        learner=None,
    ):
        if pbo.d != q_family.d:
            raise ValueError(f"PBO acts on d={pbo.d} parameters but the Q family has d={q_family.d}")
        if (target_params is None) == (targets is None):
            raise ValueError("the loss needs exactly one of target_params and targets")
        given = tf.convert_to_tensor(target_params if targets is None else targets, tf.float32)
        what = "target_params [K, n_w, d]" if targets is None else "targets [K, n_w, B]"
        if given.shape.rank != 3 or given.shape[0] is None or given.shape[0] < 1:
            raise ValueError(f"{what} must be rank 3 with a static K >= 1, got {given.shape.as_list()}")
        self.K = int(given.shape[0])
        if predicted is not None and (
            predicted.shape.rank != 3 or predicted.shape[0] != self.K or predicted.shape[-1] != q_family.d
        ):
            raise ValueError(
                f"predicted must be the chain [K={self.K}, n_w, d={q_family.d}], "
                f"got {predicted.shape.as_list()}"
            )
        self.pbo, self.target_pbo, self.q_family = pbo, target_pbo, q_family
        self.params, self.batch, self.gamma = params, batch, float(gamma)
        self._progress = progress
        self.learner = learner
        self.loss_so_far: tf.Tensor = tf.zeros([])
        self.target_params = given if targets is None else None
        self._targets = None if targets is None else given
        self._chains = {} if predicted is None else {bool(predicted_stop_gradient_between): predicted}

    @property
    def progress(self) -> tf.Tensor:
        """The fraction of the run done at the last target refresh, a scalar (0 where the owner does not
        count it), read when a term asks for it."""
        return tf.convert_to_tensor(self._progress, tf.float32)

    @property
    def targets(self) -> tf.Tensor:
        """``[K, n_w, B]`` Bellman targets ``ΓQ_{Λ̄^{k−1}(ω)}`` of the frozen chain (gradient stopped)."""
        if self._targets is None:
            self._targets = chain_targets(self.q_family, self.target_params, self.batch, self.gamma)
        return tf.stop_gradient(self._targets)

    def prediction_chain(self, stop_gradient_between: bool = False) -> tf.Tensor:
        """``[K, n_w, d]`` the chain ``Λ_φ^k(ω)``, k = 1..K, of the W batch (computed once per choice of
        ``stop_gradient_between`` and shared by the terms)."""
        key = bool(stop_gradient_between)
        if key not in self._chains:
            self._chains[key] = prediction_chain(self.pbo, self.params, self.K, key)
        return self._chains[key]

    def q_sa(self, params: tf.Tensor) -> tf.Tensor:
        """``Q_ω(s, a)`` of the batch's pairs for every row of ``params`` ``[n, d]``: ``[n, B]``."""
        return self.q_family.q_sa(params, self.batch["state"], self.batch["action"])

    def bellman_targets(self, params: tf.Tensor) -> tf.Tensor:
        """``ΓQ_ω(s, a)`` on the batch for every row of ``params`` ``[n, d]``: ``[n, B]``."""
        b = self.batch
        return self.q_family.bellman_targets(params, b["reward"], b["next_state"], b["done"], self.gamma)
