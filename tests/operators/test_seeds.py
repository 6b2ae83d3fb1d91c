"""`make_pbo`'s seed: the same seed builds the same operator bit for bit whatever the global random state,
different seeds different ones, for every kind; ``seed=None`` draws from the global generator as before."""

import numpy as np
import pytest
import tf_keras

from pbo_tf.envs.chain_walk.problem import ChainWalkProblem
from pbo_tf.envs.lqr.problem import LQRProblem
from pbo_tf.operators.base import initializer_seeds
from pbo_tf.operators.factory import WSampler, make_pbo
from pbo_tf.q import FlatMLPQ

CHAIN_WALK, LQR = ChainWalkProblem(), LQRProblem()
MLP = FlatMLPQ(2, [6], [-1.0, 1.0])
# (problem, Q family, make_pbo options, bound on |weight|: 2 std for a truncated normal, None otherwise)
KINDS = {
    "linear": (None, MLP, dict(kind="linear", init_std=1e-3), 2e-3),
    "deep": (None, MLP, dict(kind="deep", hidden_multiples=[1, 1], init_std=1e-3), 2e-3),
    "deep_glorot": (None, MLP, dict(kind="deep", hidden_multiples=[1, 1], kernel_init="glorot_uniform"), 1.0),
    "deep_he_residual": (
        None, MLP, dict(kind="deep", hidden_units=[8, 8], kernel_init="he_normal", residual=True), None,
    ),
    "structured_chain": (CHAIN_WALK, CHAIN_WALK.q_family(), dict(kind="structured", init_std=1e-3), 2e-3),
    "structured_lqr": (LQR, LQR.q_family(), dict(kind="structured", init_std=1e-3), 2e-3),
}  # fmt: skip


def _weights(kind, seed, global_seed):
    problem, q, options, _ = KINDS[kind]
    tf_keras.utils.set_random_seed(global_seed)
    pbo = make_pbo(problem, q, seed=seed, **options)
    pbo.ensure_built()
    return pbo.get_weights()


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_same_seed_gives_the_same_operator_and_another_seed_another(kind):
    same = _weights(kind, 3, global_seed=0), _weights(kind, 3, global_seed=1)
    other = _weights(kind, 4, global_seed=0)
    for a, b in zip(*same, strict=True):
        np.testing.assert_array_equal(a, b)
    drawn = [i for i, w in enumerate(same[0]) if w.any()]  # zero biases and outputs draw nothing
    assert drawn
    for i in drawn:
        assert not np.array_equal(same[0][i], other[i]), i
    bound = KINDS[kind][3]
    if bound is not None:  # the seeded draw keeps the initialisation's scale
        assert max(np.abs(same[0][i]).max() for i in drawn) <= bound
    # two weights of one operator never share a draw (a seed per weight)
    flat = [same[0][i].ravel() for i in drawn]
    for i in range(len(flat)):
        for j in range(i + 1, len(flat)):
            n = min(len(flat[i]), len(flat[j]))
            assert not np.array_equal(flat[i][:n], flat[j][:n])


@pytest.mark.parametrize("kind", ["linear", "deep", "structured_chain"])
def test_without_a_seed_the_global_generator_draws_the_operator(kind):
    """``seed=None`` (the runners'): the draw follows ``tf_keras.utils.set_random_seed``, as before."""
    a, b, c = (_weights(kind, None, global_seed=g) for g in (5, 5, 6))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, z) for x, z in zip(a, c, strict=True))


def test_the_oracle_has_nothing_to_draw():
    a = make_pbo(CHAIN_WALK, CHAIN_WALK.q_family(), kind="oracle", seed=1).get_weights()
    b = make_pbo(CHAIN_WALK, CHAIN_WALK.q_family(), kind="oracle", seed=2).get_weights()
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_initializer_seeds_and_the_w_sampler_are_functions_of_the_seed():
    assert initializer_seeds(None, 3) == [None, None, None]
    seeds = initializer_seeds(7, 4)
    assert seeds == initializer_seeds(7, 4) and len(set(seeds)) == 4
    assert all(0 <= s < 2**31 for s in seeds) and seeds != initializer_seeds(8, 4)
    sampler = WSampler(last_layer_std=0.1)
    (w_a, o_a), (w_b, o_b), (w_c, _) = sampler(MLP, 5, 2), sampler(MLP, 5, 2), sampler(MLP, 5, 3)
    np.testing.assert_array_equal(w_a, w_b)
    np.testing.assert_array_equal(o_a, o_b)
    assert not np.array_equal(w_a, w_c)
