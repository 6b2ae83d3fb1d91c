"""Is a trained deep PBO still a function of its input? Hidden-unit activity and the spread of Λ.

A ReLU layer in which no unit fires on any input passes on only its biases, so every ``Λ(ω)`` is the same
vector and the learned curve is flat from k = 1 on (every ``Λ^k(ω₀)``, k ≥ 1, is that vector). A layer
with a few units carrying tiny values does the same in float32. Both are checked here on two sets of
parameter vectors: the training set W and fresh vectors drawn like W with another seed.

* ``active_units``: per hidden layer, the units whose ReLU output is > 0 on at least one vector of the set
  (`pbo_tf.operators.DeepPBO.active_units`).
* ``spread``: ``max_j std_i Λ(x_i)_j``, the largest (over output coordinates j) population standard
  deviation over the set's vectors x_i; ``input_spread`` is the same of the x_i themselves and
  ``relative_spread = spread / input_spread``. A constant map has spread exactly 0.
* ``translation`` (residual operators ``Λ(ω) = ω + f(ω)`` only, with ``update_relative_spread``, the
  relative spread of ``Λ(ω) − ω``): f is a constant map (a ReLU layer without an active unit, or no
  spread), so Λ only adds the same vector to every ω and its iterates drift along it.
* ``constant``: on a set, some hidden layer has no active unit (in an operator where that freezes the
  output: `pbo_tf.operators.DeepPBO.dead_layer_is_constant`) or ``relative_spread ≤ tolerance``; for the
  operator, Λ shows no variation within W nor within the fresh vectors (sets of fewer than two vectors
  say nothing and are left out).
"""

from __future__ import annotations

import numpy as np

#: ``relative_spread`` at or below which Λ counts as a constant map.
CONSTANT_TOLERANCE = 1e-6

#: How many fresh parameter vectors `seed_sets` draws, and the offset of their seed from the run's
#: (they are not in W).
FRESH_VECTORS = 30
FRESH_SEED_OFFSET = 1000


def spread(values) -> float:
    """``max_j std_i values[i, j]`` (population std, in float64) of ``[n, d]`` values; 0 for ``n ≤ 1``."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"expected [n, d] values, got shape {values.shape}")
    if values.shape[0] <= 1 or values.shape[1] == 0:
        return 0.0
    return float(np.max(np.std(values, axis=0)))


def set_activity(pbo, params, tolerance: float = CONSTANT_TOLERANCE) -> dict:
    """Activity of a `DeepPBO` on one set of parameter vectors ``[n, d]`` (see the module docstring); of an
    operator without ``active_units`` (the convolutional and equivariant ones), its spread alone.

    Returns:
      ``{"n", "active_units", "input_spread", "spread", "relative_spread", "constant"}``;
      ``relative_spread`` is None when the inputs do not vary, ``constant`` None for ``n < 2``.
    """
    import tensorflow as tf

    x = np.asarray(params, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != pbo.d:
        raise ValueError(f"params must be [n, {pbo.d}], got shape {x.shape}")
    out = pbo(tf.constant(x)).numpy()
    active = [int(a) for a in pbo.active_units(x)] if hasattr(pbo, "active_units") else []
    input_spread, output_spread = spread(x), spread(out)
    relative = output_spread / input_spread if input_spread > 0 else None
    constant = None
    if len(x) >= 2:
        # a dead layer freezes the output of the paper's ReLU operator, not of a residual or leaky one
        dead_layer = getattr(pbo, "dead_layer_is_constant", True) and min(active, default=1) == 0
        constant = bool(dead_layer or (relative is not None and relative <= tolerance))
    result = {
        "n": int(len(x)),
        "active_units": active,
        "input_spread": input_spread,
        "spread": output_spread,
        "relative_spread": relative,
        "constant": constant,
    }
    if getattr(pbo, "residual", False):  # Λ(ω) = ω + f(ω): is f still a function of ω?
        update = spread(out - x) / input_spread if input_spread > 0 else None
        result["update_relative_spread"] = update
        if len(x) >= 2:
            dead = min(active, default=1) == 0
            result["translation"] = bool(dead or (update is not None and update <= tolerance))
    return result


def operator_activity(pbo, params, fresh_params, tolerance: float = CONSTANT_TOLERANCE) -> dict:
    """Whether a trained operator is still a function of its input, on W and on fresh vectors.

    Args:
      pbo: the trained operator: a `pbo_tf.operators.DeepPBO` (its units and spread), or an operator whose
        class sets ``spread_activity`` (the convolutional and equivariant ones: their spread alone); any
        other operator gives ``{"kind": <class name>}``.
      params: the training set W ``[n_W, d]``.
      fresh_params: parameter vectors drawn like W but not trained on ``[n, d]``.
      tolerance: ``relative_spread`` at or below which Λ is constant on a set.

    Returns:
      ``{"kind": "DeepPBO", "width": [hidden widths], "tolerance", "W": set activity, "fresh": set activity,
      "constant": bool or None}`` (`set_activity`); ``constant`` is True when Λ is constant on every set of
      at least two vectors, None when no set has two.
    """
    from pbo_tf.operators import DeepPBO

    deep = isinstance(pbo, DeepPBO)
    if not (deep or getattr(pbo, "spread_activity", False)):
        return {"kind": type(pbo).__name__}
    pbo.ensure_built()
    sets = {"W": set_activity(pbo, params, tolerance), "fresh": set_activity(pbo, fresh_params, tolerance)}
    verdicts = [s["constant"] for s in sets.values() if s["constant"] is not None]
    out = {
        "kind": type(pbo).__name__,
        **({"width": [int(layer.units) for layer in pbo.hidden_layers]} if deep else {}),
        "tolerance": float(tolerance),
        **sets,
        "constant": all(verdicts) if verdicts else None,
    }
    translations = [s["translation"] for s in sets.values() if s.get("translation") is not None]
    if translations:
        out["translation"] = all(translations)
    return out


def seed_sets(q_family, w_size: int, seed: int, draw=None) -> tuple[np.ndarray, np.ndarray]:
    """The set W ``[w_size, d]`` of a seed and ``FRESH_VECTORS`` fresh vectors drawn alike (seed ``seed +
    FRESH_SEED_OFFSET``), with ``draw(q_family, n, seed) -> [n, d]`` (default ``initial_params``)."""
    if draw is None:
        draw = lambda q, n, s: q.initial_params(n, s)  # noqa: E731
    params = np.asarray(draw(q_family, max(int(w_size), 1), seed))
    return params, np.asarray(draw(q_family, FRESH_VECTORS, seed + FRESH_SEED_OFFSET))


def activity_scalars(sets: dict) -> dict[str, float]:
    """TensorBoard scalars of `set_activity` results keyed by set name: active units per hidden layer and
    the relative spread of Λ (0 when the inputs do not vary)."""
    out = {}
    for name, activity in sets.items():
        for j, units in enumerate(activity["active_units"]):
            out[f"operator/{name}_active_units_layer{j + 1}"] = float(units)
        out[f"operator/{name}_relative_spread"] = float(activity["relative_spread"] or 0.0)
    return out


def activity_text(sets: dict) -> str:
    """The progress-line text of `set_activity` results: ``Λ on W: active [..], spread 0.81; on …``."""
    parts = [
        f"on {name}: active {a['active_units']}, spread {a['relative_spread'] or 0.0:.3g}"
        for name, a in sets.items()
    ]
    return "Λ " + "; ".join(parts)


def constant_map_message(activity: dict) -> str | None:
    """The log line for an operator that `operator_activity` found constant or a translation (None for any
    other)."""
    units = (
        f"active units per hidden layer on W {activity['W']['active_units']} of {activity['width']}, "
        if "width" in activity
        else ""
    )
    if activity.get("translation"):
        detail = (
            f"active units per hidden layer of f on W {activity['W']['active_units']} of {activity['width']}"
            if "width" in activity
            else f"relative spread of Λ(ω) − ω over W {activity['W'].get('update_relative_spread') or 0:.3g}"
        )
        return f"the trained residual operator is a translation ω + c ({detail}): its iterates drift along c"
    if not activity.get("constant"):
        return None
    return (
        f"the trained operator is a constant map ({units}spread of Λ over fresh ω "
        f"{activity['fresh']['spread']:.3g}): every k >= 1 gives the same Q"
    )


def activity_monitor(w_set: np.ndarray, fresh: np.ndarray):
    """A trainer's ``monitor``: ``monitor(pbo) -> (scalars, text)``, the operator's activity on W and on
    fresh vectors (`set_activity`) as TensorBoard scalars (`activity_scalars`) and progress text
    (`activity_text`)."""

    def monitor(pbo):
        sets = {"W": set_activity(pbo, w_set), "fresh": set_activity(pbo, fresh)}
        return activity_scalars(sets), activity_text(sets)

    return monitor
