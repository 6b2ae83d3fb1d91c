"""Eq. (4), the fixed-point term, in its closed form (linear PBO) and its deep form.

The closed form asks the operator's fixed point ``ω* = Λ_φ^∞`` (`pbo_tf.operators.base.PBO.fixed_point`,
differentiable in φ) to be the projected Bellman fixed point, ``F = mean_{D_b} (ΓQ_{ω*} − Q_{ω*})²`` on the
batch's pairs, differentiated through both sides and the linear solve. A deep operator has no closed-form
fixed point: with ``iterations = N > 0`` the term is taken at an estimate ``ω̄`` of the point its iterates
go to, the frozen target's ``Λ̄^N(ω₀)`` recomputed at every refresh (`pbo_tf.fixed_point.FixedPointEstimate`),
as ``F = mean (ΓQ_{ω̄} − Q_{Λ_φ(ω̄)})²`` with ``ω̄`` and its targets held fixed: one more Bellman iteration
asked of the operator where its iterates go past K, which Eq. (3)'s chain never asks. When ``ω̄`` is a
fixed point of the operator the two forms have the same value.
"""

from __future__ import annotations

import copy

import numpy as np
import tensorflow as tf

from pbo_tf.fixed_point import (
    FIXED_POINT_AT,
    FIXED_POINT_FROM,
    FixedPointEstimate,
    check_fixed_point_radius,
)
from pbo_tf.loss_terms.base import LossTerm, is_one


class FixedPointTerm(LossTerm):
    """Eq. (4)'s term (see the module docstring).

    Args:
      weight: the term's weight λ, ``L = ... + λ F`` (1: Eq. 4 as written).
      iterations: 0: at the closed-form fixed point (needs an operator that has one). N > 0: at
        ``ω̄ = Λ̄^N`` of the frozen target, recomputed at every refresh.
      radius: None: ``ω̄`` wherever the iterates go; r: the last iterate of the chain inside the ball of
        radius ``r · max_{ω ∈ W} ‖ω‖``.
      start: ``"omega0"``: ``ω̄ = Λ̄^N(ω₀)``; ``"w"``: ``Λ̄^N(ω)`` for every ω of W, F the mean over them.
      at: ``"last"``: at ``Λ̄^N`` alone; ``"past_k"``: at every point ``Λ̄^n(ω₀)``, n = K + 1..N, F the mean
        over them (needs N > K and ``start="omega0"``).
      warmup: 0: the term at its full weight from the start. A fraction f in (0, 1]: its scale ramps
        linearly from 0 to 1 over the first fraction f of the run, counted in refreshes (the owner's
        progress at each refresh).
      balance: scale F to the size of the terms before it, ``sg(L_before / F) · F`` (``sg`` stops the
        gradient): both then weigh the same whatever their scales.

    The term's loss (metric ``fixed_point``) is F times its warm-up and balance scales; with either, the
    metrics ``fixed_point/unscaled`` (F) and ``fixed_point/scale`` are reported too.

    Raises:
      ValueError: an option out of its range, or (at `bind`) options the operator or W cannot have.
    """

    name = "fixed_point"

    def __init__(
        self,
        weight: float = 1.0,
        iterations: int = 0,
        radius: float | None = None,
        start: str = "omega0",
        at: str = "last",
        warmup: float = 0.0,
        balance: bool = False,
    ):
        super().__init__(weight)
        n = iterations
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"FixedPointTerm.iterations must be an integer >= 0, got {n!r}")
        if start not in FIXED_POINT_FROM:
            raise ValueError(f"FixedPointTerm.start must be one of {FIXED_POINT_FROM}, got {start!r}")
        if start != "omega0" and not n:
            raise ValueError(
                f"FixedPointTerm.start={start!r} chooses where the chains of the estimate Λ̄^N start: set "
                "FixedPointTerm.iterations > 0"
            )
        if at not in FIXED_POINT_AT:
            raise ValueError(f"FixedPointTerm.at must be one of {FIXED_POINT_AT}, got {at!r}")
        if isinstance(warmup, bool) or not isinstance(warmup, (int, float)) or not 0 <= warmup <= 1:
            raise ValueError(f"FixedPointTerm.warmup must be a fraction of the run in [0, 1], got {warmup!r}")
        if radius is not None and not n:
            raise ValueError(
                "FixedPointTerm.radius bounds the chains Λ̄^N (from ω₀ or from W) of the estimate: set "
                "FixedPointTerm.iterations > 0"
            )
        self.iterations, self.radius, self.start, self.at = int(n), radius, start, at
        self.warmup, self.balance = float(warmup), bool(balance)
        self.estimate: FixedPointEstimate | None = None
        self._points = None  # () -> ω̄ [m, d] for a bound deep term, or None for the closed form
        self._scale = None  # the warm-up's factor, set at each refresh from the run's progress

    # ------------------------------------------------------------------------------------ lifecycle
    def bind(self, learner) -> FixedPointTerm:
        """A copy holding this learner's estimate ``Λ̄^N`` (and warm-up scale), the options checked."""
        K, w_set = learner.K, learner.w_set.numpy()
        if not self.iterations and not learner.pbo.has_fixed_point:
            raise ValueError(
                f"{type(learner.pbo).__name__} has no closed-form fixed point: the fixed-point term needs "
                "FixedPointTerm.iterations > 0 (its estimate Λ̄^N(ω₀))"
            )
        max_norm = check_fixed_point_radius(self.iterations, self.radius, w_set)
        if self.at == "past_k" and (self.start != "omega0" or self.iterations <= K):
            raise ValueError(
                "FixedPointTerm.at='past_k' takes the term at Λ̄^n(ω₀), n = K + 1..N: it needs "
                f"start='omega0' and iterations > K={K}, got {self.start!r} and {self.iterations}"
            )
        bound = copy.copy(self)
        if self.iterations and self.start == "w":
            bound.estimate = FixedPointEstimate(
                learner.target_pbo, None, self.iterations, max_norm=max_norm, starts=w_set
            )
        elif self.iterations:
            bound.estimate = FixedPointEstimate(
                learner.target_pbo,
                learner.omega0,
                self.iterations,
                max_norm=max_norm,
                first=K + 1 if self.at == "past_k" else None,
            )
        if bound.estimate is not None:
            bound._points = bound.estimate.read
        if self.warmup:
            bound._scale = tf.Variable(1.0, trainable=False, name="fixed_point_weight_scale")
        return bound

    def with_points(self, points) -> FixedPointTerm:
        """A copy taken at the given estimate ``ω̄`` ``[d]`` or ``[m, d]`` (a tensor, held fixed), for callers
        that compute it themselves (`pbo_tf.losses.pbo_loss`)."""
        bound = copy.copy(self)
        bound._points = lambda: points
        return bound

    def on_refresh(self, learner, progress) -> None:
        if self._scale is not None:
            if progress is None:
                raise ValueError(
                    "FixedPointTerm.warmup needs the run's progress at each refresh (sync_target)"
                )
            self._scale.assign(tf.minimum(tf.cast(progress, tf.float32) / self.warmup, 1.0))
        if self.estimate is not None:
            self.estimate.update()

    # ------------------------------------------------------------------------------------ the term
    def __call__(self, context):
        pbo, d = context.pbo, context.q_family.d
        if self._points is None:
            star = pbo.fixed_point()[None, :]
            fp_targets, fp_q = context.bellman_targets(star), context.q_sa(star)
        else:
            estimate = tf.stop_gradient(tf.reshape(tf.cast(self._points(), tf.float32), [-1, d]))
            fp_targets = tf.stop_gradient(context.bellman_targets(estimate))
            fp_q = context.q_sa(pbo(estimate))
        value = tf.reduce_mean(tf.square(fp_targets - fp_q))
        scale = 1.0
        if self._scale is not None:
            scale = self._scale.read_value()
        if self.balance:
            scale = scale * tf.stop_gradient(context.loss_so_far / tf.maximum(value, 1e-12))
        if is_one(scale):
            return value, {}
        return scale * value, {"unscaled": value, "scale": scale}

    # ------------------------------------------------------------------------------------ reporting
    def records(self) -> dict:
        """The options that differ from the defaults, under the names ``metrics.json`` has always used."""
        records = {}
        if self.iterations:
            records["fixed_point_iterations"] = self.iterations
        if self.start != "omega0":
            records["fixed_point_from"] = self.start
        if self.radius is not None:
            records["fixed_point_radius"] = float(self.radius)
        if self.at != "last":
            records["fixed_point_at"] = self.at
        if not is_one(self.weight):
            records["fixed_point_weight"] = self.weight
        if self.balance:
            records["fixed_point_balance"] = True
        if self.warmup:
            records["fixed_point_warmup"] = self.warmup
        return records

    def monitor(self) -> tuple[dict, str] | None:
        """The bounded estimate's progress (which iterate ``ω̄`` is), or None."""
        return self.estimate.progress() if self.estimate is not None else None

    def diagnose(self, nonfinite_q) -> str:
        if self.estimate is None:
            return ""
        estimate = self.estimate.value.numpy()
        name = f"Λ̄^{self.iterations}({self.estimate.start_name})"
        if not np.all(np.isfinite(estimate)):
            return (
                f"the fixed-point term's estimate {name} is non-finite: the target operator's "
                "iterates blow up past K (try fewer FixedPointTerm.iterations)"
            )
        return nonfinite_q(tf.constant(estimate), name)
