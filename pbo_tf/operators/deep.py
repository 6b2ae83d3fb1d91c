"""Deep PBO: an MLP on the flat parameters (paper Sec. 6: car-on-hill, bicycle, lunar lander; LQR's [8])."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
import tf_keras

from pbo_tf.operators.base import PBO, check_iterations
from pbo_tf.q.base import check_params


class DeepPBO(PBO):
    """``Λ(ω) = Dense_d(ReLU(… ReLU(Dense_h1(ω))))``.

    Every kernel is drawn from a truncated normal with a tiny std and biases are zero, so ``Λ(ω) ≈ 0`` at
    the start and repeated applications cannot blow up (paper appendix).

    `chain` (the loss's prediction side ``Λ^k(ω)``, k = 1..K) has a written-out backward pass: it keeps
    every application's layer inputs and output gradients and forms each layer's weight gradient as one
    product over all K applications' rows, ``[in, K·n_w]·[K·n_w, out]``, instead of K thin products each
    added into a full-size gradient (one tall product uses the matmul kernel far better on wide layers).
    Its values and gradients are TensorFlow's gradient of the composed layers up to float rounding (tested).

    Args:
      d: parameter size.
      hidden_multiples: hidden widths as multiples of d (``[2, 2, 2, 2]`` = four ReLU layers of width 2d).
      hidden_units: absolute hidden widths instead (LQR: ``[8]``); exactly one of the two must be given.
      init_std: std of the truncated-normal kernel initialisation.
      compute_dtype: ``None`` (float32 throughout) or ``"bfloat16"``: mixed precision, the Dense layers'
        matmuls run in bfloat16 (Keras policy ``mixed_bfloat16``; variables, Q evaluations, targets and the
        loss stay float32, and ``Λ(ω)`` is returned as float32). bfloat16 keeps float32's exponent range, so
        no loss scaling is needed. Worth it on GPUs/TPUs with bfloat16 matmul units, not on most CPUs
        (``benchmarks/benchmark.py --cases=mixed`` measures both).
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

    def _weights(self) -> list[tuple[tf.Tensor, tf.Tensor]]:
        return [(layer.kernel, layer.bias) for layer in [*self.hidden_layers, self.output_layer]]

    def chain(self, params, K, stop_gradient_between=False):
        params = check_params(params, self.d, type(self).__name__)
        self.ensure_built()
        return _merged_gradient_chain(params, self._weights(), K, stop_gradient_between, self._dtype())

    def _dtype(self):
        return tf.bfloat16 if self.compute_dtype_name else tf.float32

    @classmethod
    def _chain_stacked(cls, pbos, params, K, stop_gradient_between):
        cls._check_stackable(pbos)
        layers = zip(*(p._weights() for p in pbos), strict=True)
        stacked = [(tf.stack([k for k, _ in group]), tf.stack([b for _, b in group])) for group in layers]
        return _merged_gradient_chain(params, stacked, K, stop_gradient_between, pbos[0]._dtype())

    @staticmethod
    def _check_stackable(pbos):
        shapes = {(tuple(p.hidden_units), p.compute_dtype_name or "float32") for p in pbos}
        if len(shapes) > 1:
            raise ValueError(f"stacking needs deep PBOs of one shape and dtype, got {sorted(shapes)}")

    @classmethod
    def _apply_stacked(cls, pbos, params):
        """S deep PBOs at once: each layer's kernels stacked ``[S, in, out]``, one batched matmul a layer."""
        cls._check_stackable(pbos)
        dtype = pbos[0]._dtype()
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
        map (`labs/pbo_activity.py` reports it for a trained run)."""
        self.ensure_built()
        h, counts = tf.convert_to_tensor(params, tf.float32), []
        for layer in self.hidden_layers:  # the forward pass of `call`, one layer at a time
            h = layer(h)
            counts.append(int(tf.reduce_sum(tf.cast(tf.reduce_any(h > 0, axis=0), tf.int32))))
        return counts


def _merged_gradient_chain(params, weights, K: int, stop_gradient_between: bool, dtype) -> tf.Tensor:
    """``Λ^k(ω)``, k = 1..K, of a ReLU MLP with its backward pass written out (`DeepPBO.chain`).

    ``weights`` is ``[(kernel, bias), …]`` for one operator (``[in, out]``, ``[out]``; ``params [n_w, d]``)
    or S stacked ones (``[S, in, out]``, ``[S, out]``; ``params [S, n_w, d]``); the result is
    ``[K, …, n_w, d]`` float32. The backward pass walks the chain from k = K down to 1 as reverse-mode
    autodiff does, but only collects each layer's inputs and output gradients; each layer's kernel gradient is
    then one product over all K applications' rows (bias: one sum).
    """
    K, n_layers = check_iterations(K), len(weights)
    stacked = params.shape.rank == 3
    flat = [tf.convert_to_tensor(t) for pair in weights for t in pair]  # variables read once, here

    @tf.custom_gradient
    def chain(params, *flat):
        kernels = [tf.cast(k, dtype) for k in flat[0::2]]
        biases = [tf.cast(b[:, None, :] if stacked else b, dtype) for b in flat[1::2]]
        layer_inputs = []  # layer_inputs[k][j]: the input of layer j in application k + 1
        h, outputs = tf.cast(params, dtype), []
        for _ in range(K):
            inputs = []
            for j in range(n_layers):
                inputs.append(h)
                h = tf.matmul(h, kernels[j]) + biases[j]
                if j < n_layers - 1:
                    h = tf.nn.relu(h)
            layer_inputs.append(inputs)
            outputs.append(tf.cast(h, tf.float32))

        def grad(upstream):
            upstream = tf.cast(upstream, dtype)
            rows_in = [[] for _ in range(n_layers)]  # every application's input of layer j
            rows_grad = [[] for _ in range(n_layers)]  # and the gradient at its output
            g = None
            for k in reversed(range(K)):
                g = upstream[k] if g is None or stop_gradient_between else g + upstream[k]
                for j in reversed(range(n_layers)):
                    rows_in[j].append(layer_inputs[k][j])
                    rows_grad[j].append(g)
                    if j == 0 and stop_gradient_between:
                        break  # no gradient flows into the previous application, nor into ω
                    # g·kernelᵀ, computed as (kernel·gᵀ)ᵀ: with the wide kernel as the untransposed left
                    # factor, the product with a few rows is faster on CPU (under XLA and in graph mode).
                    g = tf.linalg.matrix_transpose(tf.matmul(kernels[j], g, transpose_b=True))
                    if j > 0:  # through the ReLU whose output is this layer's input
                        g = g * tf.cast(layer_inputs[k][j] > 0, dtype)
            grads = []
            for j in range(n_layers):
                x, dy = tf.concat(rows_in[j], axis=-2), tf.concat(rows_grad[j], axis=-2)
                grads.append(tf.cast(tf.matmul(x, dy, transpose_a=True), flat[2 * j].dtype))
                grads.append(tf.cast(tf.reduce_sum(dy, axis=-2), flat[2 * j + 1].dtype))
            return (None if stop_gradient_between else tf.cast(g, params.dtype), *grads)

        return tf.stack(outputs), grad

    return chain(params, *flat)
