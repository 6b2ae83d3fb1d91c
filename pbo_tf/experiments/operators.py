"""The operator factory of every experiment: `make_pbo` builds the PBO ``Λ_φ`` of a gin config.

The offline runner (`pbo_tf.experiments.runner.Experiment`: ProFQI and the oracle) and the online ProDQN
(`pbo_tf.experiments.online_agents.ProDQN`) both build their operator here, so ``make_pbo.*`` bindings mean
the same in every gin file (``make_pbo.kind = 'deep'``, ``make_pbo.hidden_multiples = [2, 2, 2, 2]``).
"""

from __future__ import annotations

import gin

from pbo_tf.operators import DeepPBO, LinearPBO

PBO_KINDS = ("linear", "deep", "structured", "oracle")


@gin.configurable
def make_pbo(
    problem,
    q_family,
    kind: str = gin.REQUIRED,
    init_std: float = 5e-6,
    hidden_multiples=None,
    hidden_units=None,
    name: str | None = None,
    compute_dtype: str | None = None,
):
    """Builds the operator of kind ``linear``, ``deep``, ``structured`` (the problem's closed-form shape
    with learned coefficients: tabular on chain-walk, LQR on LQR) or ``oracle`` (the true operator).
    ``compute_dtype="bfloat16"`` gives the deep PBO mixed precision (`DeepPBO`).

    Args:
      problem: the offline `pbo_tf.experiments.problems.Problem` (for ``structured`` and ``oracle``), or
        None (online runs: ``linear`` and ``deep`` only).
      q_family: the Q family whose parameters ``ω`` (``[d]``) the operator maps.
      kind, init_std, hidden_multiples, hidden_units, compute_dtype: the operator (see `DeepPBO`).
      name: the operator's name.

    Raises:
      ValueError: an unknown kind, or one the problem does not have.
    """
    d = q_family.d
    kw = {"name": name} if name else {}
    if kind == "linear":
        return LinearPBO(d, init_std=init_std, **kw)
    if kind == "deep":
        return DeepPBO(
            d,
            hidden_multiples=hidden_multiples,
            hidden_units=hidden_units,
            init_std=init_std,
            compute_dtype=compute_dtype,
            **kw,
        )
    if kind in ("structured", "oracle") and problem is None:
        raise ValueError(
            f"kind={kind!r} needs an offline problem; the kinds of online runs: ['linear', 'deep']"
        )
    try:
        if kind == "structured":
            return problem.structured_pbo(q_family, init_std, **kw)
        if kind == "oracle":
            return problem.oracle_pbo(q_family)
    except NotImplementedError as e:
        raise ValueError(f"kind={kind!r}: {e}; the kinds every problem has: ['linear', 'deep']") from e
    raise ValueError(f"unknown PBO kind {kind!r}; known kinds: {list(PBO_KINDS)}")
