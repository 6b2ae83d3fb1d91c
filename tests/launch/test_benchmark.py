"""launch/benchmark.py: the analytic counts its bounds rest on."""

import os
import sys

import numpy as np

from pbo_tf.operators import DeepPBO

LAUNCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "launch")
sys.path.insert(0, LAUNCH)

import benchmark  # noqa: E402


def test_weight_traffic_counts_the_deep_pbo_s_own_parameters():
    d = 7
    pbo = DeepPBO(d, hidden_multiples=[2, 2, 2, 2])
    pbo.ensure_built()
    n_params = sum(int(np.prod(v.shape)) for v in pbo.trainable_variables)
    sizes = [d] + [2 * d] * 4 + [d]
    assert benchmark._mlp_params(sizes) == n_params
    # K = 3 applications, each read forward and backward; the merged weight gradient written once; Adam 7.
    assert benchmark.step_weight_bytes(3, sizes) == 14 * n_params * 4
    assert benchmark.step_weight_bytes(3, sizes, bytes_per_value=2) == 14 * n_params * 2
    # TensorFlow's own gradient also reads and writes the gradient accumulator in each application.
    assert benchmark.step_weight_bytes(3, sizes, chain_gradient="autodiff") == 19 * n_params * 4


def test_lunar_lander_counts_are_those_of_the_issue_s_shape():
    # K = 10, d = 1261, deep PBO [2, 2, 2, 2]: 25.45 M parameters, 28 passes of 4 bytes; ≈ 31 GFLOP.
    n = 2 * (1261 * 2522) + 3 * 2522**2 + 4 * 2522 + 1261
    weight_bytes, flops = benchmark.LUNAR_LANDER_PRODQN_WEIGHT_BYTES, benchmark.LUNAR_LANDER_PRODQN_FLOPS
    assert weight_bytes == 28 * n * 4
    assert abs(flops / 1e9 - 31.0) < 0.1
