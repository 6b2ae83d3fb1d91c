"""Tests of pbo_tf.evaluation.stats: the interval by hand, the curves and per-seed dicts of metrics.json."""

import math
import warnings

import numpy as np
import pytest

from pbo_tf.evaluation.stats import aggregate_curves, mean_and_ci, mean_over_seeds, summarise_seeds

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


def test_mean_over_seeds_averages_numbers_and_lists_and_keeps_shared_values():
    got = mean_over_seeds(
        [
            {"J": 8.0, "steps": 4, "odd": 3, "P": [1.0, 2.0], "name": "a", "flag": True},
            {"J": 9.0, "steps": 4, "odd": 4, "P": [3.0, 4.0], "name": "a", "flag": False},
            None,
        ]
    )
    assert got == {"J": 8.5, "steps": 4, "odd": 3.5, "P": [2.0, 3.0], "name": "a", "flag": None}
    assert isinstance(got["steps"], int)
    assert mean_over_seeds([None]) == {}


def test_aggregate_curves_by_hand_with_missing_values_and_the_fixed_point():
    curves = [
        [{"k": 0, "J": 1.0, "v": None}, {"k": 1, "J": 2.0, "v": None}, {"k": "inf", "J": 5.0, "v": None}],
        [{"k": 0, "J": 3.0, "v": None}, {"k": 1, "J": None, "v": None}, {"k": "inf", "J": 7.0, "v": None}],
        [{"k": 0, "J": 5.0, "v": None}, {"k": 1, "J": 4.0, "v": None}, {"k": "inf", "J": 9.0, "v": None}],
    ]
    mean, ci = aggregate_curves(curves)
    assert [e["k"] for e in mean] == [e["k"] for e in ci] == [0, 1, "inf"]
    assert [e["J"] for e in mean] == pytest.approx([3.0, 3.0, 7.0])
    # k = 0 and inf: std 2 over 3 seeds; k = 1: [2, 4] over 2 seeds, std sqrt(2)
    assert [e["J"] for e in ci] == pytest.approx(
        [T_975_DF2 * 2 / math.sqrt(3), T_975_DF1 * math.sqrt(2) / math.sqrt(2), T_975_DF2 * 2 / math.sqrt(3)]
    )
    assert all(e["v"] is None for e in mean + ci)  # no seed has a value
    one, one_ci = aggregate_curves([curves[0]])
    assert [e["J"] for e in one] == [1.0, 2.0, 5.0] and [e["J"] for e in one_ci] == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        aggregate_curves([curves[0], curves[1][:2]])  # curves of other lengths


def test_summarise_seeds_is_the_top_level_of_a_batched_metrics_json():
    per_seed = [
        {"curve": [{"k": 0, "J": 1.0}], "reference": {"optimal_J": 2.0}, "budget": {"fraction": 0.5},
         "operator_activity": {"constant": True}},
        {"curve": [{"k": 0, "J": 3.0}], "reference": {"optimal_J": 4.0}, "budget": {"fraction": 0.5},
         "operator_activity": {"constant": False}},
    ]  # fmt: skip
    got = summarise_seeds(per_seed)
    assert got["curve"] == [{"k": 0, "J": 2.0}]
    assert got["curve_ci95"] == [{"k": 0, "J": pytest.approx(T_975_DF1 * math.sqrt(2) / math.sqrt(2))}]
    assert got["reference"] == {"optimal_J": 3.0} and got["budget"] == {"fraction": 0.5}
    assert got["constant_map_seeds"] == 1
    bare = summarise_seeds([{"curve": [{"k": 0, "J": 1.0}]}])  # no budget, no activity measured
    assert set(bare) == {"curve", "curve_ci95", "reference"} and bare["reference"] == {}
