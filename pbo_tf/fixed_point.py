"""The deep PBO's fixed-point estimate: where Eq. (4)'s term is taken when the operator has no closed-form
fixed point, and the checks of the options that choose it.

A linear PBO's fixed point ``ω* = Λ_φ^∞`` has a closed form (`pbo_tf.operators.base.PBO.fixed_point`); a deep
operator's has none. Its estimate is ``ω̄ = Λ̄^N(ω₀)``, the frozen target operator applied N times to ω₀,
recomputed whenever the target changes (`FixedPointEstimate`), optionally cut where the chain leaves a ball
(``max_norm``) or taken from every member of W (``starts``). The fixed-point loss term
(`pbo_tf.loss_terms.FixedPointTerm`) owns one per learner and takes the term at it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from pbo_tf.operators.base import PBO

#: Where the estimate's chains start: ω₀ alone, or every member of W.
FIXED_POINT_FROM = ("omega0", "w")
#: Which points of ω₀'s chain the term is taken at: the last, Λ̄^N, or every one past K.
FIXED_POINT_AT = ("last", "past_k")


class FixedPointEstimate(tf.Module):
    """``ω̄ = Λ̄^N(ω₀)``, the frozen target operator applied N times to ω₀: the point at which
    `pbo_tf.loss_terms.FixedPointTerm` takes a deep operator's fixed-point term. Its owner (that term)
    calls `update` whenever the target operator changes; `value` is a non-trainable variable.

    ``max_norm`` bounds the estimate. The iterates converge only while the target operator is contracting
    along ω₀'s chain; when it expands there (as a deep operator can, away from the W it was trained on), the
    chain grows geometrically, ``ω̄`` is a point no iterate of interest visits, its Bellman targets are huge,
    and one step of the term overflows the gradient (Lunar Lander, ``prodqn_fixed_point``: ``‖Λ̄^30(ω₀)‖``
    ≈ 6·10⁴ after a refresh, next to ‖ω‖ ≈ 7 on W, and the step after it non-finite). With ``max_norm``,
    `update` takes the last iterate of the chain before the first one that is non-finite or longer than
    ``max_norm``: the point where the chain leaves the region, at which one more Bellman iteration is then
    asked of the operator. A chain that stays inside gives ``Λ̄^N(ω₀)`` exactly (the bound changes nothing).
    `iterations_used` holds the n of the current ``ω̄ = Λ̄^n(ω₀)``.

    ``starts`` (instead of ``omega0``), ``[m, d]``: m chains, one from each row (``FixedPointTerm.start="w"``
    passes W), and ``ω̄`` is ``[m, d]``, ``Λ̄^N`` of each row; with ``max_norm`` each row's chain is
    cut where it leaves the ball, and `iterations_used` is the least n over the rows.

    ``first`` (from ``omega0`` only): ``ω̄`` is every point ``Λ̄^n(ω₀)``, n = first..N, ``[N − first + 1, d]``
    (the term is then the mean over them: ``FixedPointTerm.at="past_k"`` takes n = K + 1..N);
    with ``max_norm`` the points past the cut are the cut's iterate.

    Raises:
      ValueError: neither or both of ``omega0`` and ``starts``, an ``omega0`` that is not ``[d]``, ``starts``
        that are not ``[m, d]``, a ``max_norm`` that is not a positive number, or a ``first`` with ``starts``
        or outside 0..N.
    """

    def __init__(
        self,
        target_pbo: PBO,
        omega0,
        iterations: int,
        max_norm: float | None = None,
        starts=None,
        first: int | None = None,
    ):
        super().__init__(name="fixed_point_estimate")
        d = target_pbo.d
        if starts is not None:
            if omega0 is not None:
                raise ValueError("FixedPointEstimate takes omega0 or starts, not both")
            starts = np.asarray(starts, dtype=np.float32)
            if starts.ndim != 2 or starts.shape[0] < 1 or starts.shape[1] != d:
                raise ValueError(f"starts must be [m, {d}] with m >= 1, got {list(starts.shape)}")
            self.start_name = "W"
        else:
            if omega0 is None:
                raise ValueError("FixedPointTerm.iterations > 0 needs omega0, where the iterates start")
            omega0 = np.asarray(omega0, dtype=np.float32).reshape(-1)
            if omega0.shape != (d,):
                raise ValueError(f"omega0 must be [{d}], got {list(omega0.shape)}")
            starts = omega0[None, :]
            self.start_name = "ω₀"
        if max_norm is not None and not (np.isfinite(max_norm) and max_norm > 0):
            raise ValueError(f"max_norm must be a positive number or None, got {max_norm!r}")
        self.iterations = int(iterations)
        if first is not None:
            if self.start_name != "ω₀":
                raise ValueError("FixedPointEstimate's first (points of one chain) needs omega0, not starts")
            if not 0 <= int(first) <= self.iterations:
                raise ValueError(f"first must lie in 0..{self.iterations} (the iterations), got {first}")
        self.first = None if first is None else int(first)
        self.max_norm = None if max_norm is None else float(max_norm)
        self._starts = tf.constant(starts)
        self._apply = target_pbo.__call__  # a bound method: the operator stays its owner's to checkpoint
        rows = 1 if first is None else self.iterations - self.first + 1
        self.value = tf.Variable(
            tf.tile(self._starts[:1], [rows, 1]) if first is not None else self._starts,
            trainable=False,
            name="value",
        )
        self.iterations_used = tf.Variable(0, trainable=False, dtype=tf.int32, name="iterations_used")

    def update(self) -> None:
        """``ω̄ ← Λ̄^N(ω₀)`` of the target operator as it is now (bounded by ``max_norm``, see above)."""
        chain = self._chain()  # [N + 1, m, d]
        if self.first is not None:
            self._update_points(chain[:, 0])
            return
        if self.max_norm is None:
            self.iterations_used.assign(self.iterations)
            self.value.assign(chain[-1])
            return
        norms = tf.norm(tf.cast(chain, tf.float64), axis=-1)  # [N + 1, m] (no overflow below float32's max)
        inside = tf.math.is_finite(norms) & (norms <= self.max_norm)
        # per row, the iterates before the first that left: the length of inside's leading run of True, - 1
        n = tf.maximum(tf.reduce_sum(tf.math.cumprod(tf.cast(inside, tf.int32), axis=0), axis=0) - 1, 0)
        self.iterations_used.assign(tf.reduce_min(n))
        self.value.assign(tf.gather(tf.transpose(chain, [1, 0, 2]), n, batch_dims=1))  # row i: chain[n_i, i]

    def _chain(self) -> tf.Tensor:
        """``Λ̄^n`` of the starts, n = 0..N, ``[N + 1, m, d]``, in a graph loop: one application is traced and
        compiled, however large N (`PBO.iterate` writes the N applications out)."""
        chain = tf.TensorArray(tf.float32, size=self.iterations + 1, element_shape=self._starts.shape)

        def body(n, omega, chain):
            omega = self._apply(omega)
            return n + 1, omega, chain.write(n, omega)

        _, _, chain = tf.while_loop(
            lambda n, omega, chain: n <= self.iterations,
            body,
            (tf.constant(1), self._starts, chain.write(0, self._starts)),
            maximum_iterations=self.iterations,
        )
        return chain.stack()

    def _update_points(self, chain: tf.Tensor) -> None:
        """``ω̄ ← Λ̄^n(ω₀)``, n = first..N, of the chain ``[N + 1, d]``; past a cut, the cut's iterate."""
        n = tf.constant(self.iterations)
        if self.max_norm is not None:
            norms = tf.norm(tf.cast(chain, tf.float64), axis=-1)
            inside = tf.math.is_finite(norms) & (norms <= self.max_norm)
            n = tf.maximum(tf.reduce_sum(tf.math.cumprod(tf.cast(inside, tf.int32))) - 1, 0)
        self.iterations_used.assign(n)
        self.value.assign(tf.gather(chain, tf.minimum(tf.range(self.first, self.iterations + 1), n)))

    def read(self) -> tf.Tensor:
        """``ω̄``, ``[1, d]`` (``[m, d]`` with ``starts``)."""
        return self.value.read_value()

    def progress(self) -> tuple[dict, str] | None:
        """For a progress line and TensorBoard, with ``max_norm``: which iterate ``ω̄`` is
        (``operator/fixed_point_iterations_used``, below N when the target's chain left the ball; the least
        over the rows with ``starts``) and its text; None without a bound (``ω̄`` is then always ``Λ̄^N``)."""
        if self.max_norm is None:
            return None
        n = int(self.iterations_used.numpy())
        where = f"Λ̄^{n}(ω₀)" if self.start_name == "ω₀" else f"Λ̄^≥{n}(W)"
        return {"operator/fixed_point_iterations_used": n}, f"fixed point at {where} of {self.iterations}"


def check_fixed_point_radius(fixed_point_iterations: int, fixed_point_radius, w_set) -> float | None:
    """Validates ``fixed_point_radius`` (a learner's bound on `FixedPointEstimate`) and returns the bound it
    sets, ``radius · max_{ω ∈ W} ‖ω‖``, or None (no bound).

    Raises:
      ValueError: a radius that is not a positive number, or one without ``fixed_point_iterations > 0``.
    """
    radius = fixed_point_radius
    if radius is None:
        return None
    if isinstance(radius, bool) or not isinstance(radius, (int, float, np.number)) or not radius > 0:
        raise ValueError(f"FixedPointTerm.radius must be a positive number or None, got {radius!r}")
    if not np.isfinite(radius):
        raise ValueError(f"FixedPointTerm.radius must be finite, got {radius!r}")
    if not fixed_point_iterations:
        raise ValueError(
            "FixedPointTerm.radius bounds the chains Λ̄^N (from ω₀ or from W) of the estimate: set "
            "FixedPointTerm.iterations > 0"
        )
    largest = float(np.max(np.linalg.norm(np.asarray(w_set, dtype=np.float64), axis=-1)))
    return float(radius) * max(largest, np.finfo(np.float32).tiny)
