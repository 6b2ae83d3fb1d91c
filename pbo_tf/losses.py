"""The PBO loss (paper Eq. 3 and 4) as one function of tensors, the FQI/DQN regression loss and the
iterated baselines' loss.

The PBO loss is a weighted list of terms (`pbo_tf.loss_terms`: `BellmanTerm` for Eq. 3, `FixedPointTerm` for
Eq. 4), which the learner (`pbo_tf.learner.PBOLearner`) adds up for ProFQI and ProDQN alike. `pbo_loss` is
the paper's two terms as one pure function of tensors, for a batch ``W_b`` of parameters and a batch ``D_b``
of transitions::

    L(φ) = 1/K Σ_{k=1..K} mean_{ω∈W_b, (s,a,r,s')∈D_b} ( ΓQ_{Λ̄^{k−1}(ω)}(s,a) − Q_{Λ_φ^k(ω)}(s,a) )²
           [+ λ mean_{D_b} ( ΓQ_{ω*}(s,a) − Q_{ω*}(s,a) )²,  ω* = Λ_φ^∞   (Eq. 4)]
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from pbo_tf.loss_terms import (
    NORMALISATIONS,
    BellmanTerm,
    FixedPointTerm,
    LossContext,
    chain_targets,
    combine_terms,
    prediction_chain,
    target_chain,
)
from pbo_tf.operators.base import PBO
from pbo_tf.q.base import QFamily

__all__ = [
    "NORMALISATIONS",
    "PBOLossExtras",
    "chain_targets",
    "fqi_loss",
    "iterated_bellman_loss",
    "pbo_loss",
    "prediction_chain",
    "target_chain",
]


class PBOLossExtras(NamedTuple):
    """Diagnostics returned with `pbo_loss`.

    Attributes:
      per_k: ``[K]`` mean squared Bellman residual of each term ``k = 1..K`` (before normalisation).
      fixed_point: scalar fixed-point term F of Eq. (4), before its weight and scales (0 when not used).
    """

    per_k: tf.Tensor
    fixed_point: tf.Tensor


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
    """The PBO loss (Eq. 3, optionally + Eq. 4's fixed-point term): `BellmanTerm` and `FixedPointTerm`
    combined on one `LossContext`.

    Args:
      pbo: the operator being trained, ``Λ_φ``.
      q_family: the Q family of the parameters.
      params: ``[n_w, d]`` batch ``W_b`` of starting parameters ω.
      batch: dict of transition tensors ``state [B, …]``, ``action [B]``, ``reward [B]``,
        ``next_state [B, …]``, ``done [B]``.
      target_params: ``[K, n_w, d]`` frozen chain ``Λ̄^{k−1}(ω)``, k = 1..K (see `target_chain`); K is its
        leading dimension. Pass None when giving ``targets``.
      gamma: discount factor.
      normalisation, stop_gradient_between: `BellmanTerm`'s options.
      fixed_point_term: add Eq. (4)'s term (needs ``pbo.has_fixed_point`` or ``fixed_point_input``).
      targets: ``[K, n_w, B]`` precomputed `chain_targets` of the batch, instead of ``target_params``.
      predicted: ``[K, n_w, d]`` the prediction chain `prediction_chain` of ``params``, when the caller has
        computed it; by default it is computed here.
      fixed_point_input: ``[d]`` or ``[m, d]`` estimates ``ω̄`` of the point the operator's iterates go to
        (`FixedPointTerm`'s deep form, the mean over the m rows); None: the closed-form ``pbo.fixed_point()``.
      fixed_point_weight: the term's weight λ (a number >= 0 or a scalar tensor).
      fixed_point_balance: scale the term to the size of Eq. (3)'s part (`FixedPointTerm`'s ``balance``).

    Returns:
      ``(loss, PBOLossExtras)``.

    Raises:
      ValueError: unknown normalisation, a fixed-point term for an operator without one, or mismatched
        shapes (naming them).
    """
    terms = [BellmanTerm(normalisation=normalisation, stop_gradient_between=stop_gradient_between)]
    if fixed_point_term:
        if not pbo.has_fixed_point and fixed_point_input is None:
            raise ValueError(
                f"{type(pbo).__name__} has no closed-form fixed point: Eq. (4)'s term needs an estimate of "
                "it (fixed_point_input: FixedPointTerm.iterations > 0)"
            )
        term = FixedPointTerm(weight=fixed_point_weight, balance=fixed_point_balance)
        terms.append(term if fixed_point_input is None else term.with_points(fixed_point_input))
    context = LossContext(
        pbo=pbo,
        q_family=q_family,
        params=params,
        batch=batch,
        gamma=gamma,
        target_params=target_params,
        targets=targets,
        predicted=predicted,
        predicted_stop_gradient_between=stop_gradient_between,
    )
    loss, metrics = combine_terms(terms, context)
    per_k = tf.stack([metrics[f"bellman/k{k + 1}"] for k in range(context.K)])
    fixed_point = metrics.get("fixed_point/unscaled", metrics.get("fixed_point", tf.zeros([])))
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
