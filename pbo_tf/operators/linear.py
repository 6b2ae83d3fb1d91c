"""Linear PBO ``Λ(ω) = ω Wᵀ + b`` with its closed-form fixed point (ProFQI and ProFQI_∞, paper Eq. 3, 4;
chain-walk, Sec. 5.1)."""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from pbo_tf.operators.base import PBO, initializer_seeds


def linear_fixed_point(kernel: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """Fixed point of ``ω ↦ ω·kernel + bias`` (``kernel = Wᵀ``, ``[d, d]``; ``bias [d]``): ``(I − W)⁻¹ b``.

    A plain function of tensors so its gradient can be checked on its own; differentiable through the solve.
    """
    d = tf.shape(bias)[0]
    return tf.linalg.solve(tf.eye(d, dtype=bias.dtype) - tf.transpose(kernel), bias[:, None])[:, 0]


class LinearPBO(PBO):
    """``Λ(ω) = ω Wᵀ + b``, ``W ∈ R^{d×d}``, ``b ∈ R^d`` (one tf_keras `Dense` layer, kernel = Wᵀ).

    Its fixed point ``ω* = (I − W)⁻¹ b`` is computed with a linear solve, which TensorFlow differentiates,
    so the fixed-point term of Eq. (4) can be trained through it. No contraction constraint is imposed
    (the reference implementation only logs ``‖W‖₁``): if ``I − W`` becomes singular the fixed point is
    not finite and the loss reports it.

    Args:
      d: parameter size.
      init_std: std of the truncated-normal initialisation of W and b.
      seed: seed of that initialisation (`initializer_seeds`); None draws from the global generator.
    """

    has_fixed_point = True

    def __init__(self, d: int, init_std: float = 5e-6, seed: int | None = None, **kwargs):
        super().__init__(d, **kwargs)
        self.init_std = float(init_std)
        kernel_seed, bias_seed = initializer_seeds(seed, 2)
        # A fresh initializer per weight: one shared unseeded instance would give W and b equal draws.
        self.dense = tf_keras.layers.Dense(
            self.d,
            kernel_initializer=tf_keras.initializers.TruncatedNormal(stddev=self.init_std, seed=kernel_seed),
            bias_initializer=tf_keras.initializers.TruncatedNormal(stddev=self.init_std, seed=bias_seed),
        )

    def apply(self, params):
        return self.dense(params)

    @property
    def W(self) -> tf.Tensor:
        """The matrix W of ``Λ(ω) = ω Wᵀ + b`` (``[d, d]``)."""
        self.ensure_built()
        return tf.transpose(self.dense.kernel)

    def fixed_point(self) -> tf.Tensor:
        self.ensure_built()
        return linear_fixed_point(self.dense.kernel, self.dense.bias)

    def get_config(self):
        return {"d": self.d, "init_std": self.init_std, "name": self.name}


def build_linear(q_family, *, init_std: float = 5e-6, seed: int | None = None, name: str | None = None):
    """The ``linear`` kind of `pbo_tf.operators.registry`: a `LinearPBO` on the family's ``d``."""
    return LinearPBO(q_family.d, init_std=init_std, seed=seed, **({"name": name} if name else {}))
