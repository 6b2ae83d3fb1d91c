"""`ConvPBO` (`pbo_tf.operators.conv`), the reference's ``DeepConvPBONet``: its output against a NumPy
convolution stack written out here, its weight count (independent of d), its initialisation (truncated
normal within two stds of ``init_std``, zero biases), XLA, gin and one-line errors."""

import gin
import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.operators.conv import ConvPBO
from pbo_tf.operators.factory import make_pbo
from pbo_tf.q import FlatMLPQ, TableQ


def _conv_same(x, kernel, bias):
    """A 1-d SAME convolution (cross-correlation, stride 1, zero padding) written out: ``x [d, c_in]``,
    ``kernel [k, c_in, c_out]``, ``bias [c_out]`` → ``[d, c_out]``."""
    k, c_in, c_out = kernel.shape
    half = (k - 1) // 2
    out = np.zeros((x.shape[0], c_out))
    for t in range(x.shape[0]):
        for o in range(c_out):
            total = bias[o]
            for m in range(k):
                src = t + m - half
                if 0 <= src < x.shape[0]:
                    total += sum(x[src, i] * kernel[m, i, o] for i in range(c_in))
            out[t, o] = total
    return out


def _by_hand(pbo, omega):
    out = []
    for row in omega.astype(np.float64):
        h = row[:, None]
        for j, layer in enumerate(pbo.conv_layers):
            h = _conv_same(h, layer.kernel.numpy(), layer.bias.numpy())
            if j < len(pbo.conv_layers) - 1:
                h = np.maximum(h, 0.0)
        out.append(h[:, 0])
    return np.stack(out)


@pytest.mark.parametrize("kernel_size", [15, 5])
def test_its_output_is_the_convolution_stack_written_out(kernel_size):
    d = 23  # more than one window, and the 7 zero-padded entries at each end of a kernel of 15
    pbo = ConvPBO(d, channels=[2, 3], kernel_size=kernel_size, init_std=0.3, seed=0)
    pbo.ensure_built()
    rng = np.random.default_rng(1)
    for layer in pbo.conv_layers:  # non-zero biases, so they are checked too
        layer.bias.assign(rng.normal(0, 0.1, layer.bias.shape).astype(np.float32))
    omega = rng.normal(size=(3, d)).astype(np.float32)
    want = _by_hand(pbo, omega)
    assert np.abs(want).max() > 1e-2
    np.testing.assert_allclose(pbo(omega).numpy(), want, rtol=1e-5, atol=1e-6)
    compiled = tf.function(pbo, jit_compile=True)(tf.constant(omega)).numpy()
    np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-6)


def test_the_reference_s_operator_has_the_same_few_weights_whatever_d():
    counts = []
    for d in (151, 4609):
        pbo = ConvPBO(d)  # the reference's channels [2, 2, 2, 2] and kernel 15
        pbo.ensure_built()
        counts.append(sum(int(np.prod(v.shape)) for v in pbo.trainable_weights))
    # 1 -> 2, three of 2 -> 2, 2 -> 1: kernel 15 · c_in · c_out plus c_out biases each
    assert counts == [15 * 1 * 2 + 2 + 3 * (15 * 2 * 2 + 2) + 15 * 2 * 1 + 1] * 2 == [249, 249]


def test_it_starts_truncated_normal_with_zero_biases_as_haiku_s_defaults():
    pbo = ConvPBO(50, channels=[64, 64], init_std=5e-3, seed=0)
    pbo.ensure_built()
    kernels = np.concatenate([layer.kernel.numpy().ravel() for layer in pbo.conv_layers])
    assert np.abs(kernels).max() <= 2 * 5e-3  # cut at two stds
    # the std of a normal cut at ±2σ is 0.88σ
    assert kernels.std() == pytest.approx(0.8796 * 5e-3, rel=0.03)
    assert all(not layer.bias.numpy().any() for layer in pbo.conv_layers)
    same = ConvPBO(50, channels=[64, 64], init_std=5e-3, seed=0)
    same.ensure_built()
    np.testing.assert_array_equal(same.conv_layers[1].kernel.numpy(), pbo.conv_layers[1].kernel.numpy())


def test_the_kind_is_built_through_gin_for_any_q_family():
    gin.parse_config(
        "make_pbo.kind = 'conv'\nmake_pbo.init_std = 0.01\nConvPBO.channels = [3]\nConvPBO.kernel_size = 5"
    )
    try:
        pbo = make_pbo(None, FlatMLPQ(2, [4], [-1.0, 1.0]), name="pbo", seed=1)
        table = make_pbo(None, TableQ(5, 2))  # it reads ω as a sequence: any family
    finally:
        gin.clear_config()
    assert isinstance(pbo, ConvPBO) and pbo.name == "pbo" and pbo.d == 21
    assert (pbo.channels, pbo.kernel_size, pbo.init_std) == ([3], 5, 0.01)
    assert table.d == 10 and table(np.ones((2, 10), np.float32)).shape == (2, 10)


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"ConvPBO.kernel_size must be a positive odd integer, got 4"):
        ConvPBO(10, kernel_size=4)
    with pytest.raises(ValueError, match=r"ConvPBO.channels must be positive, got \[2, 0\]"):
        ConvPBO(10, channels=[2, 0])
