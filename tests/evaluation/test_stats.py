"""Tests of pbo_tf.evaluation.stats."""

import math
import warnings

import numpy as np
import pytest

from pbo_tf.evaluation.stats import mean_and_ci

T_975_DF2 = 4.302652729911275  # Student t quantile 0.975 with 2 degrees of freedom.
T_975_DF1 = 12.706204736174705  # ... with 1 degree of freedom.


def test_hand_computed_value():
    mean, half_width = mean_and_ci(np.array([1.0, 2.0, 3.0]))
    assert mean == pytest.approx(2.0)
    # std(ddof=1) of [1, 2, 3] is 1.
    assert half_width == pytest.approx(T_975_DF2 * 1.0 / math.sqrt(3))
    assert np.ndim(mean) == 0 and np.ndim(half_width) == 0


def test_columns_and_axis():
    values = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    mean, half_width = mean_and_ci(values)
    np.testing.assert_allclose(mean, [2.0, 20.0])
    np.testing.assert_allclose(half_width, [T_975_DF2 / math.sqrt(3), 10 * T_975_DF2 / math.sqrt(3)])
    mean_t, half_width_t = mean_and_ci(values.T, axis=1)
    np.testing.assert_allclose(mean_t, mean)
    np.testing.assert_allclose(half_width_t, half_width)


def test_confidence_level():
    _, half_width_90 = mean_and_ci([1.0, 2.0, 3.0], confidence=0.9)
    assert half_width_90 == pytest.approx(2.919985580355516 / math.sqrt(3))


def test_nans_are_ignored_per_column_and_n_one_gives_zero():
    values = np.array(
        [
            [1.0, 5.0, 4.0, np.nan],
            [2.0, np.nan, np.nan, np.nan],
            [3.0, 7.0, np.nan, np.nan],
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # No "mean of empty slice" / "ddof" warnings.
        mean, half_width = mean_and_ci(values)
    np.testing.assert_allclose(mean[:3], [2.0, 6.0, 4.0])
    # Column 1: [5, 7], n = 2, std = sqrt(2) -> half width = t_{0.975, 1} * sqrt(2) / sqrt(2).
    np.testing.assert_allclose(half_width[:3], [T_975_DF2 / math.sqrt(3), T_975_DF1, 0.0])
    assert np.isnan(mean[3]) and np.isnan(half_width[3])


def test_single_seed():
    mean, half_width = mean_and_ci(np.array([[4.0, 5.0]]))
    np.testing.assert_allclose(mean, [4.0, 5.0])
    np.testing.assert_allclose(half_width, [0.0, 0.0])


def test_invalid_confidence():
    with pytest.raises(ValueError, match="confidence"):
        mean_and_ci([1.0, 2.0], confidence=1.0)
