"""Eq. (3), the PBO's Bellman chain term::

    L₃(φ) = 1/K Σ_{k=1..K} mean_{ω∈W_b, (s,a,r,s')∈D_b} ( ΓQ_{Λ̄^{k−1}(ω)}(s,a) − Q_{Λ_φ^k(ω)}(s,a) )²

The targets use the frozen chain ``Λ̄^{k−1}(ω)`` (semi-gradient, paper Sec. 4.1); the prediction side is
differentiated through all k compositions, as the reference implementation does, or through the last
application of each term only (``stop_gradient_between``). ``normalisation="mean"`` divides the sum over k
by K; ``"reference"`` by K + 1, as the public JAX implementation does.
"""

from __future__ import annotations

import tensorflow as tf

from pbo_tf.loss_terms.base import LossTerm

NORMALISATIONS = ("mean", "reference")


class BellmanTerm(LossTerm):
    """Eq. (3) (see the module docstring); its metrics ``k1 .. kK`` are each term's mean squared Bellman
    residual before normalisation (TensorBoard and ``metrics.json``; the progress line shows the sum).

    Args:
      weight: the term's weight (1: Eq. 3 as written).
      normalisation: ``"mean"`` (÷K) or ``"reference"`` (÷(K+1)).
      stop_gradient_between: stop the gradient between compositions of ``Λ_φ`` on the prediction side.

    Raises:
      ValueError: an unknown normalisation or a bad weight.
    """

    name = "bellman"
    progress_metrics = ()

    def __init__(self, weight: float = 1.0, normalisation: str = "mean", stop_gradient_between: bool = False):
        super().__init__(weight)
        if normalisation not in NORMALISATIONS:
            raise ValueError(
                f"BellmanTerm.normalisation must be one of {NORMALISATIONS}, got {normalisation!r}"
            )
        self.normalisation = normalisation
        self.stop_gradient_between = bool(stop_gradient_between)

    def __call__(self, context):
        K, d = context.K, context.q_family.d
        targets = context.targets  # [K, n_w, B]
        predicted = tf.reshape(context.prediction_chain(self.stop_gradient_between), [-1, d])  # [K·n_w, d]
        q = tf.reshape(context.q_sa(predicted), tf.shape(targets))
        per_k = tf.reduce_mean(tf.square(targets - q), axis=[1, 2])  # [K]
        denominator = float(K) if self.normalisation == "mean" else float(K + 1)
        return tf.reduce_sum(per_k) / denominator, {f"k{k + 1}": per_k[k] for k in range(K)}

    def records(self) -> dict:
        records = {}
        if self.normalisation != "mean":
            records["normalisation"] = self.normalisation
        if self.stop_gradient_between:
            records["stop_gradient_between"] = True
        return records
