"""MLP Q family on flat parameters: input ``concat(s, a)``, ReLU (or leaky ReLU) hidden layers, scalar output.

The flat layout is Keras's ``get_weights()`` order: for each Dense layer its kernel ``[in, out]``
(row-major) then its bias ``[out]``. `FlatMLPQ.keras_model` builds the matching tf_keras model so that
initialisation is Keras's own (Glorot-uniform kernels, zero biases, **zero last layer**: every member of W
starts as ``Q ≡ 0`` with different hidden features, as in the paper's appendix).

The forward pass is batched over parameter vectors with batched ``matmul``s, the scalar output a weighted sum
over the last hidden units (not ``einsum``: TF 2.21's einsum segfaults on CPU for some shapes with a single
parameter vector, e.g. ``[1, 500, 2, 30] × [1, 30, 1]``; a regression test covers it). In `q_all` the first
layer is split into its state and action parts so that ``Q(s, ·)`` for all actions costs one state projection
plus |A| cheap additions. `q_sa`, the one the losses differentiate, runs in a feature-major layout with a
hand-written backward pass (`FlatMLPQ._q_rows`), tested against TensorFlow's own gradient and finite
differences.

Optional input scaling (``state_shift``, ``state_scale``): every forward path feeds the network
``(s - state_shift) * state_scale`` instead of ``s``, so callers (policies, evaluations, exported
SavedModels) pass raw observations. It is part of the function, not of ``ω``: the flat layout and ``d`` are
those of the unscaled family, and the gradients with respect to ``ω`` are those of the scaled inputs.

Optional leaky hidden units (``negative_slope`` α > 0): every hidden unit is ``max(x, α·x)`` instead of
``max(x, 0)``, so a unit that is off on every state still passes gradient back (the default 0 is ReLU).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tf_keras

from pbo_tf.q.base import QFamily


class LayerLayout(NamedTuple):
    """Where one Dense layer of a `FlatMLPQ` lies in the flat vector ``ω`` (`FlatMLPQ.layout`).

    Attributes:
      kernel_shape: ``(in, out)``; the kernel is stored row-major.
      bias_shape: ``(out,)``.
      offset: index in ``ω`` of the kernel's first entry; the bias follows the kernel, at
        `bias_offset`.
    """

    kernel_shape: tuple[int, int]
    bias_shape: tuple[int]
    offset: int

    @property
    def bias_offset(self) -> int:
        """Index in ``ω`` of the bias's first entry: ``offset + in · out``."""
        return self.offset + self.kernel_shape[0] * self.kernel_shape[1]

    @property
    def size(self) -> int:
        """Number of entries of ``ω`` the layer holds: ``in · out + out``."""
        return self.bias_offset - self.offset + self.bias_shape[0]

    @property
    def kernel_slice(self) -> slice:
        """``ω[..., kernel_slice]`` is the kernel, flat (reshape to `kernel_shape`)."""
        return slice(self.offset, self.bias_offset)

    @property
    def bias_slice(self) -> slice:
        """``ω[..., bias_slice]`` is the bias."""
        return slice(self.bias_offset, self.offset + self.size)


class FlatMLPQ(QFamily):
    """``Q_ω(s, a) = MLP_ω(concat(s, enc(a)))`` with ``enc(a) = action_values[a]``.

    Args:
      state_dim: size of the (flat) state.
      hidden: hidden layer widths, e.g. ``[30]`` (car-on-hill, d = 151 for state_dim 2 and scalar actions).
      action_values: the action encoding fed to the network, ``[|A|]`` or ``[|A|, action_dim]``
        (car-on-hill uses ``[-1, 1]``).
      state_shift: ``[state_dim]`` subtracted from the state before the network (None: no scaling, unless
        ``state_scale`` is given, then 0).
      state_scale: ``[state_dim]`` multiplying the shifted state (None: no scaling, unless ``state_shift``
        is given, then 1); finite and non-zero. The network sees ``(s - state_shift) * state_scale``.
      negative_slope: α of the hidden units' ``max(x, α·x)``, in [0, 1); 0 (the default) is ReLU.

    Attributes:
      layer_shapes: ``[(in, out), …]`` of each Dense layer, input to output; `layout` adds where each
        layer's kernel and bias lie in ``ω``.

    Raises:
      ValueError: empty or non-positive ``hidden``; a shift or scale of another shape than ``[state_dim]``,
        non-finite, or a zero scale; a ``negative_slope`` outside [0, 1).
    """

    def __init__(
        self,
        state_dim: int,
        hidden: Sequence[int],
        action_values,
        state_shift=None,
        state_scale=None,
        negative_slope: float = 0.0,
        **kwargs,
    ):
        super().__init__(action_values=action_values, **kwargs)
        self.negative_slope = float(negative_slope)
        if not 0.0 <= self.negative_slope < 1.0:
            raise ValueError(f"negative_slope must be in [0, 1) (0: ReLU), got {negative_slope}")
        self.state_dim = int(state_dim)
        self.hidden = [int(h) for h in hidden]
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden must be a non-empty list of positive widths, got {hidden}")
        self.state_shift, self.state_scale = self._scaling(state_shift, state_scale)
        self.action_dim = int(self.action_values.shape[1])
        sizes = [self.input_width] + self.hidden + [self.output_width]
        self.layer_shapes = list(zip(sizes[:-1], sizes[1:], strict=True))
        self._split_sizes = []
        for n_in, n_out in self.layer_shapes:
            self._split_sizes += [n_in * n_out, n_out]
        self._d = int(sum(self._split_sizes))

    @property
    def d(self) -> int:
        return self._d

    @property
    def input_width(self) -> int:
        """The first layer's input: ``concat(s, a)``, ``state_dim + action_dim``."""
        return self.state_dim + self.action_dim

    @property
    def output_width(self) -> int:
        """The last layer's units: one, ``Q(s, a)``."""
        return 1

    @property
    def layout(self) -> list[LayerLayout]:
        """The flat layout of ``ω``, one `LayerLayout` per Dense layer from the input to the scalar output:
        the layers' kernel and bias shapes and offsets, in `flatten`'s order (they tile ``[0, d)``).
        What an operator reads of the family's structure (`pbo_tf.operators.registry`)."""
        out, offset = [], 0
        for n_in, n_out in self.layer_shapes:
            out.append(LayerLayout((n_in, n_out), (n_out,), offset))
            offset += n_in * n_out + n_out
        return out

    @property
    def scales_inputs(self) -> bool:
        """Whether the network is fed ``(s - state_shift) * state_scale`` rather than ``s``."""
        return self.state_shift is not None

    def _scaling(self, shift, scale) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Checked float32 ``(shift [state_dim], scale [state_dim])``, or ``(None, None)``: no scaling."""
        if shift is None and scale is None:
            return None, None
        shift = np.zeros(self.state_dim, np.float32) if shift is None else np.asarray(shift, np.float32)
        scale = np.ones(self.state_dim, np.float32) if scale is None else np.asarray(scale, np.float32)
        for key, value in dict(state_shift=shift, state_scale=scale).items():
            if value.shape != (self.state_dim,):
                raise ValueError(
                    f"{key} must have shape [{self.state_dim}] (state_dim), got {list(value.shape)}"
                )
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{key} must be finite, got {value.tolist()}")
        if np.any(scale == 0):
            raise ValueError(f"state_scale must be non-zero, got {scale.tolist()}")
        return shift, scale

    def scale_states(self, states: tf.Tensor) -> tf.Tensor:
        """``(states - state_shift) * state_scale`` on the last axis, ``[..., state_dim]`` float32 (the
        states themselves without scaling): what the network is fed."""
        states = tf.cast(states, tf.float32)
        if self.state_shift is None:
            return states
        return (states - tf.constant(self.state_shift)) * tf.constant(self.state_scale)

    # --------------------------------------------------------------------------- flat <-> structured
    def unflatten(self, params: tf.Tensor) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """``[n_w, d]`` → per layer ``(kernel [n_w, in, out], bias [n_w, out])``."""
        params = self._check(params)
        pieces = tf.split(params, self._split_sizes, axis=-1)
        layers = []
        for i, (n_in, n_out) in enumerate(self.layer_shapes):
            kernel = tf.reshape(pieces[2 * i], [-1, n_in, n_out])
            layers.append((kernel, pieces[2 * i + 1]))
        return layers

    def flatten(self, weights: Sequence[np.ndarray]) -> np.ndarray:
        """Keras ``get_weights()`` list (kernel, bias, kernel, bias, …) → flat ``[d]`` float32."""
        expected = []
        for n_in, n_out in self.layer_shapes:
            expected += [(n_in, n_out), (n_out,)]
        got = [tuple(np.shape(w)) for w in weights]
        if got != expected:
            raise ValueError(f"weights have shapes {got}, expected {expected}")
        return np.concatenate([np.reshape(w, [-1]) for w in weights]).astype(np.float32)

    def keras_model(self, seed: int) -> tf_keras.Sequential:
        """The equivalent tf_keras model ``input_width → output_width``, initialised from ``seed`` (zero
        last layer)."""
        layers = [tf_keras.Input(shape=(self.input_width,))]
        for j, width in enumerate(self.hidden):
            layers.append(
                tf_keras.layers.Dense(
                    width,
                    activation="relu" if self.negative_slope == 0.0 else None,
                    kernel_initializer=self._hidden_initializer(seed, j),
                    bias_initializer="zeros",
                )
            )
            if self.negative_slope != 0.0:
                layers.append(tf_keras.layers.LeakyReLU(alpha=self.negative_slope))
        layers.append(
            tf_keras.layers.Dense(self.output_width, kernel_initializer="zeros", bias_initializer="zeros")
        )
        return tf_keras.Sequential(layers)

    @staticmethod
    def _hidden_initializer(seed: int, layer: int) -> tf_keras.initializers.Initializer:
        """The kernel initializer of hidden layer ``layer`` (the last layer starts at zero)."""
        return tf_keras.initializers.GlorotUniform(seed=seed * 7919 + layer)

    def initial_params(self, n: int, seed: int) -> np.ndarray:
        """W[0] is the seed's initial network (FQI's and DQN's start), the others fresh initialisations."""
        return np.stack([self._initial_vector(seed * 100_003 + i) for i in range(n)])

    def _initial_vector(self, seed: int) -> np.ndarray:
        """``flatten(keras_model(seed).get_weights())`` without building the model (the same initializer
        calls, so the same numbers: tested), much faster, which matters for |W| = 30-50 vectors × seeds."""
        weights = []
        for j, (n_in, n_out) in enumerate(self.layer_shapes):
            if j < len(self.hidden):
                init = self._hidden_initializer(seed, j)
                weights.append(np.asarray(init(shape=(n_in, n_out), dtype="float32")))
            else:
                weights.append(np.zeros((n_in, n_out), np.float32))
            weights.append(np.zeros((n_out,), np.float32))
        return self.flatten(weights)

    # ------------------------------------------------------------------------------------- forward
    def activation(self, x: tf.Tensor) -> tf.Tensor:
        """The hidden units' nonlinearity: ``relu(x)``, or ``max(x, α·x)`` with ``negative_slope`` α > 0."""
        if self.negative_slope == 0.0:
            return tf.nn.relu(x)
        return tf.nn.leaky_relu(x, alpha=self.negative_slope)

    def _hidden_from_first(self, layers, pre):
        """The activation, then the remaining layers, on the first pre-activation ``[n_w, B, …, h1]``.

        The hidden layers are batched matmuls; the scalar output is a weighted sum over the last hidden
        layer's units rather than a matmul of one column, so that XLA fuses it with the activations before
        it: with one hidden layer the ``[n_w, B, |A|, h1]`` activations are never written out (on CPU, at
        the online bicycle's sizes, `max_q` takes under half the time of the one-column matmul form).
        """
        outer = tf.shape(pre)[:-1]  # [n_w, B] or [n_w, B, |A|]
        h = self.activation(pre)
        h = tf.reshape(h, [tf.shape(pre)[0], -1, pre.shape[-1]])  # [n_w, rows, h1]
        for kernel, bias in layers[1:-1]:
            h = self.activation(tf.matmul(h, kernel) + bias[:, None, :])
        k_last, b_last = layers[-1]  # [n_w, h_last, 1], [n_w, 1]
        out = tf.reduce_sum(h * tf.transpose(k_last, [0, 2, 1]), axis=-1) + b_last  # [n_w, rows]
        return tf.reshape(out, outer)

    def _state_part(self, layers, states):
        states = self.scale_states(tf.reshape(tf.cast(states, tf.float32), [-1, self.state_dim]))
        kernel, bias = layers[0]
        k_s = kernel[:, : self.state_dim]
        return tf.matmul(states[None], k_s) + bias[:, None, :], kernel[:, self.state_dim :]

    def q_all(self, params, states):
        """``[n_w, d] × [B, state_dim] → [n_w, B, |A|]``."""
        layers = self.unflatten(params)
        s_part, k_a = self._state_part(layers, states)
        a_part = tf.matmul(tf.constant(self.action_values)[None], k_a)  # [n_w, |A|, h1]
        pre = s_part[:, :, None, :] + a_part[:, None, :, :]  # [n_w, B, |A|, h1]
        return self._hidden_from_first(layers, pre)

    def q_all_paired(self, params, states):
        """``[n, d] × [n, B, state_dim] → [n, B, |A|]``, one batch of states per parameter vector."""
        layers = self.unflatten(params)
        kernel, bias = layers[0]
        states = self.scale_states(states)
        s_part = tf.matmul(states, kernel[:, : self.state_dim]) + bias[:, None, :]  # [n, B, h1]
        a_part = tf.matmul(tf.constant(self.action_values)[None], kernel[:, self.state_dim :])  # [n, |A|, h1]
        return self._hidden_from_first(layers, s_part[:, :, None, :] + a_part[:, None, :, :])

    def q_sa(self, params, states, actions):
        """``[n_w, d] × [B, state_dim] × [B] (int) → [n_w, B]``, with a hand-written gradient (`_q_rows`)."""
        params = self._check(params)
        states = self.scale_states(tf.reshape(tf.cast(states, tf.float32), [-1, self.state_dim]))
        enc = tf.gather(tf.constant(self.action_values), tf.cast(actions, tf.int32))  # [B, action_dim]
        return self._q_rows(params, tf.concat([states, enc], axis=-1))

    def _q_rows(self, params, inputs):
        """``Q`` of every parameter vector on every input row: ``[n, d] × [B, in] → [n, B]``.

        Feature-major layout: activations are ``[n, width, B]`` (the long batch axis innermost), the first
        layer (few inputs) a sum of broadcast products, the scalar output a weighted sum over features.
        The backward pass is written out (`tf.custom_gradient`): TensorFlow's and XLA's own gradient of
        the batched small-matmul form (`q_all`'s, which the tests compare against) is slower on CPU.
        Gradients flow to ``params`` only; ``inputs`` (already scaled, `scale_states`) are data.
        """
        n_layers = len(self.layer_shapes)
        inputs_t = tf.transpose(inputs)  # [in, B]
        n_in, h1 = self.layer_shapes[0]
        off_slope = self.negative_slope

        @tf.custom_gradient
        def forward(p):
            layers = self.unflatten(p)
            n = tf.shape(p)[0]
            k0, b0 = layers[0]
            pre = b0[:, :, None]  # first layer: a sum of `in` broadcast products, [n, h1, B]
            for i in range(n_in):  # (faster than a K = in matmul under XLA on CPU; in is small)
                pre = pre + k0[:, i, :, None] * inputs_t[None, i : i + 1, :]
            h = self.activation(pre)
            acts = [h]  # outputs of the hidden layers, [n, width, B]
            for kernel, bias in layers[1:-1]:
                h = self.activation(tf.matmul(kernel, h, transpose_a=True) + bias[:, :, None])
                acts.append(h)
            k_last, b_last = layers[-1]
            out = tf.reduce_sum(h * k_last, axis=1) + b_last  # [n, B]

            def grad(g):
                g_rows = g[:, None, :]  # [n, 1, B]
                pieces = [
                    tf.reduce_sum(acts[-1] * g_rows, axis=2),  # last kernel [n, h_last·1]
                    tf.reduce_sum(g, axis=1, keepdims=True),  # last bias [n, 1]
                ]
                d_h = k_last * g_rows  # [n, h_last, B]
                for j in range(n_layers - 2, -1, -1):
                    # the activation's slope: 1 where on, α (0 for ReLU) where off; ReLU'(0) = 0, as TF
                    d_pre = tf.where(acts[j] > 0, d_h, off_slope * d_h if off_slope else tf.zeros_like(d_h))
                    d_bias = tf.reduce_sum(d_pre, axis=2)
                    if j > 0:
                        kernel = layers[j][0]
                        d_kernel = tf.matmul(acts[j - 1], d_pre, transpose_b=True)  # [n, in, out]
                        d_h = tf.matmul(kernel, d_pre)  # [n, in, B]
                    else:
                        d_k0_t = tf.matmul(tf.reshape(d_pre, [-1, tf.shape(d_pre)[2]]), inputs)
                        d_kernel = tf.transpose(tf.reshape(d_k0_t, [n, h1, n_in]), [0, 2, 1])
                    pieces = [tf.reshape(d_kernel, [n, -1]), d_bias] + pieces
                return tf.concat(pieces, axis=1)

            return out, grad

        return forward(params)

    def get_config(self):
        return {
            "state_dim": self.state_dim,
            "hidden": self.hidden,
            "action_values": self.action_values.tolist(),
            "state_shift": None if self.state_shift is None else self.state_shift.tolist(),
            "state_scale": None if self.state_scale is None else self.state_scale.tolist(),
            "negative_slope": self.negative_slope,
            "name": self.name,
        }
