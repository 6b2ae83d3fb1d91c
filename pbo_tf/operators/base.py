"""The PBO interface: a Keras layer mapping a batch of Q parameters to Q parameters, ``[n_w, d] → [n_w, d]``.

A projected Bellman operator (paper Def. 1) acts on the parameters ``ω`` of ``Q_ω``; once learned it is
applied any number of times to ``ω_0`` without new samples. Subclasses implement `apply`; operators with
a closed-form, differentiable fixed point also implement `fixed_point`.
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from pbo_tf.q.base import check_params


class PBO(tf_keras.layers.Layer):
    """Base class of every parameterised PBO.

    Args:
      d: size of the Q family's flat parameter vector.
    """

    has_fixed_point: bool = False

    def __init__(self, d: int, **kwargs):
        super().__init__(**kwargs)
        if int(d) < 1:
            raise ValueError(f"a PBO needs a positive parameter size d, got {d}")
        self.d = int(d)

    def apply(self, params: tf.Tensor) -> tf.Tensor:
        """One application ``Λ(ω)``: ``[n_w, d] → [n_w, d]``."""
        raise NotImplementedError

    def call(self, params):
        params = check_params(params, self.d, type(self).__name__)
        return self.apply(params)

    def iterate(self, params: tf.Tensor, k: int) -> tf.Tensor:
        """``Λ^j(ω)`` for ``j = 0..k``, stacked: ``[n_w, d] → [k + 1, n_w, d]``."""
        params = check_params(params, self.d, type(self).__name__)
        out = [params]
        for _ in range(int(k)):
            out.append(self(out[-1]))
        return tf.stack(out)

    def fixed_point(self) -> tf.Tensor:
        """``Λ^∞ = ω*`` with ``ω* = Λ(ω*)``, ``[d]``; only where `has_fixed_point`."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form fixed point")

    def ensure_built(self) -> None:
        """Creates the weights (by calling the layer once on zeros) so they can be copied or restored."""
        if not self.built:
            self(tf.zeros([1, self.d]))
