"""Paired-by-seed comparisons: per-seed curves across K, wins and the paired t-test against SciPy's."""

import numpy as np
import pytest
from scipy import stats

from pbo_tf.analysis import paired


def _run(algorithm, seed, values, K, env="car_on_hill"):
    return {
        "env": env,
        "algorithm": algorithm,
        "K": K,
        "seed": seed,
        "curve": [{"k": k, "J": v} for k, v in enumerate(values)],
    }


def _runs():
    rng = np.random.default_rng(0)
    fqi = rng.normal(size=(4, 6))
    method = fqi + rng.normal(0.5, 1.0, size=(4, 6))
    runs = [_run("fqi", s, fqi[s, :3], K=2) for s in range(2)]  # seeds 0-1 only to k = 2 ...
    runs += [_run("fqi", s, fqi[s], K=5) for s in range(2, 4)]  # ... seeds 2-3 to k = 5
    runs += [_run("fqi", 0, fqi[0], K=5)]  # seed 0 also to k = 5: the longer curve wins
    runs += [_run("ours", s, method[s], K=2) for s in range(4)]
    runs += [_run("ours", 9, method[0], K=2, env="lqr")]  # another env: ignored
    return runs, fqi, method


def test_wins_mean_difference_and_p_match_a_hand_computation_and_scipy():
    runs, fqi, method = _runs()
    base = paired.seed_curves(runs, "car_on_hill", "fqi", "J")
    ours = paired.seed_curves(runs, "car_on_hill", "ours", "J")
    assert sorted(base) == [0, 1, 2, 3] and sorted(ours) == [0, 1, 2, 3]
    assert sorted(base[0]) == [0, 1, 2, 3, 4, 5] and sorted(base[1]) == [0, 1, 2]
    got = paired.compare(ours, base, 1, higher_is_better=True)
    d = method[:, 1] - fqi[:, 1]
    assert got["n"] == 4 and got["wins"] == int(np.sum(d > 0))
    assert got["mean_difference"] == pytest.approx(d.mean())
    assert got["p"] == pytest.approx(stats.ttest_rel(method[:, 1], fqi[:, 1]).pvalue, rel=1e-9)
    at4 = paired.compare(ours, base, 4, higher_is_better=True)  # fqi seeds 1 has no k = 4
    assert at4["n"] == 3
    lower = paired.compare(ours, base, 1, higher_is_better=False)
    assert lower["wins"] == int(np.sum(d < 0))


def test_the_table_lists_each_method_and_its_wins():
    runs, fqi, method = _runs()
    table = paired.paired_table(runs, "car_on_hill", "J", ["ours"], "fqi", [1, 4])
    assert table[0] == "| method | seeds | k = 1 | k = 4 |"
    assert table[2].startswith("| `fqi` | 0–3 |")
    d1 = method[:, 1] - fqi[:, 1]
    assert f"{int(np.sum(d1 > 0))}/4, Δ {d1.mean():+.3g}" in table[4]
    assert table[4].startswith("| `ours` ahead of `fqi` |")
    assert paired._seed_text([0, 1, 2, 5, 7, 8]) == "0–2, 5, 7–8"
    with pytest.raises(ValueError, match="no finished 'ifqi' run of 'car_on_hill'"):
        paired.paired_table(runs, "car_on_hill", "J", ["ifqi"], "fqi", [1])


def test_paired_t_edge_cases():
    assert np.isnan(paired.paired_t_p(np.array([1.0])))
    assert paired.paired_t_p(np.array([2.0, 2.0])) == 0.0
    assert paired.paired_t_p(np.array([0.0, 0.0])) == 1.0
