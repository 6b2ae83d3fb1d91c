"""The PBO learner: what ProFQI (offline) and ProDQN (online) share of learning an operator ``Λ_φ``.

Paper Algorithm 1 trains ``φ`` against a frozen copy ``φ̄`` on a fixed set W of Q parameters. Offline and
online differ in where the transitions come from and when ``φ̄`` is refreshed; everything else is this one
component, which holds:

* the operator ``Λ_φ`` and its target copy ``Λ_φ̄``, and the refresh ``φ̄ ← τ φ + (1 − τ) φ̄`` (`sync_target`;
  τ = 1 is the paper's hard copy);
* the set W and the frozen chain ``Λ̄^{k−1}(ω)``, k = 1..K, of its rows (`frozen_chain`), computed from ``φ̄``
  or, with ``cache_chain``, kept in a variable recomputed at each hard refresh; with ``omega0_chain_rows``
  = n, the rows the loss is taken on are W's and ω₀'s chain points ``Λ̄^j(ω₀)``, j = 1..n, of the current
  target (`training_rows`), the latter in every W batch (`batch_rows`);
* the loss object (`pbo_tf.losses.PBOLoss`, Eq. 3 and 4) and the fixed-point estimate its deep form of
  Eq. (4) takes (`pbo_tf.fixed_point.FixedPointEstimate`, updated at each refresh);
* the operator monitor (what the operator does now, with the fixed-point estimate's progress) and what a
  run records of the learner's choices (`records`).

The learner is a plain object, not a `tf.Module`: its owner (the trainer, the agent) keeps its variables in
its own checkpoint under the names it always had, so run folders resume unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from pbo_tf.fixed_point import (
    FIXED_POINT_AT,
    FIXED_POINT_FROM,
    FixedPointEstimate,
    check_fixed_point_options,
    check_fixed_point_radius,
)
from pbo_tf.losses import PBOLoss, PBOLossExtras, target_chain
from pbo_tf.operators.base import PBO, check_iterations


class PBOLearner:
    """The operator, its target, W, the loss and the fixed-point estimate of one seed (see the module
    docstring). Every argument is a keyword.

    Args:
      pbo: the operator ``Λ_φ`` being trained (built here if needed).
      target_pbo: a second operator of the same configuration, the frozen ``Λ_φ̄``; set to ``φ`` by the
        owner's first `sync_target`.
      q_family: the Q family ``Q_ω`` the operator acts on.
      w_set: the set W, ``[n_W, d]``.
      K: Bellman iterations in the loss.
      loss: the loss object (`pbo_tf.losses.PBOLoss`).
      fixed_point_iterations: 0: Eq. (4)'s term (with ``loss.fixed_point_term``) at the operator's
        closed-form fixed point. N > 0: at ``ω̄ = Λ̄^N(ω₀)`` (`pbo_tf.fixed_point.FixedPointEstimate`),
        recomputed at every refresh: the deep PBO's form of the term, which trains the operator where its
        iterates go past K.
      fixed_point_radius: None: ``ω̄`` wherever the iterates go; r: the last iterate of the chain inside the
        ball of radius ``r · max_{ω ∈ W} ‖ω‖``.
      fixed_point_from: ``"omega0"``: ``ω̄ = Λ̄^N(ω₀)``; ``"w"``: ``Λ̄^N(ω)`` for every ω of W, the term the
        mean over them.
      fixed_point_at: ``"last"``: the term at ``ω̄ = Λ̄^N`` alone; ``"past_k"``: at every point ``Λ̄^n(ω₀)``,
        n = K + 1..N, the term the mean over them (needs N > K and ``fixed_point_from="omega0"``).
      fixed_point_warmup: 0 (default): the term at its full weight from the start. A fraction f in (0, 1]:
        the weight ramps linearly from 0 at the start to full at a fraction f of the run, counted in
        refreshes (`sync_target`'s ``progress``).
      omega0_chain_rows: 0 (default): the loss is taken on W's rows alone. n > 0: ω₀'s chain points
        ``Λ̄^j(ω₀)``, j = 1..n, of the target operator (recomputed at every `sync_target`, fixed between
        two), join every W batch (`batch_rows`), so Eq. (3)'s terms are also taken along ω₀'s own chain, the
        points the operator is applied at, up to ``Λ̄^{n+K−1}(ω₀)``.
      omega0: ``[d]`` the start of the curve, ω₀ (needed by ``fixed_point_iterations > 0`` from ω₀ and by
        ``omega0_chain_rows > 0``).
      cache_chain: keep the frozen chain of all of W in a variable (`cached_chain`), recomputed at every
        `sync_target` (for owners whose target changes only at refreshes).
      monitor: ``monitor(pbo) -> (scalars, text)``, what the operator does now
        (`pbo_tf.evaluation.operator_activity.activity_monitor`), or None.

    Raises:
      ValueError: sizes that do not match the Q family, or inconsistent fixed-point options (one line each).
    """

    def __init__(
        self,
        *,
        pbo: PBO,
        target_pbo: PBO,
        q_family,
        w_set,
        K: int,
        loss: PBOLoss,
        fixed_point_iterations: int = 0,
        fixed_point_radius: float | None = None,
        fixed_point_from: str = "omega0",
        fixed_point_at: str = "last",
        fixed_point_warmup: float = 0.0,
        omega0_chain_rows: int = 0,
        omega0=None,
        cache_chain: bool = False,
        monitor: Callable | None = None,
    ):
        if pbo.d != q_family.d or target_pbo.d != q_family.d:
            raise ValueError(
                f"PBO size mismatch: the operator acts on d={pbo.d} parameters but the Q family "
                f"{type(q_family).__name__} has d={q_family.d}"
            )
        w_set = np.asarray(w_set, dtype=np.float32)
        if w_set.ndim != 2 or w_set.shape[1] != q_family.d or w_set.shape[0] < 1:
            raise ValueError(f"the set W must be [n_W, {q_family.d}], got {list(w_set.shape)}")
        if not isinstance(loss, PBOLoss):
            raise TypeError(f"loss must be a pbo_tf.losses.PBOLoss, got {type(loss).__name__}")
        self.pbo, self.target_pbo, self.q_family = pbo, target_pbo, q_family
        self.K = check_iterations(K)
        self.loss_fn = loss
        self.w_set = tf.constant(w_set)
        self.w_size = int(w_set.shape[0])
        self.fixed_point_iterations = check_fixed_point_options(
            pbo, loss.fixed_point_term, fixed_point_iterations
        )
        self.fixed_point_radius = fixed_point_radius
        max_norm = check_fixed_point_radius(self.fixed_point_iterations, fixed_point_radius, w_set)
        if fixed_point_from not in FIXED_POINT_FROM:
            raise ValueError(f"fixed_point_from must be one of {FIXED_POINT_FROM}, got {fixed_point_from!r}")
        if fixed_point_from != "omega0" and not self.fixed_point_iterations:
            raise ValueError(
                f"fixed_point_from={fixed_point_from!r} chooses where the chains of the estimate Λ̄^N start: "
                "set fixed_point_iterations > 0"
            )
        self.fixed_point_from = fixed_point_from
        if fixed_point_at not in FIXED_POINT_AT:
            raise ValueError(f"fixed_point_at must be one of {FIXED_POINT_AT}, got {fixed_point_at!r}")
        if fixed_point_at == "past_k" and (fixed_point_from != "omega0" or self.fixed_point_iterations <= K):
            raise ValueError(
                "fixed_point_at='past_k' takes the term at Λ̄^n(ω₀), n = K + 1..N: it needs "
                f"fixed_point_from='omega0' and fixed_point_iterations > K={K}, got "
                f"{fixed_point_from!r} and {self.fixed_point_iterations}"
            )
        self.fixed_point_at = fixed_point_at
        warmup = fixed_point_warmup
        if isinstance(warmup, bool) or not isinstance(warmup, (int, float)) or not 0 <= warmup <= 1:
            raise ValueError(f"fixed_point_warmup must be a fraction of the run in [0, 1], got {warmup!r}")
        if warmup and not loss.fixed_point_term:
            raise ValueError("fixed_point_warmup ramps Eq. (4)'s term in: set fixed_point_term=True")
        self.fixed_point_warmup = float(warmup)
        # the warm-up's factor on the term's weight, set at each refresh from the run's progress
        self._weight_scale = (
            tf.Variable(1.0, trainable=False, name="fixed_point_weight_scale") if warmup else None
        )
        if not self.fixed_point_iterations:
            self.fixed_point_estimate = None
        elif fixed_point_from == "w":
            self.fixed_point_estimate = FixedPointEstimate(
                target_pbo, None, self.fixed_point_iterations, max_norm=max_norm, starts=w_set
            )
        else:
            self.fixed_point_estimate = FixedPointEstimate(
                target_pbo,
                omega0,
                self.fixed_point_iterations,
                max_norm=max_norm,
                first=K + 1 if fixed_point_at == "past_k" else None,
            )
        self.omega0_chain_rows = _check_chain_rows(omega0_chain_rows, omega0, q_family.d)
        if self.omega0_chain_rows:
            self._omega0 = tf.constant(np.asarray(omega0, np.float32).reshape(1, -1))
            # ω₀'s chain points Λ̄^j(ω₀), j = 1..n, of the current target, set at each sync_target
            self.chain_rows = tf.Variable(
                tf.tile(self._omega0, [self.omega0_chain_rows, 1]), trainable=False, name="omega0_chain_rows"
            )
        else:
            self._omega0 = self.chain_rows = None
        self.rows_size = self.w_size + self.omega0_chain_rows
        pbo.ensure_built()
        target_pbo.ensure_built()
        self.cached_chain = (
            tf.Variable(tf.zeros([self.K, self.rows_size, q_family.d]), trainable=False, name="target_chain")
            if cache_chain
            else None
        )
        self._monitor = monitor

    # ------------------------------------------------------------------------------ the target
    def sync_target(self, tau: float = 1.0, progress=None) -> None:
        """``φ̄ ← τ φ + (1 − τ) φ̄`` (a plain copy for τ = 1), then the fixed-point estimate, ω₀'s chain rows
        and the cached chain of the new target. ``progress``: the fraction of the run's refreshes done (a
        number or a scalar tensor), which sets the warm-up's weight; needed with ``fixed_point_warmup``."""
        if self._weight_scale is not None:
            if progress is None:
                raise ValueError("fixed_point_warmup needs the run's progress at each refresh (sync_target)")
            progress = tf.cast(progress, tf.float32)
            self._weight_scale.assign(tf.minimum(progress / self.fixed_point_warmup, 1.0))
        for target, source in zip(self.target_pbo.weights, self.pbo.weights, strict=True):
            if tau == 1.0:
                target.assign(source)
            else:
                target.assign(tau * source + (1.0 - tau) * target)
        if self.fixed_point_estimate is not None:
            self.fixed_point_estimate.update()
        if self.chain_rows is not None:
            self.chain_rows.assign(self.target_pbo.iterate(self._omega0, self.omega0_chain_rows)[1:, 0])
        self.refresh_cached_chain()

    def refresh_cached_chain(self) -> None:
        """Recomputes the cached ``Λ̄^{k−1}`` of the training rows from ``φ̄`` (nothing without the cache)."""
        if self.cached_chain is not None:
            self.cached_chain.assign(target_chain(self.target_pbo, self.training_rows(), self.K))

    def training_rows(self) -> tf.Tensor:
        """The rows the loss is taken on, ``[n_W + n, d]``: W, then ω₀'s chain points ``Λ̄^j(ω₀)``, j = 1..n,
        of the current target (``omega0_chain_rows`` = n; W alone when n = 0)."""
        if self.chain_rows is None:
            return self.w_set
        return tf.concat([self.w_set, self.chain_rows], axis=0)

    def batch_rows(self, w_rows: tf.Tensor) -> tf.Tensor:
        """The `training_rows` indices of the batch of W's rows ``w_rows`` ``[b]``: those rows, then every one
        of ω₀'s chain rows (``[b + n]``; ``w_rows`` itself when n = 0)."""
        if self.chain_rows is None:
            return w_rows
        chain = tf.range(self.w_size, self.rows_size, dtype=w_rows.dtype)
        return tf.concat([w_rows, chain], axis=0)

    def frozen_chain(self, rows: tf.Tensor | None = None) -> tf.Tensor:
        """The target chain ``Λ̄^{k−1}(ω)``, k = 1..K, of the `training_rows` ``rows`` (all of them by
        default; W's rows come first, so W's row indices are theirs): ``[K, n, d]``, gathered from the cache
        when there is one."""
        if self.cached_chain is not None:
            return self.cached_chain if rows is None else tf.gather(self.cached_chain, rows, axis=1)
        every = self.training_rows()
        params = every if rows is None else tf.gather(every, rows)
        return target_chain(self.target_pbo, params, self.K)

    # ------------------------------------------------------------------------------ the loss
    def fixed_point_input(self) -> tf.Tensor | None:
        """The loss's ``fixed_point_input``: the estimate ``ω̄`` (``[1, d]``, ``[n_W, d]`` from W) or None."""
        return None if self.fixed_point_estimate is None else self.fixed_point_estimate.read()

    def loss(
        self,
        w_batch: tf.Tensor,
        batch: dict,
        chain: tf.Tensor | None = None,
        *,
        targets: tf.Tensor | None = None,
        predicted: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, PBOLossExtras]:
        """The loss at ``φ`` on the W batch ``w_batch`` ``[n, d]`` and the transitions ``batch``, given the
        batch's frozen chain ``[K, n, d]`` or its precomputed Bellman targets ``[K, n, B]``
        (`pbo_tf.losses.pbo_loss`; ``predicted`` as there)."""
        return self.loss_fn(
            self.pbo,
            self.q_family,
            w_batch,
            batch,
            chain,
            targets=targets,
            predicted=predicted,
            fixed_point_input=self.fixed_point_input(),
            weight_scale=None if self._weight_scale is None else self._weight_scale.read_value(),
        )

    # ------------------------------------------------------------------------------ what it reports
    def monitor(self) -> tuple[dict, str] | None:
        """What the operator does now, ``(scalars, text)``: the monitor's, with the bounded fixed-point
        estimate's progress; None without a monitor."""
        if self._monitor is None:
            return None
        scalars, text = self._monitor(self.pbo)
        bounded = self.fixed_point_estimate and self.fixed_point_estimate.progress()
        if bounded:
            scalars = {**scalars, **bounded[0]}
            text += f"; {bounded[1]}"
        return scalars, text

    def diagnose(self, nonfinite_q: Callable[[tf.Tensor, str], str]) -> str:
        """What is non-finite about ω₀'s chain rows or the fixed-point estimate, in words ("" when nothing is
        or there is none): the rows, the estimate itself, or its Q values (``nonfinite_q(params, label)``,
        the owner's check)."""
        if self.chain_rows is not None and not np.all(np.isfinite(self.chain_rows.numpy())):
            return (
                f"ω₀'s chain rows Λ̄^j(ω₀), j = 1..{self.omega0_chain_rows}, are non-finite: the target "
                "operator's iterates of ω₀ blow up (try fewer omega0_chain_rows)"
            )
        if self.fixed_point_estimate is None:
            return ""
        estimate = self.fixed_point_estimate.value.numpy()
        name = f"Λ̄^{self.fixed_point_iterations}({self.fixed_point_estimate.start_name})"
        if not np.all(np.isfinite(estimate)):
            return (
                f"the fixed-point term's estimate {name} is non-finite: the target operator's "
                "iterates blow up past K (try fewer fixed_point_iterations)"
            )
        return nonfinite_q(tf.constant(estimate), name)

    def records(self) -> dict:
        """The learner's choices a run writes beside its operator (``metrics.json``'s ``operator``): the
        fixed-point term's and ω₀'s chain rows, those that differ from the defaults only."""
        records = {}
        if self.fixed_point_iterations:
            records["fixed_point_iterations"] = self.fixed_point_iterations
        if self.fixed_point_from != "omega0":
            records["fixed_point_from"] = self.fixed_point_from
        if self.fixed_point_radius is not None:
            records["fixed_point_radius"] = float(self.fixed_point_radius)
        if self.fixed_point_at != "last":
            records["fixed_point_at"] = self.fixed_point_at
        if self.loss_fn.fixed_point_weight != 1:
            records["fixed_point_weight"] = self.loss_fn.fixed_point_weight
        if self.loss_fn.fixed_point_balance:
            records["fixed_point_balance"] = True
        if self.fixed_point_warmup:
            records["fixed_point_warmup"] = self.fixed_point_warmup
        if self.omega0_chain_rows:
            records["omega0_chain_rows"] = self.omega0_chain_rows
        return records


def _check_chain_rows(n, omega0, d: int) -> int:
    """``omega0_chain_rows`` as an int, checked: an integer >= 0, and ω₀ ``[d]`` given when it is > 0."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"omega0_chain_rows must be an integer >= 0, got {n!r}")
    if n and omega0 is None:
        raise ValueError(
            "omega0_chain_rows > 0 adds ω₀'s chain points Λ̄^j(ω₀) to the W batches: it needs omega0"
        )
    if n and np.asarray(omega0).size != d:
        raise ValueError(f"omega0_chain_rows > 0 needs omega0 of size d={d}, got {list(np.shape(omega0))}")
    return int(n)
