r"""Permutation-equivariant PBO on the parameters of an MLP Q network (`pbo_tf.q.FlatMLPQ`, and
`pbo_tf.q.PerActionMLPQ`), of any depth.

Permuting the units of a hidden layer h of ``Q_ω`` maps ``(W_{h-1}, b_{h-1}, W_h)`` to
``(W_{h-1} P, Pᵀ b_{h-1}, Pᵀ W_h)`` and leaves the function ``Q_ω`` unchanged; the Bellman operator acts
on functions, so an operator of the family's parameters should commute with every such P:
``Λ(P·ω) = P·Λ(ω)``. `EquivariantPBO` does, for every hidden layer at once, with weights whose number does
not depend on the hidden widths, at a cost linear in d.

What it computes. Every entry of ``ω`` carries a vector of C channels: the kernel of Q layer l as
``W_l [n, a_l, b_l, C]`` (``a_l`` its input units, ``b_l`` its output units) and its bias as
``b_l [n, b_l, C]``; ``ω`` enters with one channel (standardised, see below) and leaves with one. Each
layer of the operator maps C to C' channels; its output at ``W_l[i, j]`` is

    A_self·W_l[i, j]
    + A_row·[mean_j' W_l[i, j'],  mean_k W_{l-1}[k, i],  b_{l-1}[i]]       (what shares unit i; l > 0)
    + A_col·[mean_i' W_l[i', j],  b_l[j],  mean_k W_{l+1}[j, k]]            (what shares unit j; l < L)
    + A_all·[mean W_l,  mean b_l] + c  (+ E_in[i] for l = 0, + E_out[j] for the output layer)

and at ``b_l[j]``

    B_self·b_l[j] + B_col·[mean_i W_l[i, j],  mean_k W_{l+1}[j, k]] + B_all·[mean b_l,  mean W_l] + c'
    (+ E_out_b[j] for the output layer),

with learned ``C×C'`` matrices per Q layer (the brackets are concatenations over channels, one matrix
for each group), then an activation between the operator's layers. This is the linear equivariant layer
of DWSNets (Navon et al. 2023) and NFNs (Zhou et al. 2023) restricted to the terms that connect entries
sharing a unit or a layer, in the NFN "HNP" form: the input units (state and action features) and the
output units (Q's outputs, one per action for `PerActionMLPQ`) are not permuted by anything, so each of
their indices gets a learned embedding ``E`` that lets the operator tell them apart; the pooling and the
matrices treat every hidden unit alike, so the map commutes with every hidden permutation. Each term is
a mean over an axis and a ``[rows, C]·[C, C']`` matmul; only the ``A_self`` and ``B_self`` products run on
every entry, so an application costs ``O(d·C·C')`` and the weights ``O(L·C·C')`` plus the embeddings
(``O((inputs + outputs)·C)``). The ops are reshapes, means and 2-d matmuls (no einsum), which compile
under XLA.

Why these terms: they are the cheap, width-independent ones through which a Bellman step can move: a
unit's incoming and outgoing weights and bias (the row/column pools of the neighbouring layers) decide
its contribution to Q, and the layer means carry the scale of each layer. The output can therefore change
each weight as a function of its own value and of its unit's summary statistics, which the deep PBO's
dense map of d² weights per layer would also have to learn, separately for every unit.

`EquivariantPBO.chain` runs the K applications of the loss's chain as one ``tf.scan`` loop, so a compiled
loss holds one application rather than K (the same values and gradients); ``unroll_chain=True`` writes
them out one after the other instead, which takes longer to compile (about 2.5× under XLA at Lunar
Lander's sizes) and runs faster (1.1-1.2× a training step there, `docs/operator_study.md`).

Options:

* ``standardise=True`` (default): each block of ``ω`` (a layer's kernel, a layer's bias) is standardised
  by its own scalar mean and std over the set W (`adapt`; non-trainable weights saved with the operator;
  std 1 where the block does not vary, e.g. the paper's zero last layer) and the output is scaled back,
  ``Λ(ω) = μ + σ·f(z)`` per block. Scalars per block keep the map equivariant (a per-coordinate
  standardisation, as `DeepPBO`'s, would not); the blocks of ω have very different scales (Glorot
  kernels, zero biases, a zero last layer), which the operator's shared matrices could not absorb.
* ``residual=True``: ``Λ(ω) = ω + σ·f(z)``, never a constant map.
* ``probes=P > 0``: what each hidden unit computes enters the first operator layer beside the pooled
  means. P fixed probe inputs ``x_p`` of Q's first layer (drawn N(0, 1) once, saved with the operator)
  go through ``Q_ω``'s hidden layers (ReLU, as the family); unit j of hidden layer h gets the P-vector of
  its activations ``u_h[j, p]``, divided by their root mean square over the layer's units and the probes
  (one scalar per ω and layer, so the features permute with the units). They are added through learned
  ``P×C'`` matrices where unit j shares: ``W_{h-1}``'s column j and ``b_{h-1}[j]`` (``k_probe_col``,
  ``b_probe``) and ``W_h``'s row j (``k_probe_row``). A unit's role in the function, not only its weights'
  means, can then shape its update; the cost is a forward pass of ``Q_ω`` on P inputs per application.
* ``mix_fixed_units=True``: the terms of NFN's HNP layer that the input and output units allow, since
  nothing permutes them: at ``W_0[i, j]`` a learned ``C×C'`` matrix per pair of input features
  ``(i', i)`` applied to ``W_0[i', j]``, summed over i' (``k_in_fixed``: unit j's whole column of
  incoming weights, each feature with its own matrices), and at ``W_L[i, j]`` and ``b_L[j]`` the same
  over the outputs j' (``k_out_fixed``, ``b_out_fixed``; only where Q has more than one output, i.e.
  `PerActionMLPQ`). Without them a feature's or an action's weights differ from the others' only by an
  added embedding; with them the operator can, say, scale the action input's row and not the state's, or
  make one action's outgoing weights a function of another's. The weights grow with the number of inputs
  and outputs squared, not with the hidden widths; the cost is ``O(d_0·a_0·C·C')`` for the first layer.
* ``centre_hidden=True``: the update ``f`` (what is added to ω, or to μ) has zero mean over every
  hidden-unit axis of each block: a kernel's hidden rows and columns (both for a kernel between two hidden
  layers), a hidden layer's bias; the output bias is left free. The terms that treat every hidden unit
  alike (the input embeddings, the row pools of ``W_0``, the layer means) can otherwise write one common
  vector into every unit, and applied K times that drives the units of a layer onto one (pairwise cosine
  of ``W_0``'s columns near 1: a network of width one, `docs/operator_study.md`); centred, ``Λ`` keeps the
  hidden-unit means of ``ω``'s blocks (of μ, non-residual) and can still scale, rotate or reshape the
  units one by one. Subtracting a mean over a permuted axis commutes with the permutation, so the map
  stays equivariant.
* ``activation``: as `pbo_tf.operators.deep.ACTIVATIONS`.

The operator's last layer (C → 1) starts truncated-normal with std ``init_std`` (its embeddings too)
and zero biases, so ``Λ(ω) ≈ μ`` (``≈ ω`` residual) at the start, as the paper's tiny initialisation;
the hidden layers start He-normal over the terms they sum, and their embeddings normal with std 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from pbo_tf.operators.base import PBO, initializer_seeds
from pbo_tf.operators.deep import ACTIVATIONS, STANDARDISE_MIN_STD
from pbo_tf.q.mlp import LayerLayout

#: The hidden channel counts of the ``equivariant`` kind's default operator.
DEFAULT_CHANNELS = (16, 16)
#: The weights of a layer that mix channels (``k_self``, ``b_self``, ...), as opposed to constants and
#: embeddings.
MIXED = ("self", "row", "col", "all", "in_fixed", "out_fixed")
#: The std of a standard normal cut at ±2 (what a truncated normal's std is divided by to reach its own).
TRUNCATED_NORMAL_STD = 0.87962566103423978


def _mix(x: tf.Tensor, matrix: tf.Tensor) -> tf.Tensor:
    """``x [n, ..., c_in] · matrix [c_in, c_out] → [n, ..., c_out]``, as one 2-d matmul (the axes after the
    first are static)."""
    c_in, c_out = matrix.shape
    if c_in == 1:  # an outer product: a broadcast product (a matmul of inner size 1 is slow on CPU)
        return x * matrix[0]
    if c_out == 1:  # a weighted sum over the channels
        return tf.reduce_sum(x * matrix[:, 0], axis=-1, keepdims=True)
    flat = tf.matmul(tf.reshape(x, [-1, c_in]), matrix)
    return tf.reshape(flat, [-1, *x.shape[1:-1], c_out])


class EquivariantPBO(PBO):
    """A PBO that commutes with every permutation of the hidden units of an MLP Q network
    (`pbo_tf.operators.equivariant`).

    Args:
      q_family: the `pbo_tf.q.FlatMLPQ` (or `pbo_tf.q.PerActionMLPQ`) family whose parameters Λ maps;
        its `layout` gives each layer's kernel and bias shapes.
      channels: the hidden layers' channel counts C (``[16, 16]``: ``1 → 16 → 16 → 1``).
      activation: the activation between layers (`pbo_tf.operators.deep.ACTIVATIONS`).
      residual: ``Λ(ω) = ω + σ·f(z)``.
      standardise: per-block scalar standardisation of ω over W (`adapt`).
      init_std: std of the last layer's truncated-normal initialisation.
      seed: seed of the initialisation (`pbo_tf.operators.base.initializer_seeds`); None draws from the
        global generator.
      unroll_chain: `chain` as K applications written out (`pbo_tf.operators.base.composed_chain`) rather
        than one loop (`pbo_tf.operators.base.scanned_chain`): the same values and gradients.
      probes: P probe inputs whose hidden activations join the first layer (module docstring).
      mix_fixed_units: the HNP terms over the input features and the outputs (module docstring).

    Raises:
      ValueError: a family without a `layout`, an empty or non-positive ``channels``, an unknown
        activation, a negative ``init_std``.
    """

    #: its trained activity is measured by its spread over W and fresh vectors
    #: (`pbo_tf.evaluation.operator_activity`)
    spread_activity = True

    def __init__(
        self,
        q_family,
        channels: Sequence[int] = DEFAULT_CHANNELS,
        activation: str = "relu",
        residual: bool = False,
        standardise: bool = True,
        init_std: float = 1e-3,
        seed: int | None = None,
        unroll_chain: bool = False,
        probes: int = 0,
        mix_fixed_units: bool = False,
        centre_hidden: bool = False,
        **kwargs,
    ):
        layout = getattr(q_family, "layout", None)
        if layout is None:
            raise ValueError(
                f"EquivariantPBO needs an MLP Q family with a layout, got {type(q_family).__name__}"
            )
        super().__init__(q_family.d, **kwargs)
        self.channels = [int(c) for c in channels]
        if not self.channels or min(self.channels) < 1:
            raise ValueError(
                f"EquivariantPBO.channels must be a non-empty list of positive counts, got {channels}"
            )
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown EquivariantPBO activation {activation!r}; known: {list(ACTIVATIONS)}")
        if not np.isfinite(init_std) or float(init_std) < 0:
            raise ValueError(f"EquivariantPBO init_std must be a finite number >= 0, got {init_std}")
        self.activation, self.residual, self.standardise = activation, bool(residual), bool(standardise)
        self.init_std = float(init_std)
        self.unroll_chain = bool(unroll_chain)
        if isinstance(probes, bool) or int(probes) != probes or probes < 0:
            raise ValueError(f"EquivariantPBO.probes must be an integer >= 0, got {probes!r}")
        self.probes = int(probes)
        self.mix_fixed_units = bool(mix_fixed_units)
        self.centre_hidden = bool(centre_hidden)
        self.layer_shapes = [tuple(int(n) for n in layer.kernel_shape) for layer in layout]
        self._q_activation = getattr(q_family, "activation", tf.nn.relu)  # Q's hidden units, for the probes
        self._split_sizes = [size for a, b in self.layer_shapes for size in (a * b, b)]
        n_layers = len(self.layer_shapes)
        dims = [1, *self.channels, 1]
        self.mixers = []  # mixers[t][l]: the weights of operator layer t for Q layer l
        # one seed per weight the loop below builds (the first layer's with the probe matrices), then the
        # probe inputs
        count = sum(
            len(self._layer_specs(l, 1, 1, probes=t == 0))
            for t in range(len(dims) - 1)
            for l in range(n_layers)
        ) + int(self.probes > 0)
        seeds = iter(initializer_seeds(seed, count))
        for t, (c_in, c_out) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            last = t == len(dims) - 2
            per_layer = []
            for l in range(n_layers):
                weights = {}
                specs = self._layer_specs(l, c_in, c_out, probes=t == 0)
                for key, shape in specs.items():
                    # the terms (C-channel inputs) the kernel's or the bias's output sums
                    mixed = [v[0] // c_in for k, v in specs.items() if k[0] == key[0] and k[2:] in MIXED]
                    weights[key] = self.add_weight(
                        name=f"layer{t}_q{l}_{key}",
                        shape=shape,
                        initializer=self._initializer(key, last, c_in, sum(mixed), next(seeds)),
                    )
                per_layer.append(weights)
            self.mixers.append(per_layer)
        if self.probes:
            self.probe_inputs = self.add_weight(
                name="probe_inputs",
                shape=[self.probes, self.layer_shapes[0][0]],
                initializer=tf_keras.initializers.RandomNormal(stddev=1.0, seed=next(seeds)),
                trainable=False,
            )
        if self.standardise:
            self.input_mean = self.add_weight(
                name="input_mean", shape=[2 * n_layers], initializer="zeros", trainable=False
            )
            self.input_scale = self.add_weight(
                name="input_scale", shape=[2 * n_layers], initializer="ones", trainable=False
            )

    # ------------------------------------------------------------------------------------ structure
    def _layer_specs(self, l: int, c_in: int, c_out: int, probes: bool = False) -> dict[str, tuple[int, ...]]:
        """The shapes of one operator layer's weights for Q layer ``l`` (``k_*``: the kernel's output,
        ``b_*``: the bias's; ``*_emb``: the fixed units' embeddings; ``*_c``: the constants; ``*_probe``:
        the probe features', the first operator layer's with ``probes``)."""
        last_q = len(self.layer_shapes) - 1
        a, b = self.layer_shapes[l]
        n_row = 1 + 2 * (l > 0)  # row mean of W_l; W_{l-1}'s column mean at i, b_{l-1}[i]
        n_col = 2 + (l < last_q)  # column mean of W_l, b_l[j]; W_{l+1}'s row mean at j
        specs = {
            "k_self": (c_in, c_out),
            "k_row": (n_row * c_in, c_out),
            "k_col": (n_col * c_in, c_out),
            "k_all": (2 * c_in, c_out),
            "k_c": (c_out,),
            "b_self": (c_in, c_out),
            "b_col": ((1 + (l < last_q)) * c_in, c_out),
            "b_all": (2 * c_in, c_out),
            "b_c": (c_out,),
        }
        if l == 0:
            specs["k_in_emb"] = (a, c_out)
        if l == last_q:
            specs["k_out_emb"] = (b, c_out)
            specs["b_out_emb"] = (b, c_out)
        if self.mix_fixed_units and l == 0 and a > 1:  # W_0[:, j] over the input features
            specs["k_in_fixed"] = (a * c_in, a * c_out)
        if self.mix_fixed_units and l == last_q and b > 1:  # W_L[i, :] and b_L over the outputs
            specs["k_out_fixed"] = (b * c_in, b * c_out)
            specs["b_out_fixed"] = (b * c_in, b * c_out)
        if probes and self.probes:
            if l < last_q:  # Q layer l's outputs are hidden units
                specs["k_probe_col"] = (self.probes, c_out)
                specs["b_probe"] = (self.probes, c_out)
            if l > 0:  # Q layer l's inputs are hidden units
                specs["k_probe_row"] = (self.probes, c_out)
        return specs

    def _initializer(self, key: str, last: bool, c_in: int, n_terms: int, seed):
        if key.endswith("_c"):
            return "zeros"
        if last:
            return tf_keras.initializers.TruncatedNormal(stddev=self.init_std, seed=seed)
        if key.endswith("_emb"):
            return tf_keras.initializers.RandomNormal(stddev=1.0, seed=seed)
        if "probe" in key:  # He-normal over the P features (each of root mean square about 1)
            std = float(np.sqrt(2.0 / self.probes)) / TRUNCATED_NORMAL_STD
            return tf_keras.initializers.TruncatedNormal(stddev=std, seed=seed)
        # He-normal over every channel of every term the output sums (std corrected for the cut at 2σ)
        std = float(np.sqrt(2.0 / (n_terms * c_in))) / TRUNCATED_NORMAL_STD
        return tf_keras.initializers.TruncatedNormal(stddev=std, seed=seed)

    # ------------------------------------------------------------------------------- standardisation
    def adapt(self, w_set) -> None:
        """Sets the standardisation to each block's (layer kernel, layer bias) scalar mean and std over
        all entries of the set W ``[n_W, d]`` (std 1 where the block varies by at most
        `pbo_tf.operators.deep.STANDARDISE_MIN_STD`). Only for ``standardise=True``."""
        if not self.standardise:
            raise ValueError("adapt() needs an EquivariantPBO built with standardise=True")
        w = np.asarray(w_set, dtype=np.float64)
        if w.ndim != 2 or w.shape[1] != self.d:
            raise ValueError(f"adapt() needs W as [n_W, {self.d}], got shape {list(w.shape)}")
        blocks = np.split(w, np.cumsum(self._split_sizes)[:-1], axis=1)
        means = [block.mean() for block in blocks]
        stds = [block.std() for block in blocks]
        self.input_mean.assign(np.asarray(means, self.input_mean.dtype.as_numpy_dtype))
        scale = [s if s > STANDARDISE_MIN_STD else 1.0 for s in stds]
        self.input_scale.assign(np.asarray(scale, self.input_scale.dtype.as_numpy_dtype))

    # ------------------------------------------------------------------------------------ forward
    def apply(self, params):
        params = tf.convert_to_tensor(params)
        return self._apply(params, self._prepare(params.dtype))

    def chain(self, params, K, stop_gradient_between=False):
        """``Λ^k(ω)``, k = 1..K, ``[K, n_w, d]``, as one loop over the applications
        (`pbo_tf.operators.base.scanned_chain`), or written out with ``unroll_chain``; the weights are
        merged (`_prepare`) once for the K applications."""
        return self._looped_chain(params, K, stop_gradient_between, unroll=self.unroll_chain)

    def _chain_application(self, dtype):
        prepared = self._prepare(dtype)
        return lambda params: self._apply(params, prepared)

    def _prepare(self, dtype) -> dict:
        """The weights in the form `_layer` uses them, cast to ``dtype``. The terms that read the same units
        are one matmul: per hidden layer h, the features ``[col mean of W_{h-1}, b_{h-1}, row mean of
        W_h]`` of its units give W_h's row term, W_{h-1}'s column term and b_{h-1}'s term through one
        ``[3C, 3C']`` matrix of the layer weights' blocks (zeros where a term does not read a feature); the
        output units' ``[col mean of W_L, b_L]`` give W_L's column term and b_L's term; the input units'
        row means W_0's row term; the layer means ``[mean W_l, mean b_l]`` of all Q layers give the kernels'
        and biases' shared terms through one batched ``[2C, 2C']`` matmul. The same sums as the module
        docstring's, in fewer operations."""
        last_q = len(self.layer_shapes) - 1
        layers = []
        for per_layer in self.mixers:
            w = [{key: tf.cast(v, dtype) for key, v in weights.items()} for weights in per_layer]
            c = w[0]["k_self"].shape[0]  # C, the channels in
            units = [w[0]["k_row"]]  # input units: W_0's row mean → W_0's row term
            for h in range(1, last_q + 1):  # hidden layer h: [Cm_{h-1}, b_{h-1}, R_h] → ...
                k_row, b_col, b_self = w[h]["k_row"], w[h - 1]["b_col"], w[h - 1]["b_self"]
                row = tf.concat([k_row[c : 2 * c], k_row[2 * c :], k_row[:c]], axis=0)  # W_h's row term
                bias = tf.concat([b_col[:c], b_self, b_col[c:]], axis=0)  # b_{h-1}'s term
                units.append(tf.concat([row, w[h - 1]["k_col"], bias], axis=1))  # (+ W_{h-1}'s column term)
            top = w[last_q]  # output units: [Cm_L, b_L] → W_L's column term, b_L's term
            units.append(tf.concat([top["k_col"], tf.concat([top["b_col"], top["b_self"]], axis=0)], axis=1))
            # [mean W_l, mean b_l] → the kernel's shared term, the bias's (b_all reads [mean b_l, mean W_l])
            shared = tf.stack([
                tf.concat([wl["k_all"], tf.concat([wl["b_all"][c:], wl["b_all"][:c]], axis=0)], axis=1)
                for wl in w
            ])  # fmt: skip
            constants = tf.stack([tf.concat([wl["k_c"], wl["b_c"]], axis=0) for wl in w])[:, None, :]
            layers.append({"w": w, "units": units, "shared": shared, "constants": constants})
        prepared = {"layers": layers}
        if self.standardise:  # each block's scalar, repeated over the block's entries: [d]
            sizes = tf.constant(self._split_sizes)
            prepared["mean"] = tf.repeat(tf.cast(self.input_mean, dtype), sizes)
            prepared["scale"] = tf.repeat(tf.cast(self.input_scale, dtype), sizes)
        return prepared

    def _apply(self, params, prepared):
        """`apply` with the weights of `_prepare`."""
        z = (params - prepared["mean"]) / prepared["scale"] if self.standardise else params
        z = tf.split(z, self._split_sizes, axis=-1)  # kernel, bias, kernel, bias, ... (flat)
        h = [
            (tf.reshape(z[2 * l], [-1, a, b, 1]), z[2 * l + 1][..., None])  # one channel
            for l, (a, b) in enumerate(self.layer_shapes)
        ]
        act = ACTIVATIONS[self.activation]
        probe = None
        if self.probes:
            probe = self._probe_features(tf.split(params, self._split_sizes, axis=-1))
        for t, layer in enumerate(prepared["layers"]):
            h = self._layer(h, layer, probe if t == 0 else None)
            if t < len(prepared["layers"]) - 1:
                h = [(act(k), act(b)) for k, b in h]
        if self.centre_hidden:
            h = self._centre_hidden(h)
        f = tf.concat(
            [piece for (a, b), (k, bias) in zip(self.layer_shapes, h, strict=True)
             for piece in (tf.reshape(k, [-1, a * b]), bias[..., 0])],
            axis=-1,
        )  # fmt: skip
        if self.standardise:
            return (params if self.residual else prepared["mean"]) + f * prepared["scale"]
        return params + f if self.residual else f

    @staticmethod
    def _centre_hidden(h):
        """``centre_hidden``: the update ``f`` less its mean over every hidden-unit axis of each block (a
        kernel's hidden input units, its hidden output units, both for a kernel between two hidden layers; a
        hidden layer's bias); the output layer's bias keeps its update."""
        last_q, out = len(h) - 1, []
        for l, (k, b) in enumerate(h):
            if l > 0:  # the rows are hidden units
                k = k - tf.reduce_mean(k, axis=1, keepdims=True)
            if l < last_q:  # the columns and the bias are hidden units
                k = k - tf.reduce_mean(k, axis=2, keepdims=True)
                b = b - tf.reduce_mean(b, axis=1, keepdims=True)
            out.append((k, b))
        return out

    def _probe_features(self, pieces):
        """Per hidden layer, ``[n, width, P]``: each unit's activations at the probe inputs under ``Q_ω``
        (its ReLU or leaky ReLU; ``pieces``: ω's blocks, not standardised), over their root mean square in
        the layer."""
        dtype = pieces[0].dtype
        units = tf.cast(self.probe_inputs, dtype)[None]  # [1, P, a_0]
        features = []
        for l, (a, b) in enumerate(self.layer_shapes[:-1]):
            kernel = tf.reshape(pieces[2 * l], [-1, a, b])
            units = self._q_activation(tf.matmul(units, kernel) + pieces[2 * l + 1][:, None, :])  # [n, P, b]
            rms = tf.sqrt(tf.reduce_mean(tf.square(units), axis=[1, 2], keepdims=True) + 1e-12)
            features.append(tf.transpose(units / rms, [0, 2, 1]))
        return features

    def _layer(self, h, layer, probe=None):
        """One operator layer: per Q layer ``(kernel [n, a, b, C], bias [n, b, C])`` → the same with C'
        (``layer``: one layer of `_prepare`; ``probe``: `_probe_features`, added in the first layer)."""
        last_q = len(h) - 1
        w = layer["w"]
        row_means = [tf.reduce_mean(k, axis=2) for k, _ in h]  # [n, a, C]: mean over a unit's outgoing
        col_means = [tf.reduce_mean(k, axis=1) for k, _ in h]  # [n, b, C]: mean over a unit's incoming
        rows, cols, biases = [None] * len(h), [None] * len(h), [None] * len(h)  # [n, a|b, C'] terms
        rows[0] = _mix(row_means[0], layer["units"][0])
        for g in range(1, last_q + 1):
            features = tf.concat([col_means[g - 1], h[g - 1][1], row_means[g]], axis=-1)
            rows[g], cols[g - 1], biases[g - 1] = tf.split(_mix(features, layer["units"][g]), 3, axis=-1)
        features = tf.concat([col_means[last_q], h[last_q][1]], axis=-1)
        cols[last_q], biases[last_q] = tf.split(_mix(features, layer["units"][-1]), 2, axis=-1)
        means = tf.stack(
            [
                tf.concat([tf.reduce_mean(col_mean, axis=1), tf.reduce_mean(b, axis=1)], axis=-1)
                for col_mean, (_, b) in zip(col_means, h, strict=True)
            ]
        )  # [L + 1, n, 2C]: each Q layer's kernel mean and bias mean
        shared = tf.matmul(means, layer["shared"]) + layer["constants"]  # [L + 1, n, 2C']
        c_out = layer["constants"].shape[-1] // 2
        out = []
        for l, (k, b) in enumerate(h):
            wl = w[l]
            row_term = rows[l] + shared[l, :, None, :c_out]  # [n, a, C']
            col_term = cols[l]  # [n, b, C']
            new_b = biases[l] + shared[l, :, None, c_out:]  # [n, b, C']
            if l == 0:
                row_term = row_term + wl["k_in_emb"]
            if l == last_q:
                col_term = col_term + wl["k_out_emb"]
                new_b = new_b + wl["b_out_emb"]
            if probe is not None and l < last_q:
                col_term = col_term + _mix(probe[l], wl["k_probe_col"])
                new_b = new_b + _mix(probe[l], wl["b_probe"])
            if probe is not None and l > 0:
                row_term = row_term + _mix(probe[l - 1], wl["k_probe_row"])
            new_k = _mix(k, wl["k_self"]) + row_term[:, :, None, :] + col_term[:, None, :, :]
            a, b_n = self.layer_shapes[l]
            c_in = k.shape[-1]
            if "k_in_fixed" in wl:  # unit j's incoming weights from every input feature, one matrix per pair
                column = tf.reshape(tf.transpose(k, [0, 2, 1, 3]), [-1, a * c_in])  # [n·b, a·C]
                mixed = tf.reshape(tf.matmul(column, wl["k_in_fixed"]), [-1, b_n, a, c_out])
                new_k = new_k + tf.transpose(mixed, [0, 2, 1, 3])
            if "k_out_fixed" in wl:  # unit i's outgoing weights to every output, and the output biases
                row = tf.reshape(k, [-1, b_n * c_in])  # [n·a, b·C]
                new_k = new_k + tf.reshape(tf.matmul(row, wl["k_out_fixed"]), [-1, a, b_n, c_out])
                bias_row = tf.reshape(b, [-1, b_n * c_in])
                new_b = new_b + tf.reshape(tf.matmul(bias_row, wl["b_out_fixed"]), [-1, b_n, c_out])
            out.append((new_k, new_b))
        return out

    @classmethod
    def from_config(cls, config):
        """The operator of `get_config`'s ``config``: the family's layout rebuilt from its ``layers``."""
        config = dict(config)
        shapes = [tuple(int(n) for n in shape) for shape in config.pop("layers")]
        d = config.pop("d")
        return cls(_LayerShapes(shapes, d), **config)

    def get_config(self):
        return {
            "d": self.d,
            "layers": [list(shape) for shape in self.layer_shapes],
            "channels": list(self.channels),
            "activation": self.activation,
            "residual": self.residual,
            "standardise": self.standardise,
            "init_std": self.init_std,
            "unroll_chain": self.unroll_chain,
            "probes": self.probes,
            "mix_fixed_units": self.mix_fixed_units,
            "centre_hidden": self.centre_hidden,
            "name": self.name,
        }


class _LayerShapes:
    """What `EquivariantPBO` reads of a Q family, rebuilt from its layers' kernel shapes (`from_config`)."""

    def __init__(self, shapes, d: int):
        self.layout, offset = [], 0
        for a, b in shapes:
            self.layout.append(LayerLayout((a, b), (b,), offset))
            offset += a * b + b
        if offset != int(d):
            raise ValueError(f"EquivariantPBO layers {shapes} hold {offset} parameters, not d = {d}")
        self.d = offset


def build_equivariant(
    q_family,
    *,
    channels: Sequence[int] = DEFAULT_CHANNELS,
    activation: str = "relu",
    residual: bool = False,
    standardise: bool = True,
    init_std: float = 1e-3,
    seed: int | None = None,
    unroll_chain: bool = False,
    probes: int = 0,
    mix_fixed_units: bool = False,
    centre_hidden: bool = False,
    name: str | None = None,
    w_set=None,
) -> EquivariantPBO:
    """The ``equivariant`` kind: an `EquivariantPBO` on the family's parameters; a standardised one takes
    its statistics from the set W ``w_set`` when it is given, else from the checkpoint that restores it."""
    pbo = EquivariantPBO(
        q_family,
        channels=channels,
        activation=activation,
        residual=residual,
        standardise=standardise,
        init_std=init_std,
        seed=seed,
        unroll_chain=unroll_chain,
        probes=probes,
        mix_fixed_units=mix_fixed_units,
        centre_hidden=centre_hidden,
        **({"name": name} if name else {}),
    )
    if standardise and w_set is not None:
        pbo.adapt(w_set)
    return pbo
