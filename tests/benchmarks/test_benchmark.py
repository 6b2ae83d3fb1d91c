"""benchmarks/cases.py and benchmarks/benchmark.py: the analytic counts the bounds rest on, and the
end-to-end case's measurement."""

import numpy as np

from benchmarks import benchmark, cases
from pbo_tf.operators import DeepPBO


def test_weight_traffic_counts_the_deep_pbo_s_own_parameters():
    d = 7
    pbo = DeepPBO(d, hidden_multiples=[2, 2, 2, 2])
    pbo.ensure_built()
    n_params = sum(int(np.prod(v.shape)) for v in pbo.trainable_variables)
    sizes = [d] + [2 * d] * 4 + [d]
    assert cases.mlp_params(sizes) == n_params
    # K = 3 applications, each read forward and backward; the merged weight gradient written once; Adam 7.
    assert cases.step_weight_bytes(3, sizes) == 14 * n_params * 4
    assert cases.step_weight_bytes(3, sizes, bytes_per_value=2) == 14 * n_params * 2


def test_lunar_lander_counts_are_those_of_the_issue_s_shape():
    # K = 10, d = 1261, deep PBO [2, 2, 2, 2]: 25.45 M parameters, 28 passes of 4 bytes; ≈ 31 GFLOP.
    n = 2 * (1261 * 2522) + 3 * 2522**2 + 4 * 2522 + 1261
    weight_bytes, flops = cases.LUNAR_LANDER_PRODQN_WEIGHT_BYTES, cases.LUNAR_LANDER_PRODQN_FLOPS
    assert weight_bytes == 28 * n * 4
    assert abs(flops / 1e9 - 31.0) < 0.1


def test_end_to_end_case_times_the_real_trainer_and_its_compiled_refresh():
    """The end_to_end case counts the steps of its calls and measures the share of `train()`'s wall time
    spent inside the compiled refresh (a fraction, and most of it on a problem this small)."""
    from pbo_tf.experiments.problems import ChainWalkProblem
    from pbo_tf.operators import LinearPBO

    cw = ChainWalkProblem()
    out = benchmark.end_to_end_vs_bare(
        cw.q_family(), lambda: LinearPBO(40), cw.dataset(0), 2, 10, 100, cw.gamma, 2, 3, 1
    )
    assert out["steps"] == 3 * 2 * 4  # 3 refreshes × 2 passes × 4 batches of D (one W batch)
    assert 0.0 < out["inside"] <= 1.0
    assert out["t_train"] > 0 and out["t_bare"] > 0 and out["paired"] > 0
