"""Have the hidden units of an MLP Q network become copies of one another? The alignment of its units.

Permuting the hidden units of ``Q_ω`` leaves the function unchanged, so a permutation-equivariant operator
(`pbo_tf.operators.EquivariantPBO`) updates every unit of a layer by the same rule; terms that treat all
units alike can write one common vector into each of them, and applied K times that can leave a layer whose
units compute nearly the same feature (a network of width one that happens to be stored ``width`` times).
This measures it on parameter vectors of a `pbo_tf.q.FlatMLPQ` / `pbo_tf.q.PerActionMLPQ` family (any
object with a ``layout`` of `pbo_tf.q.mlp.LayerLayout`):

* ``unit_alignment(q_family, params)``: per hidden layer h, the mean over pairs of units ``j < j'`` of the
  cosine between their incoming weight vectors (the columns j and j' of the kernel ``W_h``), ``[n, H]``
  for ``params [n, d]``. Independent random columns give about 0; units that are positive multiples of
  one another give 1. A unit whose column is zero counts as cosine 0 with every other.

Read on the iterates ``Λ^k(ω₀)`` of a run (``iterates.npz``): ω₀ drawn by Keras' initialisation starts
near 0; `docs/operator_study.md` gives what the equivariant operator's iterates reach.
"""

from __future__ import annotations

import numpy as np


def unit_alignment(q_family, params) -> np.ndarray:
    """``[n, H]``: per parameter vector and hidden layer, the mean pairwise cosine of the units' incoming
    weight vectors (``params``: ``[d]`` or ``[n, d]``; a ``[d]`` input gives ``[H]``)."""
    layout = getattr(q_family, "layout", None)
    if layout is None:
        raise ValueError(f"unit_alignment needs an MLP Q family with a layout, got {type(q_family).__name__}")
    params = np.asarray(params, np.float64)
    single = params.ndim == 1
    params = np.atleast_2d(params)
    if params.shape[-1] != q_family.d:
        raise ValueError(f"unit_alignment needs parameters of size d = {q_family.d}, got {params.shape[-1]}")
    out = []
    for layer in layout[:-1]:  # the layers whose output units are hidden
        b = layer.kernel_shape[1]
        kernel = params[:, layer.kernel_slice].reshape(-1, *layer.kernel_shape)
        norms = np.linalg.norm(kernel, axis=1, keepdims=True)
        unit = np.divide(kernel, norms, out=np.zeros_like(kernel), where=norms > 0)
        summed = unit.sum(axis=2)  # Σ_j u_j: |Σ u_j|² = Σ_j |u_j|² + 2 Σ_{j<j'} u_j·u_j'
        squares = (unit**2).sum(axis=(1, 2))
        pairs = b * (b - 1) / 2
        cross = ((summed**2).sum(axis=1) - squares) / 2
        out.append(cross / pairs if pairs else np.zeros(len(params)))
    result = np.stack(out, axis=1) if out else np.zeros((len(params), 0))
    return result[0] if single else result
