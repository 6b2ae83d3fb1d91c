"""Deep PBO: an MLP on the flat parameters (paper Sec. 6: car-on-hill, bicycle, lunar lander; LQR's [8]),
with the options that keep it a function of ω (residual form, standardised input, activations and
initialisations whose units do not die)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from pbo_tf.operators.base import PBO, check_iterations, initializer_seeds
from pbo_tf.q.base import check_params

#: Hidden activations of `DeepPBO`: the paper's ReLU, and activations whose units cannot die (a leaky ReLU
#: with slope 0.01 below zero, SiLU, GELU).
ACTIVATIONS = {
    "relu": tf.nn.relu,
    "leaky_relu": lambda x: tf.nn.leaky_relu(x, alpha=0.01),
    "silu": tf.nn.silu,
    "gelu": tf.nn.gelu,
}
#: Kernel initialisations of `DeepPBO`: the paper's truncated normal of std ``init_std``, Glorot-uniform
#: and He-normal (biases start at zero in every case).
KERNEL_INITS = ("truncated_normal", "glorot_uniform", "he_normal")
#: A coordinate of ω whose std over W is at most this is not rescaled by the standardisation (scale 1):
#: e.g. the zero last layer of the paper's W and every zero bias.
STANDARDISE_MIN_STD = 1e-6


class DeepPBO(PBO):
    """``Λ(ω) = Dense_d(ReLU(… ReLU(Dense_h1(ω))))`` (the paper's deep PBO), with options.

    With the paper's settings every kernel is drawn from a truncated normal with a tiny std and biases are
    zero, so ``Λ(ω) ≈ 0`` at the start and repeated applications cannot blow up (paper appendix).

    Options (each off by default, so the default is the paper's operator):

    * ``residual=True``: ``Λ(ω) = ω + f(ω)`` with f the MLP, whose output layer starts at zero, so the
      operator is the identity at initialisation (``Λ(ω) == ω`` exactly) and every hidden layer's
      features reach the output from the first step on. A ReLU layer that dies then leaves ``Λ(ω) = ω + c``,
      still a function of ω.
    * ``standardise=True``: f sees ``z = (ω − μ) / σ`` and its output is scaled back, ``Λ(ω) = μ + σ ⊙
      f(z)`` (``ω + σ ⊙ f(z)`` with ``residual``), with μ and σ the per-coordinate mean and std of the set W
      (`adapt`; non-trainable weights, saved with the operator; σ = 1 where W does not vary). Without it
      the paper's W enters the first layer at very different scales: the hidden weights of a Glorot layer
      (~0.3) beside exact zeros for the last layer and every bias.
    * ``activation``: ``relu`` (paper), ``leaky_relu``, ``silu`` or ``gelu``: units of the last three
      never stop passing gradient, so a layer cannot die the way the paper's ReLU layers do.
    * ``kernel_init``: ``truncated_normal`` (paper: std ``init_std``), ``glorot_uniform`` or ``he_normal``.

    `chain` (the loss's prediction side ``Λ^k(ω)``, k = 1..K) has a written-out backward pass, with every
    option: it keeps every application's layer inputs and output gradients and forms each layer's weight
    gradient as one product over all K applications' rows, ``[in, K·n_w]·[K·n_w, out]``, instead of K thin
    products each added into a full-size gradient (one tall product uses the matmul kernel far better on
    wide layers). Its values and gradients are TensorFlow's gradient of the composed layers up to float
    rounding (tested).

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
      activation: the hidden activation (`ACTIVATIONS`).
      kernel_init: the kernel initialisation (`KERNEL_INITS`).
      residual: ``Λ(ω) = ω + f(ω)``, identity at initialisation.
      standardise: per-coordinate standardisation of ω over W (call `adapt` with W before training).
      seed: seed of the kernels' initialisation (`pbo_tf.operators.base.initializer_seeds`, one per layer);
        None draws from the global generator.

    Raises:
      ValueError: a bad width, dtype, activation or initialisation, with the accepted values.
    """

    def __init__(
        self,
        d: int,
        hidden_multiples: Sequence[float] | None = None,
        hidden_units: Sequence[int] | None = None,
        init_std: float = 5e-7,
        compute_dtype: str | None = None,
        activation: str = "relu",
        kernel_init: str = "truncated_normal",
        residual: bool = False,
        standardise: bool = False,
        seed: int | None = None,
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
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown PBO activation {activation!r}; known: {list(ACTIVATIONS)}")
        if kernel_init not in KERNEL_INITS:
            raise ValueError(f"unknown PBO kernel_init {kernel_init!r}; known: {list(KERNEL_INITS)}")
        self.activation, self.kernel_init = activation, kernel_init
        self.residual, self.standardise = bool(residual), bool(standardise)
        self.compute_dtype_name = None if compute_dtype in (None, "float32") else compute_dtype
        policy = (
            {"dtype": tf_keras.mixed_precision.Policy("mixed_bfloat16")} if self.compute_dtype_name else {}
        )

        # A fresh initializer per layer: one shared unseeded instance repeats the same draw.
        def init(seed):
            if kernel_init == "glorot_uniform":
                return tf_keras.initializers.GlorotUniform(seed=seed)
            if kernel_init == "he_normal":
                return tf_keras.initializers.HeNormal(seed=seed)
            return tf_keras.initializers.TruncatedNormal(stddev=self.init_std, seed=seed)

        seeds = initializer_seeds(seed, len(self.hidden_units) + 1)  # the hidden layers', the output's
        act = ACTIVATIONS[activation]
        self.hidden_layers = [
            tf_keras.layers.Dense(
                h, activation=act, kernel_initializer=init(s), bias_initializer="zeros", **policy
            )
            for h, s in zip(self.hidden_units, seeds[:-1], strict=True)
        ]
        self.output_layer = tf_keras.layers.Dense(
            self.d,
            kernel_initializer="zeros" if self.residual else init(seeds[-1]),
            bias_initializer="zeros",
            **policy,
        )
        if self.standardise:
            self.input_mean = self.add_weight(
                name="input_mean", shape=[self.d], initializer="zeros", trainable=False
            )
            self.input_scale = self.add_weight(
                name="input_scale", shape=[self.d], initializer="ones", trainable=False
            )

    @property
    def paper_form(self) -> bool:
        """Whether this is the paper's operator (ReLU, not residual, not standardised)."""
        return self.activation == "relu" and not self.residual and not self.standardise

    @property
    def dead_layer_is_constant(self) -> bool:
        """Whether a hidden layer without an active unit makes Λ a constant map (ReLU, not residual)."""
        return self.activation == "relu" and not self.residual

    def adapt(self, w_set) -> None:
        """Sets the standardisation to the per-coordinate mean and std of the set W ``[n_W, d]`` (std 1
        where W varies by at most `STANDARDISE_MIN_STD`). Only for ``standardise=True``."""
        if not self.standardise:
            raise ValueError("adapt() needs a DeepPBO built with standardise=True")
        w = np.asarray(w_set, dtype=np.float64)
        if w.ndim != 2 or w.shape[1] != self.d:
            raise ValueError(f"adapt() needs W as [n_W, {self.d}], got shape {list(w.shape)}")
        std = w.std(axis=0)
        self.input_mean.assign(w.mean(axis=0).astype(np.float32))
        self.input_scale.assign(np.where(std > STANDARDISE_MIN_STD, std, 1.0).astype(np.float32))

    def _standardisation(self):
        """``(μ, σ)`` as tensors, or ``(None, None)`` without standardisation."""
        if not self.standardise:
            return None, None
        return tf.convert_to_tensor(self.input_mean), tf.convert_to_tensor(self.input_scale)

    def apply(self, params):
        mean, scale = self._standardisation()
        h = params if mean is None else (params - mean) / scale
        for layer in self.hidden_layers:
            h = layer(h)
        out = tf.cast(self.output_layer(h), tf.float32)
        return _output(params, out, mean, scale, self.residual)

    def _weights(self) -> list[tuple[tf.Tensor, tf.Tensor]]:
        return [(layer.kernel, layer.bias) for layer in [*self.hidden_layers, self.output_layer]]

    def chain(self, params, K, stop_gradient_between=False):
        params = check_params(params, self.d, type(self).__name__)
        self.ensure_built()
        return _merged_gradient_chain(
            params, self._weights(), K, stop_gradient_between, self._dtype(), **self._chain_options()
        )

    def _chain_options(self, standardisation=None) -> dict:
        """`_merged_gradient_chain`'s options for this operator (``standardisation``: stacked μ, σ)."""
        if standardisation is None and self.standardise:
            standardisation = self._standardisation()
        return dict(activation=self.activation, standardisation=standardisation, residual=self.residual)

    def _dtype(self):
        return tf.bfloat16 if self.compute_dtype_name else tf.float32

    def _options(self) -> tuple:
        return (
            tuple(self.hidden_units),
            self.compute_dtype_name or "float32",
            self.activation,
            self.residual,
            self.standardise,
        )

    @classmethod
    def _chain_stacked(cls, pbos, params, K, stop_gradient_between):
        cls._check_stackable(pbos)
        layers = zip(*(p._weights() for p in pbos), strict=True)
        stacked = [(tf.stack([k for k, _ in group]), tf.stack([b for _, b in group])) for group in layers]
        standardisation = None
        if pbos[0].standardise:
            standardisation = (
                tf.stack([p.input_mean for p in pbos])[:, None, :],
                tf.stack([p.input_scale for p in pbos])[:, None, :],
            )
        options = pbos[0]._chain_options(standardisation)
        return _merged_gradient_chain(params, stacked, K, stop_gradient_between, pbos[0]._dtype(), **options)

    @staticmethod
    def _check_stackable(pbos):
        shapes = {p._options() for p in pbos}
        if len(shapes) > 1:
            raise ValueError(
                f"stacking needs deep PBOs of one shape and dtype and the same options, got {sorted(shapes)}"
            )

    @classmethod
    def _apply_stacked(cls, pbos, params):
        """S deep PBOs at once: each layer's kernels stacked ``[S, in, out]``, one batched matmul a layer."""
        cls._check_stackable(pbos)
        p0 = pbos[0]
        dtype = p0._dtype()
        mean = scale = None
        if p0.standardise:
            mean = tf.stack([p.input_mean for p in pbos])[:, None, :]  # [S, 1, d]
            scale = tf.stack([p.input_scale for p in pbos])[:, None, :]
        h = tf.cast(params if mean is None else (params - mean) / scale, dtype)
        layers = list(zip(*([*p.hidden_layers, p.output_layer] for p in pbos), strict=True))
        act = ACTIVATIONS[p0.activation]
        for j, group in enumerate(layers):
            kernel = tf.cast(tf.stack([layer.kernel for layer in group]), dtype)  # [S, in, out]
            bias = tf.cast(tf.stack([layer.bias for layer in group]), dtype)  # [S, out]
            h = tf.matmul(h, kernel) + bias[:, None, :]
            if j < len(layers) - 1:
                h = act(h)
        return _output(params, tf.cast(h, tf.float32), mean, scale, p0.residual)

    def get_config(self):
        return {
            "d": self.d,
            "hidden_units": self.hidden_units,
            "init_std": self.init_std,
            "compute_dtype": self.compute_dtype_name,
            "activation": self.activation,
            "kernel_init": self.kernel_init,
            "residual": self.residual,
            "standardise": self.standardise,
            "name": self.name,
        }

    def active_units(self, params) -> list[int]:
        """Per hidden layer, how many units have a positive pre-activation on at least one row of ``params``
        ``[n, d]`` (for ReLU: fire). In the paper's ReLU operator a layer with none blocks every gradient to
        the layers below it and makes Λ a constant map (`dead_layer_is_constant`); with the other
        activations the count says how many units work in their linear regime."""
        self.ensure_built()
        mean, scale = self._standardisation()
        h = tf.convert_to_tensor(params, tf.float32)
        h, counts = (h if mean is None else (h - mean) / scale), []
        act = ACTIVATIONS[self.activation]
        for layer in self.hidden_layers:  # the forward pass of `apply`, one layer at a time
            pre = tf.matmul(tf.cast(h, layer.kernel.dtype), layer.kernel) + layer.bias
            counts.append(int(tf.reduce_sum(tf.cast(tf.reduce_any(pre > 0, axis=0), tf.int32))))
            h = act(pre)
        return counts


def build_deep(
    q_family,
    *,
    init_std: float = 5e-7,
    seed: int | None = None,
    name: str | None = None,
    w_set=None,
    hidden_multiples: Sequence[float] | None = None,
    hidden_units: Sequence[int] | None = None,
    compute_dtype: str | None = None,
    activation: str = "relu",
    kernel_init: str = "truncated_normal",
    residual: bool = False,
    standardise: bool = False,
) -> DeepPBO:
    """The ``deep`` kind of `pbo_tf.operators.registry`: a `DeepPBO` on the family's ``d`` (the options are
    `DeepPBO`'s); a standardised one takes its mean and std from the set W ``w_set`` ``[n_W, d]``
    (`DeepPBO.adapt`) when it is given, else from the checkpoint that restores it."""
    pbo = DeepPBO(
        q_family.d,
        hidden_multiples=hidden_multiples,
        hidden_units=hidden_units,
        init_std=init_std,
        compute_dtype=compute_dtype,
        activation=activation,
        kernel_init=kernel_init,
        residual=residual,
        standardise=standardise,
        seed=seed,
        **({"name": name} if name else {}),
    )
    if standardise and w_set is not None:
        pbo.adapt(w_set)
    return pbo


def _output(params, f_out, mean, scale, residual: bool):
    """``Λ(ω)`` from the MLP's output ``f_out``: ``[ω or μ or 0] + [σ ⊙] f_out`` (see `DeepPBO`)."""
    if scale is not None:
        f_out = f_out * scale
    if residual:
        return params + f_out
    return f_out if mean is None else mean + f_out


def _activation_derivative(name: str, pre: tf.Tensor) -> tf.Tensor:
    """``act'(pre)`` of the activation ``name`` (`ACTIVATIONS`); ReLU'(0) = 0, as TensorFlow's."""
    if name == "relu":
        return tf.cast(pre > 0, pre.dtype)
    if name == "leaky_relu":
        return tf.where(pre > 0, tf.ones_like(pre), tf.fill(tf.shape(pre), tf.constant(0.01, pre.dtype)))
    if name == "silu":
        sig = tf.sigmoid(pre)
        return sig * (1 + pre * (1 - sig))
    if name == "gelu":  # exact GELU x·Φ(x): Φ(x) + x·φ(x)
        x = tf.cast(pre, tf.float32)
        cdf = 0.5 * (1.0 + tf.math.erf(x / np.sqrt(2.0)))
        return tf.cast(cdf + x * tf.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi), pre.dtype)
    raise ValueError(f"unknown PBO activation {name!r}; known: {list(ACTIVATIONS)}")


def _merged_gradient_chain(
    params,
    weights,
    K: int,
    stop_gradient_between: bool,
    dtype,
    activation: str = "relu",
    standardisation=None,
    residual: bool = False,
) -> tf.Tensor:
    """``Λ^k(ω)``, k = 1..K, of a deep PBO with its backward pass written out (`DeepPBO.chain`).

    ``weights`` is ``[(kernel, bias), …]`` for one operator (``[in, out]``, ``[out]``; ``params [n_w, d]``)
    or S stacked ones (``[S, in, out]``, ``[S, out]``; ``params [S, n_w, d]``); ``standardisation`` is
    ``(μ, σ)`` (``[d]``, or ``[S, 1, d]`` stacked; constants, not differentiated) or None; the result is
    ``[K, …, n_w, d]`` float32. One application is ``Λ(x) = base + σ ⊙ f((x − μ) / σ)`` with base ``x``
    (residual), ``μ`` or 0 (`DeepPBO`). The backward pass walks the chain from k = K down to 1 as
    reverse-mode autodiff does, but only collects each layer's inputs and output gradients; each layer's
    kernel gradient is then one product over all K applications' rows (bias: one sum).
    """
    K, n_layers = check_iterations(K), len(weights)
    stacked = params.shape.rank == 3
    flat = [tf.convert_to_tensor(t) for pair in weights for t in pair]  # variables read once, here
    act = ACTIVATIONS[activation]
    mean, scale = (None, None) if standardisation is None else standardisation

    @tf.custom_gradient
    def chain(params, *flat):
        kernels = [tf.cast(k, dtype) for k in flat[0::2]]
        biases = [tf.cast(b[:, None, :] if stacked else b, dtype) for b in flat[1::2]]
        layer_inputs = []  # layer_inputs[k][j]: the input of layer j in application k + 1
        pre_acts = []  # pre_acts[k][j]: the pre-activation of hidden layer j in application k + 1
        x, outputs = params, []
        for _ in range(K):
            h = tf.cast(x if mean is None else (x - mean) / scale, dtype)
            inputs, pres = [], []
            for j in range(n_layers):
                inputs.append(h)
                h = tf.matmul(h, kernels[j]) + biases[j]
                if j < n_layers - 1:
                    pres.append(h)
                    h = act(h)
            layer_inputs.append(inputs)
            pre_acts.append(pres)
            x = _output(x, tf.cast(h, tf.float32), mean, scale, residual)
            outputs.append(x)

        def grad(upstream):
            rows_in = [[] for _ in range(n_layers)]  # every application's input of layer j
            rows_grad = [[] for _ in range(n_layers)]  # and the gradient at its output
            g_x = None  # the gradient at the output of the current application (float32)
            for k in reversed(range(K)):
                g_x = upstream[k] if g_x is None or stop_gradient_between else g_x + upstream[k]
                g = tf.cast(g_x if scale is None else g_x * scale, dtype)
                for j in reversed(range(n_layers)):
                    rows_in[j].append(layer_inputs[k][j])
                    rows_grad[j].append(g)
                    if j == 0 and stop_gradient_between:
                        break  # no gradient flows into the previous application, nor into ω
                    # g·kernelᵀ, computed as (kernel·gᵀ)ᵀ: with the wide kernel as the untransposed left
                    # factor, the product with a few rows is faster on CPU (under XLA and in graph mode).
                    g = tf.linalg.matrix_transpose(tf.matmul(kernels[j], g, transpose_b=True))
                    if j > 0:  # through the activation whose output is this layer's input
                        g = g * _activation_derivative(activation, pre_acts[k][j - 1])
                if stop_gradient_between:
                    continue
                g_in = tf.cast(g, tf.float32)  # the gradient at the standardised input
                g_in = g_in if scale is None else g_in / scale
                g_x = g_in + g_x if residual else g_in
            grads = []
            for j in range(n_layers):
                x_rows, dy = tf.concat(rows_in[j], axis=-2), tf.concat(rows_grad[j], axis=-2)
                grads.append(tf.cast(tf.matmul(x_rows, dy, transpose_a=True), flat[2 * j].dtype))
                grads.append(tf.cast(tf.reduce_sum(dy, axis=-2), flat[2 * j + 1].dtype))
            return (None if stop_gradient_between else tf.cast(g_x, params.dtype), *grads)

        return tf.stack(outputs), grad

    return chain(params, *flat)
