"""Summary statistics over seeds (NumPy / SciPy only, no TensorFlow).

The paper reports every curve as the mean over independent seeds with a 95% confidence interval; this
module computes that interval with Student's t distribution, ignoring missing (NaN) entries column by
column so that runs with missing iterates (e.g. a diverged value or an FQI run beyond its K) can be
aggregated with the others.
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
