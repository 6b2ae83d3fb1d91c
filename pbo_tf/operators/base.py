"""The PBO interface: a Keras layer mapping a batch of Q parameters to Q parameters, ``[n_w, d] → [n_w, d]``.

A projected Bellman operator (paper Def. 1) acts on the parameters ``ω`` of ``Q_ω``; once learned it is
applied any number of times to ``ω_0`` without new samples. Subclasses implement `apply`; operators with
a closed-form, differentiable fixed point also implement `fixed_point`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from pbo_tf.q.base import check_params


def initializer_seeds(seed: int | None, n: int) -> list[int | None]:
    """Seeds of an operator's ``n`` random initialisations, one per weight.

    Args:
      seed: the operator's seed, or None.
      n: how many weights draw their initial value.

    Returns:
      ``n`` distinct non-negative int32 seeds drawn from ``seed`` (numpy's `SeedSequence`), so that the same
      seed gives the same weights whatever the global random state; ``[None] * n`` for ``seed=None``: the
      initialisers then draw from TensorFlow's global generator (which `tf_keras.utils.set_random_seed`
      seeds).
    """
    if seed is None:
        return [None] * int(n)
    state = np.random.SeedSequence(int(seed)).generate_state(int(n))
    return [int(s) for s in state % np.uint32(2**31)]


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

    def chain(self, params: tf.Tensor, K: int, stop_gradient_between: bool = False) -> tf.Tensor:
        """``Λ^k(ω)`` for ``k = 1..K``, differentiable through the compositions: ``[n_w, d] → [K, n_w, d]``
        (the prediction side of the PBO loss). ``stop_gradient_between`` stops the gradient between
        compositions. Subclasses may compute the same values and gradients faster (`DeepPBO`)."""
        params = check_params(params, self.d, type(self).__name__)
        return composed_chain(self, params, K, stop_gradient_between)

    def _looped_chain(self, params, K, stop_gradient_between=False, unroll=False) -> tf.Tensor:
        """`chain` as one loop over the K applications of `apply` (`scanned_chain`), or written out with
        ``unroll`` (`composed_chain`): the same values and gradients, for operators of many small ops."""
        params = check_params(params, self.d, type(self).__name__)
        self.ensure_built()
        apply = self._chain_application(params.dtype)
        return (composed_chain if unroll else scanned_chain)(apply, params, K, stop_gradient_between)

    def _chain_application(self, dtype):
        """The one application that `_looped_chain` repeats K times on ``dtype`` parameters: `apply`;
        subclasses may return one that reuses work done once for the K applications."""
        return self.apply

    def iterate(self, params: tf.Tensor, k: int) -> tf.Tensor:
        """``Λ^j(ω)`` for ``j = 0..k``, stacked: ``[n_w, d] → [k + 1, n_w, d]``."""
        params = check_params(params, self.d, type(self).__name__)
        out = [params]
        for _ in range(int(k)):
            out.append(self(out[-1]))
        return tf.stack(out)

    @classmethod
    def _apply_stacked(cls, pbos: Sequence[PBO], params: tf.Tensor) -> tf.Tensor:
        """`apply_stacked` for operators of this class; subclasses batch their weights over seeds."""
        return tf.stack([pbo(params[i]) for i, pbo in enumerate(pbos)])

    @classmethod
    def _chain_stacked(cls, pbos: Sequence[PBO], params: tf.Tensor, K: int, stop_gradient_between: bool):
        """`chain_stacked` for operators of this class."""
        return composed_chain(lambda p: cls._apply_stacked(pbos, p), params, K, stop_gradient_between)

    def fixed_point(self) -> tf.Tensor:
        """``Λ^∞ = ω*`` with ``ω* = Λ(ω*)``, ``[d]``; only where `has_fixed_point`."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form fixed point")

    def ensure_built(self) -> None:
        """Creates the weights (by calling the layer once on zeros) so they can be copied or restored."""
        if not self.built:
            self(tf.zeros([1, self.d]))


def check_iterations(K) -> int:
    """``K`` (the number of Bellman iterations) as an int, or a ValueError naming it when it is below 1."""
    if int(K) < 1:
        raise ValueError(f"K (number of Bellman iterations) must be >= 1, got {K}")
    return int(K)


def composed_chain(apply, params: tf.Tensor, K: int, stop_gradient_between: bool = False) -> tf.Tensor:
    """``apply`` composed k times for ``k = 1..K``, stacked: ``[…, n_w, d] → [K, …, n_w, d]``; the
    gradient flows through every composition unless ``stop_gradient_between``."""
    predicted, current = [], params
    for _ in range(check_iterations(K)):
        current = apply(tf.stop_gradient(current) if stop_gradient_between else current)
        predicted.append(current)
    return tf.stack(predicted)


def scanned_chain(apply, params: tf.Tensor, K: int, stop_gradient_between: bool = False) -> tf.Tensor:
    """The values and gradients of `composed_chain`, with the K applications as one loop (`tf.scan`): a
    traced or compiled loss then holds one application instead of K (an operator of many small ops
    compiles K times faster)."""

    def step(x, _):
        return apply(tf.stop_gradient(x) if stop_gradient_between else x)

    return tf.scan(step, tf.range(check_iterations(K)), initializer=params)


def _check_stacked(pbos: Sequence[PBO], params, what: str) -> tuple[list, tf.Tensor]:
    pbos = list(pbos)
    if not pbos:
        raise ValueError(f"{what} needs at least one operator")
    kinds = {type(p) for p in pbos}
    if len(kinds) > 1:
        names = sorted(k.__name__ for k in kinds)
        raise ValueError(f"{what} needs operators of one class, got {names}")
    params = tf.convert_to_tensor(params)
    if params.shape.rank != 3 or params.shape[0] != len(pbos) or params.shape[2] != pbos[0].d:
        raise ValueError(
            f"{what}: params must be [S={len(pbos)}, n_w, d={pbos[0].d}], got {params.shape.as_list()}"
        )
    for pbo in pbos:
        pbo.ensure_built()
    return pbos, params


def chain_stacked(pbos: Sequence[PBO], params: tf.Tensor, K: int, stop_gradient_between: bool = False):
    """`PBO.chain` of S operators (one per seed) on their own parameters: ``[S, n_w, d] → [K, S, n_w, d]``,
    ``out[:, i] = pbos[i].chain(params[i], K)``, as one computation where the class batches over seeds
    (`DeepPBO`). Gradients flow to each operator's own variables."""
    pbos, params = _check_stacked(pbos, params, "chain_stacked")
    return type(pbos[0])._chain_stacked(pbos, params, K, stop_gradient_between)


def apply_stacked(pbos: Sequence[PBO], params: tf.Tensor) -> tf.Tensor:
    """One application of S operators (one per seed) to their own parameters: ``[S, n_w, d] → [S, n_w, d]``,
    ``out[i] = pbos[i](params[i])``.

    The operators must be of one class and shape. `DeepPBO` stacks its kernels ``[S, in, out]`` and runs
    batched matmuls, so S seeds' chains are one computation; other classes apply each operator in turn.
    Gradients flow to each operator's own variables.
    """
    pbos, params = _check_stacked(pbos, params, "apply_stacked")
    return type(pbos[0])._apply_stacked(pbos, params)
