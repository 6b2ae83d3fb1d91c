"""Convolutional PBO: a stack of 1-d convolutions along the flat parameter vector, the reference
implementation's ``DeepConvPBONet`` (its ``--conv`` runs on Lunar Lander and Acrobot).

``ω [n, d]`` is read as a one-channel sequence ``[n, d, 1]``; each hidden layer is a ``Conv1D`` with
``channels[i]`` output channels, kernel ``kernel_size``, stride 1 and SAME padding, followed by a ReLU; a
last ``Conv1D`` to one channel (no activation) gives ``Λ(ω) [n, d]``. Its weights,
``Σ_i kernel_size·c_{i-1}·c_i + c_i``, do not depend on d.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
import tf_keras

from pbo_tf.operators.base import PBO, initializer_seeds

#: The reference's ``pbo_layers_dimension`` of its Lunar Lander and Acrobot runs, and its kernel size.
REFERENCE_CHANNELS = (2, 2, 2, 2)
REFERENCE_KERNEL_SIZE = 15


class ConvPBO(PBO):
    """``Λ(ω) = Conv1D_1(ReLU(… ReLU(Conv1D_{c_1}(ω[:, :, None])))))[:, :, 0]`` (the reference's
    ``DeepConvPBONet``, `pbo_tf.operators.conv`).

    Every kernel is drawn from a truncated normal of std ``init_std`` (cut at two standard deviations,
    as haiku's ``TruncatedNormal``) and every bias starts at zero, so ``Λ(ω) ≈ 0`` at the start, as the
    paper's deep PBO.

    Args:
      d: parameter size.
      channels: the hidden layers' output channels (the reference's ``pbo_layers_dimension``).
      kernel_size: the convolutions' kernel length (odd: SAME padding then centres the kernel).
      init_std: std of the truncated-normal kernel initialisation.
      seed: seed of the kernels' initialisation (`pbo_tf.operators.base.initializer_seeds`, one per
        layer); None draws from the global generator.

    Raises:
      ValueError: a non-positive channel count, or a kernel size that is not a positive odd integer.
    """

    #: its trained activity is measured by its spread over W and fresh vectors
    #: (`pbo_tf.evaluation.operator_activity`)
    spread_activity = True

    def __init__(
        self,
        d: int,
        channels: Sequence[int] = REFERENCE_CHANNELS,
        kernel_size: int = REFERENCE_KERNEL_SIZE,
        init_std: float = 5e-7,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(d, **kwargs)
        self.channels = [int(c) for c in channels]
        if min(self.channels, default=1) < 1:
            raise ValueError(f"ConvPBO.channels must be positive, got {list(channels)}")
        if int(kernel_size) != kernel_size or int(kernel_size) < 1 or int(kernel_size) % 2 == 0:
            raise ValueError(f"ConvPBO.kernel_size must be a positive odd integer, got {kernel_size}")
        self.kernel_size, self.init_std = int(kernel_size), float(init_std)
        seeds = initializer_seeds(seed, len(self.channels) + 1)
        # The Keras layers hold the kernels and biases (and their initialisation); `apply` computes the
        # convolutions as matmuls (`_conv_same`).
        self.conv_layers = [
            tf_keras.layers.Conv1D(
                c,
                self.kernel_size,
                strides=1,
                padding="same",
                kernel_initializer=tf_keras.initializers.TruncatedNormal(stddev=self.init_std, seed=s),
                bias_initializer="zeros",
                dtype=self.dtype,
            )
            for c, s in zip([*self.channels, 1], seeds, strict=True)
        ]

    def build(self, input_shape):
        for layer, c_in in zip(self.conv_layers, [1, *self.channels], strict=True):
            layer.build(tf.TensorShape([None, self.d, c_in]))
        super().build(input_shape)

    def apply(self, params):
        self.ensure_built()
        h = params[:, :, None]  # [n, d, 1]
        for j, layer in enumerate(self.conv_layers):
            h = _conv_same(h, tf.cast(layer.kernel, h.dtype), tf.cast(layer.bias, h.dtype))
            if j < len(self.conv_layers) - 1:
                h = tf.nn.relu(h)
        return h[:, :, 0]

    def chain(self, params, K, stop_gradient_between=False):
        """``Λ^k(ω)``, k = 1..K, ``[K, n_w, d]``, as one loop over the applications
        (`pbo_tf.operators.base.scanned_chain`)."""
        return self._looped_chain(params, K, stop_gradient_between)

    def get_config(self):
        return {
            "d": self.d,
            "channels": list(self.channels),
            "kernel_size": self.kernel_size,
            "init_std": self.init_std,
            "name": self.name,
        }


def _conv_same(x: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """``Conv1D`` with SAME padding and stride 1 (a cross-correlation, as TensorFlow's and haiku's):
    ``x [n, d, c_in]``, ``kernel [k, c_in, c_out]`` (k odd) → ``[n, d, c_out]``. Computed as one matmul of
    the k shifted copies of ``x`` side by side, ``[n·d, k·c_in] · [k·c_in, c_out]``: with a few channels
    this runs far faster on CPU (and under XLA) than a convolution kernel."""
    k, c_in, c_out = kernel.shape
    d = x.shape[1]
    half = (k - 1) // 2
    padded = tf.pad(x, [[0, 0], [half, half], [0, 0]])
    windows = tf.concat([padded[:, m : m + d, :] for m in range(k)], axis=-1)  # [n, d, k·c_in], m-major
    out = tf.matmul(tf.reshape(windows, [-1, k * c_in]), tf.reshape(kernel, [k * c_in, c_out]))
    return tf.reshape(out, [-1, d, c_out]) + bias


def build_conv(
    q_family,
    *,
    channels: Sequence[int] = REFERENCE_CHANNELS,
    kernel_size: int = REFERENCE_KERNEL_SIZE,
    init_std: float = 5e-7,
    seed: int | None = None,
    name: str | None = None,
) -> ConvPBO:
    """The ``conv`` kind: a `ConvPBO` on the family's ``d`` (any Q family: it reads ω as a sequence)."""
    return ConvPBO(
        q_family.d,
        channels=channels,
        kernel_size=kernel_size,
        init_std=init_std,
        seed=seed,
        **({"name": name} if name else {}),
    )


__all__ = ["ConvPBO", "build_conv", "REFERENCE_CHANNELS", "REFERENCE_KERNEL_SIZE"]
