"""Property tests of the operators (hypothesis): ``chain(ω, K)`` is K repeated applications (and
``iterate`` its prefix with ω), an operator maps a stack of vectors row by row, and the linear PBO's
closed-form fixed point satisfies ``Λ(ω*) = ω*``."""

import numpy as np
import tensorflow as tf
import tf_keras
from hypothesis import given
from hypothesis import strategies as st

from pbo_tf.operators import DeepPBO, LinearPBO, TabularPBO
from pbo_tf.operators.structured import LQRPBO

TOL = dict(rtol=1e-4, atol=1e-5)


def _operator(kind: str, d: int, seed: int):
    """A small operator of ``kind`` whose weights are random (not the near-zero initialisation), so that
    repeated applications differ from one another."""
    tf_keras.utils.set_random_seed(seed)
    if kind == "linear":
        pbo = LinearPBO(d, init_std=0.3 / np.sqrt(d))
    elif kind == "deep":
        pbo = DeepPBO(d, hidden_units=[3, 4], init_std=0.5)
    elif kind == "tabular":
        pbo = TabularPBO(d, 1, 0.9, init_std=0.3)  # N = d states, one action
    else:
        pbo = LQRPBO(-1.5, init_std=0.3)
    pbo.ensure_built()
    return pbo


KINDS = st.sampled_from(["linear", "deep", "tabular", "lqr"])


@given(KINDS, st.integers(2, 6), st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**16))
def test_chain_is_repeated_application_and_iterate_its_prefix(kind, d, n_w, K, seed):
    pbo = _operator(kind, d, seed)
    params = np.random.default_rng(seed).normal(size=(n_w, pbo.d)).astype(np.float32)
    chain = pbo.chain(tf.constant(params), K).numpy()
    assert chain.shape == (K, n_w, pbo.d)
    current = tf.constant(params)
    for k in range(K):
        current = pbo(current)
        np.testing.assert_allclose(chain[k], current.numpy(), **TOL)
    iterates = pbo.iterate(tf.constant(params), K).numpy()
    np.testing.assert_array_equal(iterates[0], params)
    np.testing.assert_allclose(iterates[1:], chain, **TOL)


@given(KINDS, st.integers(2, 6), st.integers(2, 5), st.integers(0, 2**16))
def test_an_operator_maps_a_stack_of_vectors_row_by_row(kind, d, n_w, seed):
    pbo = _operator(kind, d, seed)
    params = np.random.default_rng(seed).normal(size=(n_w, pbo.d)).astype(np.float32)
    stacked = pbo(tf.constant(params)).numpy()
    for i in range(n_w):
        np.testing.assert_allclose(stacked[i], pbo(tf.constant(params[i : i + 1])).numpy()[0], **TOL)


@given(st.integers(1, 8), st.floats(0.0, 0.95), st.integers(0, 2**16))
def test_the_linear_fixed_point_is_a_fixed_point(d, radius, seed):
    """``ω* = (I − W)⁻¹ b`` with ``‖W‖₂ = radius < 1``: ``Λ(ω*) = ω*``, and iterating from anywhere
    approaches it (a contraction)."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(d, d))
    W *= radius / max(np.linalg.norm(W, 2), 1e-12)
    b = rng.normal(size=d)
    pbo = LinearPBO(d)
    pbo.ensure_built()
    pbo.dense.kernel.assign(W.T.astype(np.float32))
    pbo.dense.bias.assign(b.astype(np.float32))
    star = pbo.fixed_point().numpy()
    np.testing.assert_allclose(star, np.linalg.solve(np.eye(d) - W, b), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(pbo(star[None]).numpy()[0], star, rtol=1e-4, atol=1e-4)
    start = rng.normal(size=(1, d)).astype(np.float32)
    far = pbo.iterate(tf.constant(start), 30).numpy()[-1, 0]
    assert np.linalg.norm(far - star) <= radius**30 * np.linalg.norm(start[0] - star) + 1e-3
