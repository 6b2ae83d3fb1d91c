"""rliable-style statistics (`pbo_tf.analysis.robust`) against values worked out by hand and against rliable's
own numbers on the same arrays.

The rliable numbers were produced with rliable 1.2.0 (arch 7.2.0, pandas 2.x, NumPy 2) in a throwaway venv:
``metrics.aggregate_iqm(A)``, ``metrics.probability_of_improvement(X, Y)``,
``library.get_interval_estimates({...}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=50000,
random_state=np.random.RandomState(0))`` (then, continuing that state, the IQM of ``X1`` with 50 000 reps and
``P(X > Y)`` with 20 000) and ``library.create_performance_profile({"a": A}, [0, 2.5, 5, 50], reps=20000)``.
Bootstrap intervals come from different random draws here, so they are compared within a tolerance."""

import numpy as np
import pytest
from scipy import stats

from pbo_tf.analysis import robust

#: 5 runs × 2 tasks.
A = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 5.0], [4.0, 40.0], [100.0, 0.0]])
X1 = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0])
Y1 = np.array([2.0, 7.0, 1.0, 8.0, 2.0, 8.0])
X = np.array([[1.0, 5.0], [2.0, 6.0], [3.0, 7.0]])
Y = np.array([[2.0, 5.0], [2.0, 1.0], [0.0, 9.0], [4.0, 4.0]])


def test_iqm_drops_a_quarter_of_the_runs_from_each_end_like_scipy_trim_mean():
    # A's 10 scores sorted: 0 1 | 2 3 4 5 10 20 | 40 100: floor(10/4) = 2 dropped each end, 44/6
    # (rliable: 7.3333).
    assert robust.iqm(A) == pytest.approx(44 / 6)
    # 1 1 3 4 5 9: one dropped from each end: (1 + 3 + 4 + 5) / 4 (rliable: 3.25).
    assert robust.iqm(X1) == pytest.approx(3.25)
    assert robust.iqm(np.arange(1.0, 8.0)) == pytest.approx(4.0)  # 7 runs: 2..6 (rliable: 4.0)
    assert robust.iqm(np.arange(20.0)) == pytest.approx(9.5)  # 20 runs: 5..14, no fraction either way
    rng = np.random.default_rng(3)
    for n in (4, 9, 13):
        v = rng.normal(size=n)
        assert robust.iqm(v) == pytest.approx(stats.trim_mean(v, 0.25, axis=None))
    with pytest.raises(ValueError, match="finite"):
        robust.iqm([1.0, np.nan])


def test_probability_of_improvement_counts_ties_one_half():
    # X1 against Y1: 3 > {2, 1, 2}, 1 ties 1 (twice, 1/2 each), 4 > 3 of them, 5 > 3, 9 > all 6: 16 / 36.
    assert robust.probability_of_improvement(X1, Y1) == pytest.approx(16 / 36)  # rliable: 0.444444
    assert robust.probability_of_improvement(X1, Y1) == pytest.approx(
        stats.mannwhitneyu(X1, Y1, alternative="greater").statistic / 36
    )
    # Task 0: 1 > 0; 2 > 0 and ties 2, 2; 3 > 2, 2, 0: 6 / 12. Task 1: 5 > 1, 4 and ties 5; 6 and 7 > 3 of 4:
    # 8.5 / 12. Mean 0.6041666 (rliable: 0.6041666666666667).
    assert robust.probability_of_improvement(X, Y) == pytest.approx((6 / 12 + 8.5 / 12) / 2)
    assert robust.probability_of_improvement(Y1, Y1) == 0.5


def test_paired_probability_of_improvement_is_the_share_of_seeds_ahead_plus_half_the_ties():
    x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 2.0, 5.0, 1.0])
    assert robust.paired_probability_of_improvement(x, y) == pytest.approx(
        2.5 / 4
    )  # ahead, tie, behind, ahead
    # unpaired, every pair: 1 > 0 and ties 1; 2 > 0, 1 and ties 2; 3 and 4 > 0, 2, 1: (1.5 + 2.5 + 3 + 3) / 16
    assert robust.probability_of_improvement(x, y) == pytest.approx(10 / 16)
    point, (lo, hi) = robust.improvement_ci(x, y, paired=True, reps=2000, seed=1)
    assert point == pytest.approx(0.625) and 0.0 <= lo <= point <= hi <= 1.0
    # every seed ahead: every resample too, so the interval is the point
    assert robust.improvement_ci(x + 10, y, paired=True, reps=200)[1].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="same shape"):
        robust.paired_probability_of_improvement(x, y[:3])


def test_bootstrap_intervals_match_rlibles_and_are_seeded():
    iqm, (lo, hi) = robust.stratified_bootstrap_ci(A, robust.iqm, reps=20000, seed=0)
    assert iqm == pytest.approx(7.333333333333333)
    assert lo == pytest.approx(2.33333333, abs=0.05) and hi == pytest.approx(31.33333333, abs=0.5)
    _, interval = robust.stratified_bootstrap_ci(X1, robust.iqm, reps=20000, seed=0)
    assert interval == pytest.approx([1.5, 6.5], abs=0.05)
    point, interval = robust.improvement_ci(X, Y, paired=False, reps=20000, seed=0)
    assert point == pytest.approx(0.6041666666666667)
    assert interval == pytest.approx([0.29166667, 0.875], abs=0.03)
    again = robust.stratified_bootstrap_ci(A, robust.iqm, reps=500, seed=7)[1]
    assert robust.stratified_bootstrap_ci(A, robust.iqm, reps=500, seed=7)[1].tolist() == again.tolist()


def test_stratified_resampling_keeps_each_tasks_runs_in_their_task():
    scores = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    rng = np.random.default_rng(0)
    for _ in range(20):
        sample = robust.stratified_resample(scores, rng)
        assert set(sample[:, 0]) <= {1.0, 2.0, 3.0} and set(sample[:, 1]) <= {10.0, 20.0, 30.0}


def test_performance_profile_is_the_share_of_runs_above_tau_with_rliables_band():
    profile, band = robust.performance_profile(A, [0.0, 2.5, 5.0, 50.0], reps=20000, seed=0)
    # above 0: 9 of 10 (the 0 is not above); above 2.5: 3 4 5 10 20 40 100; above 5: 10 20 40 100;
    # above 50: 100
    assert profile.tolist() == pytest.approx([0.9, 0.7, 0.4, 0.1])
    assert band[0] == pytest.approx([0.7, 0.4, 0.1, 0.0], abs=0.1)  # rliable: [0.7, 0.4, 0.1, 0.0]
    assert band[1] == pytest.approx([1.0, 1.0, 0.7, 0.3], abs=0.1)  # rliable: [1.0, 1.0, 0.7, 0.3]
