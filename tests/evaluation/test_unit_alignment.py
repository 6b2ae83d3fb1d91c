"""pbo_tf.evaluation.unit_alignment: the mean pairwise cosine of the hidden units' incoming weights, worked
out by hand, against a loop over pairs, unchanged by permuting the units, and its one-line refusals."""

import itertools

import numpy as np
import pytest

from pbo_tf.evaluation.unit_alignment import unit_alignment
from pbo_tf.q import FlatMLPQ, PerActionMLPQ, TableQ


def test_the_alignment_of_units_written_by_hand():
    q = FlatMLPQ(1, [3, 2], [-1.0, 1.0])  # layers (2, 3), (3, 2), (2, 1): d = 20
    w0 = np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])  # columns (1, 0), (2, 0), (0, 3): cosines 1, 0, 0
    w1 = np.array([[1.0, -2.0], [1.0, -2.0], [0.0, 0.0]])  # columns (1, 1, 0), (-2, -2, 0): cosine -1
    omega = np.concatenate([w0.ravel(), np.zeros(3), w1.ravel(), np.zeros(2), np.ones(2), [0.5]])
    assert omega.size == q.d
    np.testing.assert_allclose(unit_alignment(q, omega), [1 / 3, -1.0], rtol=1e-12)
    copies = omega.copy()
    copies[:6] = np.array([[1.0, 2.0, 0.5], [3.0, 6.0, 1.5]]).ravel()  # one column, scaled three times
    assert unit_alignment(q, copies)[0] == pytest.approx(1.0)
    dead = omega.copy()
    dead[:6] = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]).ravel()  # two zero columns: cosine 0 with all
    assert unit_alignment(q, dead)[0] == pytest.approx(0.0)


def _pairwise(kernel):
    b = kernel.shape[1]
    cos = [kernel[:, i] @ kernel[:, j] / np.linalg.norm(kernel[:, i]) / np.linalg.norm(kernel[:, j])
           for i, j in itertools.combinations(range(b), 2)]  # fmt: skip
    return np.mean(cos)


@pytest.mark.parametrize(
    "q", [FlatMLPQ(3, [5, 4, 6], [0.0, 1.0]), PerActionMLPQ(2, [7, 3], 4)], ids=["flat_mlp", "per_action"]
)
def test_it_is_the_mean_over_pairs_and_ignores_the_units_order(q):
    rng = np.random.default_rng(0)
    omega = rng.normal(size=(3, q.d))
    got = unit_alignment(q, omega)
    assert got.shape == (3, len(q.layout) - 1)
    for n in range(3):
        for h, layer in enumerate(q.layout[:-1]):
            kernel = omega[n, layer.kernel_slice].reshape(layer.kernel_shape)
            assert got[n, h] == pytest.approx(_pairwise(kernel), rel=1e-10, abs=1e-12)
            permuted = omega[n].copy()
            permuted[layer.kernel_slice] = kernel[:, rng.permutation(kernel.shape[1])].ravel()
            assert unit_alignment(q, permuted)[h] == pytest.approx(got[n, h], rel=1e-12, abs=1e-12)


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"unit_alignment needs an MLP Q family with a layout, got TableQ"):
        unit_alignment(TableQ(3, 2), np.zeros(6))
    q = FlatMLPQ(1, [3], [0.0, 1.0])
    with pytest.raises(ValueError, match=rf"parameters of size d = {q.d}, got {q.d + 1}"):
        unit_alignment(q, np.zeros(q.d + 1))


def test_a_run_records_the_alignment_of_its_iterates_with_its_operator_activity():
    """`AlgorithmBuilder.operator_activity` with the curve's iterates: per ω_k the alignment (4 decimals),
    None for an iterate past K that blew up; nothing for a Q family without a layout."""
    from pbo_tf.algorithm import AlgorithmBuilder
    from pbo_tf.configs import ProFQIConfig
    from pbo_tf.operators import DeepPBO

    builder = AlgorithmBuilder(ProFQIConfig(K=2, refreshes=1, w_size=3))
    q = FlatMLPQ(1, [4, 3], [-1.0, 1.0])
    iterates = np.random.default_rng(0).normal(size=(4, q.d))
    iterates[3, 5] = np.nan
    activity = builder.operator_activity(DeepPBO(q.d, [2]), q, 0, iterates)
    want = unit_alignment(q, iterates[:3])
    assert activity["unit_alignment"][3] is None and len(activity["unit_alignment"]) == 4
    np.testing.assert_allclose(activity["unit_alignment"][:3], want, atol=5.1e-5)
    table = TableQ(3, 2)
    activity = builder.operator_activity(DeepPBO(table.d, [2]), table, 0, np.zeros((3, table.d)))
    assert "unit_alignment" not in activity and "W" in activity
    assert builder.operator_activity(None, q, 0, iterates) is None
