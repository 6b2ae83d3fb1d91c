"""Summary statistics over seeds (NumPy / SciPy only, no TensorFlow).

The paper reports every curve as the mean over independent seeds with a 95% confidence interval; this
module computes that interval with Student's t distribution (`mean_and_ci`), ignoring missing (NaN) entries
column by column so that runs with missing iterates (e.g. a diverged value or an FQI run beyond its K) can be
aggregated with the others. On the curves of ``metrics.json`` (``[{"k": k, metric: value, ...}]``):
`aggregate_curves` (mean and half width per k and metric), `mean_over_seeds` (per-seed dicts such as
``reference`` and ``budget``) and `summarise_seeds` (the top level of a batched run's ``metrics.json``).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import special as _special  # Much lighter to import than scipy.stats.


def mean_and_ci(
    values: np.ndarray, axis: int = 0, confidence: float = 0.95
) -> tuple[np.ndarray | np.floating, np.ndarray | np.floating]:
    """Mean and Student-t confidence interval half width over seeds.

    The half width is ``t_{(1 + confidence) / 2, n - 1} * std(ddof=1) / sqrt(n)`` where ``n`` is the number
    of non-NaN entries along ``axis``, counted separately for every other index (column). A column with a
    single value gets a half width of 0; a column without any value gets NaN for both the mean and the half
    width. No warning is emitted for such columns.

    Args:
        values: Array of samples, e.g. shaped ``[n_seeds, n_points]``. NaNs mark missing samples.
        axis: Axis holding the samples (seeds).
        confidence: Confidence level of the interval, strictly between 0 and 1.

    Returns:
        ``(mean, half_width)``, both shaped like ``values`` with ``axis`` removed (NumPy scalars when
        ``values`` is one-dimensional).

    Raises:
        ValueError: If ``confidence`` is not in ``(0, 1)``.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    array = np.asarray(values, dtype=np.float64)
    count = np.sum(~np.isnan(array), axis=axis)
    with warnings.catch_warnings():
        # All-NaN columns ("Mean of empty slice") and single-value columns ("Degrees of freedom <= 0")
        # are handled explicitly below.
        warnings.simplefilter("ignore", category=RuntimeWarning)
        mean = np.nanmean(array, axis=axis)
        std = np.nanstd(array, axis=axis, ddof=1)
        t_quantile = _special.stdtrit(np.maximum(count - 1, 1), (1.0 + confidence) / 2.0)
        half_width = t_quantile * std / np.sqrt(np.maximum(count, 1))
    half_width = np.where(count >= 2, half_width, np.where(count == 1, 0.0, np.nan))
    if np.ndim(half_width) == 0:
        return np.float64(mean), np.float64(half_width)
    return mean, half_width


def summarise_seeds(per_seed: list[dict]) -> dict:
    """The top-level entries of a batched ``metrics.json`` from its ``per_seed`` entries: the curve's mean
    and 95% Student-t half width (``curve``, ``curve_ci95``), the mean over seeds of ``reference`` and
    ``budget``, and ``constant_map_seeds``, how many seeds' operator is a constant map (when some seed's
    ``operator_activity`` was measured: `pbo_tf.evaluation.operator_activity`)."""
    curve, ci = aggregate_curves([p["curve"] for p in per_seed])
    out = {
        "curve": curve,
        "curve_ci95": ci,
        "reference": mean_over_seeds([p.get("reference") for p in per_seed]),
    }
    budgets = [p["budget"] for p in per_seed if p.get("budget")]
    if budgets:
        out["budget"] = mean_over_seeds(budgets)
    verdicts = [p["operator_activity"].get("constant") for p in per_seed if p.get("operator_activity")]
    if any(v is not None for v in verdicts):
        out["constant_map_seeds"] = sum(1 for v in verdicts if v)
    return out


def mean_over_seeds(entries: list[dict | None]) -> dict:
    """Key by key mean of per-seed dicts (``reference``, ``budget``): numbers and equally shaped lists of
    numbers are averaged (an integer mean that is whole stays an int); other values are kept when every seed
    has the same one, else None. Keys of the first dict; seeds without the key are left out of its mean."""
    entries = [e for e in entries if isinstance(e, dict)]
    if not entries:
        return {}
    out = {}
    for key in entries[0]:
        values = [e[key] for e in entries if key in e]
        mean = _numeric_mean(values)
        if mean is not None:
            out[key] = mean
        else:
            out[key] = values[0] if all(v == values[0] for v in values) else None
    return out


def _numeric_mean(values: list):
    """Mean of numbers or of equally shaped (nested) lists of numbers; None for anything else."""
    if any(isinstance(v, (bool, str)) or v is None for v in values):
        return None
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    mean = array.mean(axis=0)
    if mean.ndim == 0 and all(isinstance(v, (int, np.integer)) for v in values) and float(mean).is_integer():
        return int(mean)
    return mean.tolist()


def aggregate_curves(curves: list[list[dict]]) -> tuple[list[dict], list[dict]]:
    """Mean and 95% Student-t half width over seeds of curves with the same k entries (None = missing)."""
    mean, ci = [], []
    for entries in zip(*curves, strict=True):
        m, c = {"k": entries[0]["k"]}, {"k": entries[0]["k"]}
        for key in entries[0]:
            if key == "k":
                continue
            values = np.array([np.nan if e.get(key) is None else float(e[key]) for e in entries])
            if np.all(np.isnan(values)):
                m[key] = c[key] = None
                continue
            mu, half = mean_and_ci(values)
            m[key] = float(mu)
            c[key] = float(half) if np.isfinite(half) else None
        mean.append(m)
        ci.append(c)
    return mean, ci
