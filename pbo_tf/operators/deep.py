"""Deep PBO: an MLP on the flat parameters (paper Sec. 6: car-on-hill, bicycle, lunar lander; LQR's [8])."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
import tf_keras

from pbo_tf.operators.base import PBO


class DeepPBO(PBO):
    """``Λ(ω) = Dense_d(ReLU(… ReLU(Dense_h1(ω))))``.

    Every kernel is drawn from a truncated normal with a tiny std and biases are zero, so ``Λ(ω) ≈ 0`` at
    the start and repeated applications cannot blow up (paper appendix).

    Args:
      d: parameter size.
      hidden_multiples: hidden widths as multiples of d (``[2, 2, 2, 2]`` = four ReLU layers of width 2d).
      hidden_units: absolute hidden widths instead (LQR: ``[8]``); exactly one of the two must be given.
      init_std: std of the truncated-normal kernel initialisation.
      compute_dtype: ``None`` (float32 throughout) or ``"bfloat16"``: mixed precision, the Dense layers'
        matmuls run in bfloat16 (Keras policy ``mixed_bfloat16``; variables, Q evaluations, targets and the
        loss stay float32, and ``Λ(ω)`` is returned as float32). bfloat16 keeps float32's exponent range, so
        no loss scaling is needed. Worth it on GPUs/TPUs with bfloat16 matmul units, not on most CPUs
        (``launch/benchmark.py --cases=mixed`` measures both).
    """

    def __init__(
        self,
        d: int,
        hidden_multiples: Sequence[float] | None = None,
        hidden_units: Sequence[int] | None = None,
        init_std: float = 5e-7,
        compute_dtype: str | None = None,
        **kwargs,
    ):
        super().__init__(d, **kwargs)
        if (hidden_multiples is None) == (hidden_units is None):
            raise ValueError("DeepPBO needs exactly one of hidden_multiples or hidden_units")
        if hidden_units is None:
            hidden_units = [int(round(m * self.d)) for m in hidden_multiples]
        self.hidden_units = [int(h) for h in hidden_units]
        if min(self.hidden_units, default=1) < 1:
            raise ValueError(f"hidden widths must be positive, got {self.hidden_units}")
        self.init_std = float(init_std)
        if compute_dtype not in (None, "float32", "bfloat16"):
            raise ValueError(f"compute_dtype must be None, 'float32' or 'bfloat16', got {compute_dtype!r}")
        self.compute_dtype_name = None if compute_dtype in (None, "float32") else compute_dtype
        policy = (
            {"dtype": tf_keras.mixed_precision.Policy("mixed_bfloat16")} if self.compute_dtype_name else {}
        )

        # A fresh initializer per layer: one shared unseeded instance repeats the same draw.
        def init():
            return tf_keras.initializers.TruncatedNormal(stddev=self.init_std)

        self.hidden_layers = [
            tf_keras.layers.Dense(
                h, activation="relu", kernel_initializer=init(), bias_initializer="zeros", **policy
            )
            for h in self.hidden_units
        ]
        self.output_layer = tf_keras.layers.Dense(
            self.d, kernel_initializer=init(), bias_initializer="zeros", **policy
        )

    def apply(self, params):
        h = params
        for layer in self.hidden_layers:
            h = layer(h)
        return tf.cast(self.output_layer(h), tf.float32)

    @classmethod
    def _apply_stacked(cls, pbos, params):
        """S deep PBOs at once: each layer's kernels stacked ``[S, in, out]``, one batched matmul a layer."""
        shapes = {(tuple(p.hidden_units), p.compute_dtype_name) for p in pbos}
        if len(shapes) > 1:
            raise ValueError(f"apply_stacked needs deep PBOs of one shape and dtype, got {sorted(shapes)}")
        dtype = tf.bfloat16 if pbos[0].compute_dtype_name else tf.float32
        h = tf.cast(params, dtype)
        layers = list(zip(*([*p.hidden_layers, p.output_layer] for p in pbos), strict=True))
        for j, group in enumerate(layers):
            kernel = tf.cast(tf.stack([layer.kernel for layer in group]), dtype)  # [S, in, out]
            bias = tf.cast(tf.stack([layer.bias for layer in group]), dtype)  # [S, out]
            h = tf.matmul(h, kernel) + bias[:, None, :]
            if j < len(layers) - 1:
                h = tf.nn.relu(h)
        return tf.cast(h, tf.float32)

    def get_config(self):
        return {
            "d": self.d,
            "hidden_units": self.hidden_units,
            "init_std": self.init_std,
            "compute_dtype": self.compute_dtype_name,
            "name": self.name,
        }

    def active_units(self, params) -> list[int]:
        """Per hidden layer, how many units fire (ReLU output > 0) on at least one row of ``params``
        ``[n, d]``. A layer with none blocks every gradient to the layers below it and makes Λ a constant
        map (`scripts/pbo_activity.py` reports it for a trained run)."""
        self.ensure_built()
        h, counts = tf.convert_to_tensor(params, tf.float32), []
        for layer in self.hidden_layers:  # the forward pass of `call`, one layer at a time
            h = layer(h)
            counts.append(int(tf.reduce_sum(tf.cast(tf.reduce_any(h > 0, axis=0), tf.int32))))
        return counts
