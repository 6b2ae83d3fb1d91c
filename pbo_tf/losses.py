"""The PBO loss (paper Eq. 3 and 4), the FQI/DQN regression loss and the iterated baselines' loss, as pure
functions of tensors.

One function, `pbo_loss`, serves every trainer (ProFQI offline, ProDQN online); `PBOLoss` is it with its
options bound, the loss object their learner (`pbo_tf.learner.PBOLearner`) calls. For a batch ``W_b`` of
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

import dataclasses
from typing import NamedTuple

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
    fixed_point_weight: float | tf.Tensor = 1.0,
    fixed_point_balance: bool = False,
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
      fixed_point_weight: the term's weight ``λ`` (a number >= 0 or a scalar tensor): ``L = L₃ + λ · F``
        (1, Eq. 4 as written).
      fixed_point_balance: scale the term to the size of Eq. (3)'s part, ``L = L₃ + λ · sg(L₃ / F) · F``
        (``sg`` stops the gradient): both parts then weigh the same in the loss whatever their scales, and
        the term's gradient is ``λ · L₃ / F`` times its own.

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
            "(fixed_point_input: fixed_point_iterations > 0)"
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
        scale = fixed_point_weight
        if fixed_point_balance:
            scale = scale * tf.stop_gradient(loss / tf.maximum(fixed_point, 1e-12))
        loss = loss + (fixed_point if _is_one(scale) else scale * fixed_point)
    return loss, PBOLossExtras(per_k=per_k, fixed_point=fixed_point)


def _is_one(weight) -> bool:
    """Whether ``weight`` is the Python number 1 (the term is then added unscaled, as Eq. 4 writes it)."""
    return isinstance(weight, (int, float)) and not isinstance(weight, bool) and weight == 1


@dataclasses.dataclass(frozen=True)
class PBOLoss:
    """`pbo_loss` with its options bound: ``loss(pbo, q_family, params, batch, target_params, **inputs)``.

    Attributes:
      gamma: discount factor.
      normalisation: ``"mean"`` (÷K) or ``"reference"`` (÷(K+1)).
      stop_gradient_between: stop gradients between compositions of ``Λ_φ`` on the prediction side.
      fixed_point_term: add Eq. (4)'s fixed-point term.
      fixed_point_weight: the term's weight λ, a number >= 0 (1: Eq. 4 as written).
      fixed_point_balance: scale the term to the size of Eq. (3)'s part (see `pbo_loss`).

    Raises:
      ValueError: an unknown normalisation, a weight that is not a number >= 0, or a weight or balance
        without the term.
    """

    gamma: float
    normalisation: str = "mean"
    stop_gradient_between: bool = False
    fixed_point_term: bool = False
    fixed_point_weight: float = 1.0
    fixed_point_balance: bool = False

    def __post_init__(self):
        if self.normalisation not in NORMALISATIONS:
            raise ValueError(f"normalisation must be one of {NORMALISATIONS}, got {self.normalisation!r}")
        weight = self.fixed_point_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight < float("inf"):
            raise ValueError(f"fixed_point_weight must be a finite number >= 0, got {weight!r}")
        if (weight != 1 or self.fixed_point_balance) and not self.fixed_point_term:
            raise ValueError(
                "fixed_point_weight and fixed_point_balance scale Eq. (4)'s term: set fixed_point_term=True"
            )
        object.__setattr__(self, "gamma", float(self.gamma))
        object.__setattr__(self, "stop_gradient_between", bool(self.stop_gradient_between))
        object.__setattr__(self, "fixed_point_term", bool(self.fixed_point_term))
        object.__setattr__(self, "fixed_point_weight", float(weight))
        object.__setattr__(self, "fixed_point_balance", bool(self.fixed_point_balance))

    def __call__(
        self,
        pbo: PBO,
        q_family: QFamily,
        params: tf.Tensor,
        batch: dict,
        target_params: tf.Tensor | None = None,
        *,
        targets: tf.Tensor | None = None,
        predicted: tf.Tensor | None = None,
        fixed_point_input: tf.Tensor | None = None,
        weight_scale: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, PBOLossExtras]:
        """`pbo_loss` with the bound options; ``weight_scale`` multiplies the term's weight (a warm-up)."""
        weight = self.fixed_point_weight if weight_scale is None else self.fixed_point_weight * weight_scale
        return pbo_loss(
            pbo,
            q_family,
            params,
            batch,
            target_params,
            gamma=self.gamma,
            normalisation=self.normalisation,
            stop_gradient_between=self.stop_gradient_between,
            fixed_point_term=self.fixed_point_term,
            targets=targets,
            predicted=predicted,
            fixed_point_input=fixed_point_input,
            fixed_point_weight=weight,
            fixed_point_balance=self.fixed_point_balance,
        )


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
