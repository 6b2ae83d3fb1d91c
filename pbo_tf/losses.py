"""The PBO loss (paper Eq. 3 and 4), the FQI/DQN regression loss and the iterated baselines' loss, as pure
functions of tensors.

One function, `pbo_loss`, serves every trainer (ProFQI offline, ProDQN online). For a batch ``W_b`` of
parameters and a batch ``D_b`` of transitions::

    L(φ) = 1/K Σ_{k=1..K} mean_{ω∈W_b, (s,a,r,s')∈D_b} ( ΓQ_{Λ̄^{k−1}(ω)}(s,a) − Q_{Λ_φ^k(ω)}(s,a) )²
           [+ mean_{D_b} ( ΓQ_{ω*}(s,a) − Q_{ω*}(s,a) )²,  ω* = Λ_φ^∞   (linear PBO, Eq. 4)]

* The target side uses a frozen copy ``φ̄`` (semi-gradient, paper Sec. 4.1): callers pass the chain
  ``Λ̄^{k−1}(ω)`` for ``k = 1..K`` (`target_chain`), so it can be cached while ``φ̄`` and W are fixed.
* The prediction side is differentiated through all k compositions, as the reference implementation does;
  ``stop_gradient_between=True`` differentiates only the last application of each term instead.
* ``normalisation="mean"`` (default) divides the sum over k by K; ``"reference"`` divides by K + 1 as the
  public JAX implementation does. The fixed-point term is never divided.
* The fixed-point term is differentiated through both of its sides and through the linear solve.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from pbo_tf.operators.base import PBO, check_iterations, composed_chain
from pbo_tf.q.base import QFamily

NORMALISATIONS = ("mean", "reference")


class PBOLossExtras(NamedTuple):
    """Diagnostics returned with the PBO loss.

    Attributes:
      per_k: ``[K]`` mean squared Bellman residual of each term ``k = 1..K`` (before normalisation).
      fixed_point: scalar fixed-point term of Eq. (4) (0 when not used).
    """

    per_k: tf.Tensor
    fixed_point: tf.Tensor


def target_chain(target_pbo: PBO, params: tf.Tensor, K: int) -> tf.Tensor:
    """``Λ̄^{k−1}(ω)`` for ``k = 1..K`` with gradients stopped: ``[n_w, d] → [K, n_w, d]``."""
    return tf.stop_gradient(target_pbo.iterate(params, check_iterations(K) - 1))


def prediction_chain(apply, params: tf.Tensor, K: int, stop_gradient_between: bool = False) -> tf.Tensor:
    """``Λ_φ^k(ω)`` for ``k = 1..K``, differentiable: ``[…, n_w, d] → [K, …, n_w, d]``.

    ``apply`` is a `PBO` (its `PBO.chain`, which `DeepPBO` differentiates with one weight-gradient product
    per layer for the whole chain) or any one application of an operator, composed K times.
    ``stop_gradient_between`` stops the gradient between compositions.
    """
    if isinstance(apply, PBO):
        return apply.chain(params, K, stop_gradient_between)
    return composed_chain(apply, params, K, stop_gradient_between)


def chain_targets(q_family: QFamily, params_knd: tf.Tensor, batch, gamma: float) -> tf.Tensor:
    """Bellman targets ``ΓQ_{Λ̄^{k−1}(ω)}`` of a target chain on a batch: ``[K, n_w, d] → [K, n_w, B]``.

    While the target operator and W are fixed, these depend on nothing else: a trainer may compute them once
    for the whole dataset and pass slices to `pbo_loss` as ``targets``.
    """
    k, n_w = tf.shape(params_knd)[0], tf.shape(params_knd)[1]
    flat = tf.reshape(params_knd, [-1, q_family.d])
    targets = q_family.bellman_targets(flat, batch["reward"], batch["next_state"], batch["done"], gamma)
    return tf.reshape(targets, [k, n_w, -1])


def check_fixed_point_options(pbo: PBO, fixed_point_term: bool, fixed_point_iterations) -> int:
    """Validates a trainer's fixed-point options (see `pbo_loss`); returns ``fixed_point_iterations`` as an
    int. N = 0: the closed-form fixed point (needs ``pbo.has_fixed_point``); N > 0: the estimate
    ``Λ̄^N(ω₀)``, which needs the term.

    Raises:
      ValueError: N not an integer >= 0, N > 0 without the term, or the term without a way to its point.
    """
    n = fixed_point_iterations
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"fixed_point_iterations must be an integer >= 0, got {n!r}")
    if n and not fixed_point_term:
        raise ValueError(
            "fixed_point_iterations > 0 estimates Eq. (4)'s fixed point: set fixed_point_term=True"
        )
    if fixed_point_term and not n and not pbo.has_fixed_point:
        raise ValueError(
            f"{type(pbo).__name__} has no closed-form fixed point: the fixed-point term needs "
            "fixed_point_iterations > 0 (its estimate Λ̄^N(ω₀))"
        )
    return int(n)


class FixedPointEstimate(tf.Module):
    """``ω̄ = Λ̄^N(ω₀)``, the frozen target operator applied N times to ω₀: the point at which `pbo_loss`
    takes a deep operator's fixed-point term (``fixed_point_input``). Its owner (ProFQI's trainer, ProDQN's
    agent) calls `update` whenever the target operator changes; `value` is a non-trainable variable.

    ``max_norm`` bounds the estimate. The iterates converge only while the target operator is contracting
    along ω₀'s chain; when it expands there (as a deep operator can, away from the W it was trained on), the
    chain grows geometrically, ``ω̄`` is a point no iterate of interest visits, its Bellman targets are huge,
    and one step of the term overflows the gradient (Lunar Lander, ``prodqn_fixed_point``: ``‖Λ̄^30(ω₀)‖``
    ≈ 6·10⁴ after a refresh, next to ‖ω‖ ≈ 7 on W, and the step after it non-finite). With ``max_norm``,
    `update` takes the last iterate of the chain before the first one that is non-finite or longer than
    ``max_norm``: the point where the chain leaves the region, at which one more Bellman iteration is then
    asked of the operator. A chain that stays inside gives ``Λ̄^N(ω₀)`` exactly (the bound changes nothing).
    `iterations_used` holds the n of the current ``ω̄ = Λ̄^n(ω₀)``.

    ``starts`` (instead of ``omega0``), ``[m, d]``: m chains, one from each row (ProFQI's
    ``fixed_point_from="w"`` passes W), and ``ω̄`` is ``[m, d]``, ``Λ̄^N`` of each row; with ``max_norm``
    each row's chain is cut where it leaves the ball, and `iterations_used` is the least n over the rows.

    Raises:
      ValueError: neither or both of ``omega0`` and ``starts``, an ``omega0`` that is not ``[d]``, ``starts``
        that are not ``[m, d]``, or a ``max_norm`` that is not a positive number.
    """

    def __init__(
        self,
        target_pbo: PBO,
        omega0,
        iterations: int,
        max_norm: float | None = None,
        starts=None,
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
                raise ValueError("fixed_point_iterations > 0 needs omega0, where the iterates start")
            omega0 = np.asarray(omega0, dtype=np.float32).reshape(-1)
            if omega0.shape != (d,):
                raise ValueError(f"omega0 must be [{d}], got {list(omega0.shape)}")
            starts = omega0[None, :]
            self.start_name = "ω₀"
        if max_norm is not None and not (np.isfinite(max_norm) and max_norm > 0):
            raise ValueError(f"max_norm must be a positive number or None, got {max_norm!r}")
        self.iterations = int(iterations)
        self.max_norm = None if max_norm is None else float(max_norm)
        self._starts = tf.constant(starts)
        self._iterate = target_pbo.iterate  # a bound method: the operator stays its owner's to checkpoint
        self.value = tf.Variable(self._starts, trainable=False, name="value")
        self.iterations_used = tf.Variable(0, trainable=False, dtype=tf.int32, name="iterations_used")

    def update(self) -> None:
        """``ω̄ ← Λ̄^N(ω₀)`` of the target operator as it is now (bounded by ``max_norm``, see above)."""
        chain = self._iterate(self._starts, self.iterations)  # [N + 1, m, d]
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

    def read(self) -> tf.Tensor:
        """``ω̄``, ``[1, d]`` (``[m, d]`` with ``starts``)."""
        return self.value.read_value()

    def progress(self) -> tuple[dict, str] | None:
        """For a trainer's progress line and TensorBoard, with ``max_norm``: which iterate ``ω̄`` is
        (``operator/fixed_point_iterations_used``, below N when the target's chain left the ball; the least
        over the rows with ``starts``) and its text; None without a bound (``ω̄`` is then always ``Λ̄^N``)."""
        if self.max_norm is None:
            return None
        n = int(self.iterations_used.numpy())
        where = f"Λ̄^{n}(ω₀)" if self.start_name == "ω₀" else f"Λ̄^≥{n}(W)"
        return {"operator/fixed_point_iterations_used": n}, f"fixed point at {where} of {self.iterations}"


def check_fixed_point_radius(fixed_point_iterations: int, fixed_point_radius, w_set) -> float | None:
    """Validates ``fixed_point_radius`` (a trainer's bound on `FixedPointEstimate`) and returns the bound it
    sets, ``radius · max_{ω ∈ W} ‖ω‖``, or None (no bound).

    Raises:
      ValueError: a radius that is not a positive number, or one without ``fixed_point_iterations > 0``.
    """
    radius = fixed_point_radius
    if radius is None:
        return None
    if isinstance(radius, bool) or not isinstance(radius, (int, float, np.number)) or not radius > 0:
        raise ValueError(f"fixed_point_radius must be a positive number or None, got {radius!r}")
    if not np.isfinite(radius):
        raise ValueError(f"fixed_point_radius must be finite, got {radius!r}")
    if not fixed_point_iterations:
        raise ValueError(
            "fixed_point_radius bounds the chains Λ̄^N (from ω₀ or from W) of the fixed-point term: set "
            "fixed_point_iterations > 0"
        )
    largest = float(np.max(np.linalg.norm(np.asarray(w_set, dtype=np.float64), axis=-1)))
    return float(radius) * max(largest, np.finfo(np.float32).tiny)


def pbo_loss(
    pbo: PBO,
    q_family: QFamily,
    params: tf.Tensor,
    batch: dict,
    target_params: tf.Tensor | None,
    gamma: float,
    normalisation: str = "mean",
    stop_gradient_between: bool = False,
    fixed_point_term: bool = False,
    targets: tf.Tensor | None = None,
    predicted: tf.Tensor | None = None,
    fixed_point_input: tf.Tensor | None = None,
) -> tuple[tf.Tensor, PBOLossExtras]:
    """The PBO loss (Eq. 3, optionally + Eq. 4's fixed-point term).

    Eq. (4)'s term asks the operator's fixed point ``ω*`` to be the projected Bellman fixed point,
    ``‖ΓQ_{ω*} − Q_{ω*}‖²``, with ``ω* = pbo.fixed_point()`` differentiable in φ (the linear PBO). A deep
    operator has no closed-form fixed point: given ``fixed_point_input``, an estimate ``ω̄`` of it (the
    iterates ``Λ̄^N(ω₀)`` of the frozen target operator, which converge to its fixed point when it has an
    attracting one), the term is ``‖ΓQ_{ω̄} − Q_{Λ_φ(ω̄)}‖²`` with ``ω̄`` and its targets held fixed: one
    more Bellman iteration asked of the operator at the point its iterates go to. The chain of Eq. (3)
    trains the operator on ``Λ̄^{k−1}(W)``, k ≤ K, only; nothing else asks the iterates past K, which is
    where the operator is applied when it is applied "again and again", to keep improving. When ``ω̄`` is
    a fixed point of the operator the two forms have the same value (tested on the linear PBO).

    Args:
      pbo: the operator being trained, ``Λ_φ``.
      q_family: the Q family of the parameters.
      params: ``[n_w, d]`` batch ``W_b`` of starting parameters ω.
      batch: dict of transition tensors ``state [B, …]``, ``action [B]``, ``reward [B]``,
        ``next_state [B, …]``, ``done [B]``.
      target_params: ``[K, n_w, d]`` frozen chain ``Λ̄^{k−1}(ω)``, k = 1..K (see `target_chain`); K is its
        leading dimension. Pass None when giving ``targets``.
      gamma: discount factor.
      normalisation: ``"mean"`` (÷K) or ``"reference"`` (÷(K+1)).
      stop_gradient_between: stop gradients between compositions of ``Λ_φ`` on the prediction side.
      fixed_point_term: add Eq. (4)'s fixed-point term (needs ``pbo.has_fixed_point`` or
        ``fixed_point_input``).
      targets: ``[K, n_w, B]`` precomputed `chain_targets` of the batch, instead of ``target_params``.
      predicted: ``[K, n_w, d]`` the prediction chain `prediction_chain` of ``params``, when the caller has
        computed it (several seeds' chains in one batched computation); by default it is computed here.
      fixed_point_input: ``[d]`` or ``[m, d]`` estimates ``ω̄`` of the point the operator's iterates go to,
        for the fixed-point term (see above; with m > 1 the term is the mean over the m rows, e.g. the
        iterates of every member of W); None: the closed-form ``pbo.fixed_point()``.

    Returns:
      ``(loss, PBOLossExtras)``.

    Raises:
      ValueError: unknown normalisation, a fixed-point term for an operator without one, or mismatched
        shapes (naming them).
    """
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}")
    if fixed_point_term and not pbo.has_fixed_point and fixed_point_input is None:
        raise ValueError(
            f"{type(pbo).__name__} has no closed-form fixed point: Eq. (4)'s term needs an estimate of it "
            "(fixed_point_input; ProFQITrainer.fixed_point_iterations > 0)"
        )
    if pbo.d != q_family.d:
        raise ValueError(f"PBO acts on d={pbo.d} parameters but the Q family has d={q_family.d}")
    if (target_params is None) == (targets is None):
        raise ValueError("pbo_loss needs exactly one of target_params and targets")
    given = tf.convert_to_tensor(target_params if targets is None else targets, tf.float32)
    what = "target_params [K, n_w, d]" if targets is None else "targets [K, n_w, B]"
    if given.shape.rank != 3 or given.shape[0] is None or given.shape[0] < 1:
        raise ValueError(f"{what} must be rank 3 with a static K >= 1, got {given.shape.as_list()}")
    K = given.shape[0]
    if targets is None:
        targets = chain_targets(q_family, given, batch, gamma)
    targets = tf.stop_gradient(tf.convert_to_tensor(targets, tf.float32))  # [K, n_w, B]
    if predicted is None:
        predicted = prediction_chain(pbo, params, K, stop_gradient_between)
    elif predicted.shape.rank != 3 or predicted.shape[0] != K or predicted.shape[-1] != q_family.d:
        raise ValueError(
            f"predicted must be the chain [K={K}, n_w, d={q_family.d}], got {predicted.shape.as_list()}"
        )
    predicted = tf.reshape(predicted, [-1, q_family.d])  # [K·n_w, d]
    q = q_family.q_sa(predicted, batch["state"], batch["action"])
    q = tf.reshape(q, tf.shape(targets))
    per_k = tf.reduce_mean(tf.square(targets - q), axis=[1, 2])  # [K]
    denominator = float(K) if normalisation == "mean" else float(K + 1)
    loss = tf.reduce_sum(per_k) / denominator

    fixed_point = tf.zeros([])
    if fixed_point_term and fixed_point_input is None:
        star = pbo.fixed_point()[None, :]
        fp_targets = q_family.bellman_targets(
            star, batch["reward"], batch["next_state"], batch["done"], gamma
        )
        fp_q = q_family.q_sa(star, batch["state"], batch["action"])
    elif fixed_point_term:
        estimate = tf.stop_gradient(tf.reshape(tf.cast(fixed_point_input, tf.float32), [-1, q_family.d]))
        fp_targets = tf.stop_gradient(
            q_family.bellman_targets(estimate, batch["reward"], batch["next_state"], batch["done"], gamma)
        )
        fp_q = q_family.q_sa(pbo(estimate), batch["state"], batch["action"])
    if fixed_point_term:
        fixed_point = tf.reduce_mean(tf.square(fp_targets - fp_q))
        loss = loss + fixed_point
    return loss, PBOLossExtras(per_k=per_k, fixed_point=fixed_point)


def fqi_loss(
    q_family: QFamily,
    params: tf.Tensor,
    target_params: tf.Tensor | None,
    batch: dict,
    gamma: float,
    targets: tf.Tensor | None = None,
) -> tf.Tensor:
    """FQI / DQN regression loss ``mean (ΓQ_{ω̄}(s,a) − Q_ω(s,a))²`` with the target frozen.

    Args:
      params: ``[n_w, d]`` parameters being fitted.
      target_params: ``[n_w, d]`` frozen parameters ω̄ of the previous iteration (or target network);
        None when giving ``targets``.
      targets: ``[n_w, B]`` precomputed Bellman targets ``ΓQ_{ω̄}`` of the batch, instead of
        ``target_params`` (they depend on nothing else while ω̄ is frozen).
    """
    if (target_params is None) == (targets is None):
        raise ValueError("fqi_loss needs exactly one of target_params and targets")
    if targets is None:
        targets = q_family.bellman_targets(
            target_params, batch["reward"], batch["next_state"], batch["done"], gamma
        )
    targets = tf.stop_gradient(targets)
    q = q_family.q_sa(params, batch["state"], batch["action"])
    return tf.reduce_mean(tf.square(targets - q))


def iterated_bellman_loss(
    q_family,
    params: tf.Tensor,
    batch: dict,
    gamma: float,
    target_params: tf.Tensor | None = None,
    targets: tf.Tensor | None = None,
) -> tf.Tensor:
    """The iterated baselines' loss (i-FQI, i-DQN): head k fitted to head k − 1's Bellman target under a
    frozen copy, every k = 1..K at once::

        L(θ) = mean_{k=1..K, (s,a,r,s')∈D_b} ( r + γ (1 − done) max_a' Q_{θ̄_{k−1}}(s', a') − Q_{θ_k}(s, a) )²

    Head 0 has no term, so it keeps its initial parameters.

    Args:
      q_family: a `pbo_tf.q.multi_head.MultiHeadQ` with K + 1 heads.
      params: ``[n_w, (K + 1) · d]`` parameters being fitted.
      batch: transitions ``{state, action, reward, next_state, done}`` of size B.
      gamma: discount factor.
      target_params: ``[n_w, (K + 1) · d]`` frozen parameters θ̄; None when giving ``targets``.
      targets: ``[n_w, K, B]`` precomputed targets ``ΓQ_{θ̄_{k−1}}``, k = 1..K (fixed while θ̄ is).

    Returns:
      The scalar loss.
    """
    if (target_params is None) == (targets is None):
        raise ValueError("iterated_bellman_loss needs exactly one of target_params and targets")
    if targets is None:
        all_targets = q_family.bellman_targets_heads(
            target_params, batch["reward"], batch["next_state"], batch["done"], gamma
        )
        targets = all_targets[:, :-1]
    targets = tf.stop_gradient(targets)
    base, n_heads = q_family.base, q_family.n_heads
    trained = tf.reshape(q_family.heads(params)[:, 1:], [-1, base.d])  # heads 1..K, [n_w · K, d]
    q = base.q_sa(trained, batch["state"], batch["action"])  # [n_w · K, B]
    q = tf.reshape(q, [-1, n_heads - 1, tf.shape(q)[1]])
    return tf.reduce_mean(tf.square(targets - q))
