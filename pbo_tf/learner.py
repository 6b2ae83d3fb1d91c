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
* the loss: its terms (`pbo_tf.loss_terms`, each bound to this learner so that a term with state, such as
  Eq. (4)'s deep estimate ``Λ̄^N(ω₀)``, keeps its own per seed and is updated at each refresh), added up on
  one `pbo_tf.loss_terms.LossContext` into ``(loss, metrics)``;
* the operator monitor (what the operator does now, with the terms' state) and what a run records of the
  learner's choices (`records`).

The learner is a plain object, not a `tf.Module`: its owner (the trainer, the agent) keeps its variables in
its own checkpoint under the names it always had, so run folders resume unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from pbo_tf.loss_terms import (
    PAPER_TERMS,
    FixedPointTerm,
    LossContext,
    check_terms,
    combine_terms,
    target_chain,
)
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
      gamma: discount factor.
      loss_terms: the terms of the loss, in order (`pbo_tf.loss_terms`; default Eq. 3 alone), each bound
        to this learner (`pbo_tf.loss_terms.LossTerm.bind`).
      omega0_chain_rows: 0 (default): the loss is taken on W's rows alone. n > 0: ω₀'s chain points
        ``Λ̄^j(ω₀)``, j = 1..n, of the target operator (recomputed at every `sync_target`, fixed between
        two), join every W batch (`batch_rows`), so Eq. (3)'s terms are also taken along ω₀'s own chain, the
        points the operator is applied at, up to ``Λ̄^{n+K−1}(ω₀)``.
      omega0: ``[d]`` the start of the curve, ω₀ (needed by a `FixedPointTerm` estimate from ω₀ and by
        ``omega0_chain_rows > 0``).
      cache_chain: keep the frozen chain of all of W in a variable (`cached_chain`), recomputed at every
        `sync_target` (for owners whose target changes only at refreshes).
      monitor: ``monitor(pbo) -> (scalars, text)``, what the operator does now
        (`pbo_tf.evaluation.operator_activity.activity_monitor`), or None.

    Raises:
      ValueError: sizes that do not match the Q family, or terms whose options do not fit the operator or W
        (one line each).
    """

    def __init__(
        self,
        *,
        pbo: PBO,
        target_pbo: PBO,
        q_family,
        w_set,
        K: int,
        gamma: float,
        loss_terms=PAPER_TERMS,
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
        self.pbo, self.target_pbo, self.q_family = pbo, target_pbo, q_family
        self.K = check_iterations(K)
        self.gamma = float(gamma)
        self.w_set = tf.constant(w_set)
        self.w_size = int(w_set.shape[0])
        self.omega0 = None if omega0 is None else np.asarray(omega0, np.float32).reshape(-1)
        # the run's progress at the last refresh, for the terms (0 where the owner does not count it)
        self.progress = tf.Variable(0.0, trainable=False, name="learner_progress")
        self.terms = tuple(term.bind(self) for term in check_terms(loss_terms, "the learner's loss_terms"))
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
        """``φ̄ ← τ φ + (1 − τ) φ̄`` (a plain copy for τ = 1), then the terms' state (`LossTerm.on_refresh`:
        the fixed-point estimate), ω₀'s chain rows and the cached chain of the new target. ``progress``: the
        fraction of the run's refreshes done (a number or a scalar tensor; None where the owner does not
        count it), which the terms read (a `FixedPointTerm` warm-up needs it)."""
        if progress is not None:
            self.progress.assign(tf.cast(progress, tf.float32))
        for target, source in zip(self.target_pbo.weights, self.pbo.weights, strict=True):
            if tau == 1.0:
                target.assign(source)
            else:
                target.assign(tau * source + (1.0 - tau) * target)
        for term in self.terms:
            term.on_refresh(self, progress)
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
    @property
    def fixed_point_estimate(self):
        """The `pbo_tf.fixed_point.FixedPointEstimate` of the first `FixedPointTerm` with one, or None."""
        for term in self.terms:
            if isinstance(term, FixedPointTerm) and term.estimate is not None:
                return term.estimate
        return None

    @property
    def stop_gradient_between(self) -> bool:
        """Whether the terms read the prediction chain with the gradient stopped between compositions (the
        first term that has the option; False when none has)."""
        for term in self.terms:
            if hasattr(term, "stop_gradient_between"):
                return term.stop_gradient_between
        return False

    def loss(
        self,
        w_batch: tf.Tensor,
        batch: dict,
        chain: tf.Tensor | None = None,
        *,
        targets: tf.Tensor | None = None,
        predicted: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """``(loss, metrics)`` at ``φ`` on the W batch ``w_batch`` ``[n, d]`` and the transitions ``batch``,
        given the batch's frozen chain ``[K, n, d]`` or its precomputed Bellman targets ``[K, n, B]``;
        ``predicted`` ``[K, n, d]``: the prediction chain when the caller has computed it (read with
        `stop_gradient_between`). The terms' sum and metrics (`pbo_tf.loss_terms.combine_terms`)."""
        context = LossContext(
            pbo=self.pbo,
            target_pbo=self.target_pbo,
            q_family=self.q_family,
            params=w_batch,
            batch=batch,
            gamma=self.gamma,
            target_params=chain,
            targets=targets,
            predicted=predicted,
            predicted_stop_gradient_between=self.stop_gradient_between,
            progress=self.progress,
            learner=self,
        )
        return combine_terms(self.terms, context)

    # ------------------------------------------------------------------------------ what it reports
    def monitor(self) -> tuple[dict, str] | None:
        """What the operator does now, ``(scalars, text)``: the monitor's, with the terms' state (a bounded
        fixed-point estimate's progress); None without a monitor."""
        if self._monitor is None:
            return None
        scalars, text = self._monitor(self.pbo)
        for term in self.terms:
            extra = term.monitor()
            if extra:
                scalars = {**scalars, **extra[0]}
                text += f"; {extra[1]}"
        return scalars, text

    def diagnose(self, nonfinite_q: Callable[[tf.Tensor, str], str]) -> str:
        """What is non-finite about ω₀'s chain rows or a term's state (the fixed-point estimate), in words
        ("" when nothing is): the rows, the state itself, or its Q values (``nonfinite_q(params, label)``,
        the owner's check)."""
        if self.chain_rows is not None and not np.all(np.isfinite(self.chain_rows.numpy())):
            return (
                f"ω₀'s chain rows Λ̄^j(ω₀), j = 1..{self.omega0_chain_rows}, are non-finite: the target "
                "operator's iterates of ω₀ blow up (try fewer omega0_chain_rows)"
            )
        for term in self.terms:
            found = term.diagnose(nonfinite_q)
            if found:
                return found
        return ""

    def records(self) -> dict:
        """The learner's choices a run writes beside its operator (``metrics.json``'s ``operator``): the loss
        terms' names when they are not the paper's Eq. (3) alone, each term's options that differ from its
        defaults, and ω₀'s chain rows."""
        records = {}
        names = [term.name for term in self.terms]
        if names != ["bellman"]:
            records["loss_terms"] = names
        for term in self.terms:
            records.update(term.records())
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
