"""`FlatMLPQ.layout`: each layer's kernel and bias shapes and offsets tile ``[0, d)`` in `flatten`'s order,
and slicing ``ω`` with them gives the kernels and biases `unflatten` gives."""

import numpy as np

from pbo_tf.q import FlatMLPQ, LayerLayout


def test_the_layout_of_a_two_hidden_layer_family():
    q = FlatMLPQ(3, [4, 2], [[0.0, 1.0], [1.0, 0.0]])  # input 3 + 2 = 5: (5 -> 4), (4 -> 2), (2 -> 1)
    assert q.layout == [
        LayerLayout((5, 4), (4,), 0),
        LayerLayout((4, 2), (2,), 24),
        LayerLayout((2, 1), (1,), 34),
    ]
    assert [layer.bias_offset for layer in q.layout] == [20, 32, 36]
    assert [layer.size for layer in q.layout] == [24, 10, 3]
    assert q.layout[-1].offset + q.layout[-1].size == q.d == 37


def test_slicing_omega_with_the_layout_gives_the_unflattened_weights():
    q = FlatMLPQ(2, [6, 3], [-1.0, 1.0])
    omega = np.random.default_rng(0).normal(size=[2, q.d]).astype(np.float32)
    for layer, (kernel, bias) in zip(q.layout, q.unflatten(omega), strict=True):
        got = omega[:, layer.kernel_slice].reshape(-1, *layer.kernel_shape)
        np.testing.assert_array_equal(got, kernel.numpy())
        np.testing.assert_array_equal(omega[:, layer.bias_slice], bias.numpy())
        assert bias.shape[1:] == layer.bias_shape
