"""`EquivariantPBO` (`pbo_tf.operators.equivariant`): it commutes with every permutation of every hidden
layer's units (1-, 2- and 3-hidden-layer MLPs and a per-action one) and not with a permutation of the input
features or of the actions; its weight count does not depend on the hidden widths; its gradients against
finite differences in float64; one output worked out entry by entry in NumPy; XLA; the standardisation
over W; gin, the registry and one-line errors; ProFQI with the Bellman and fixed-point terms."""

import gin
import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.operators import registry
from pbo_tf.operators.equivariant import EquivariantPBO
from pbo_tf.operators.factory import make_pbo
from pbo_tf.q import FlatMLPQ, PerActionMLPQ, TableQ

FAMILIES = {
    "one_hidden": FlatMLPQ(2, [5], [-1.0, 1.0]),
    "two_hidden": FlatMLPQ(2, [5, 4], [-1.0, 1.0]),
    "three_hidden": FlatMLPQ(3, [4, 3, 5], [-1.0, 0.0, 1.0]),
    "per_action": PerActionMLPQ(3, [4, 5], 3),
}


def _blocks(omega, shapes):
    """``[n, d]`` → per layer ``[kernel [n, a, b], bias [n, b]]`` (the flat layout: kernel row-major)."""
    out, offset = [], 0
    for a, b in shapes:
        kernel = omega[:, offset : offset + a * b].reshape(-1, a, b)
        offset += a * b
        out.append([kernel, omega[:, offset : offset + b]])
        offset += b
    return out


def _flat(blocks):
    return np.concatenate([p for k, b in blocks for p in (k.reshape(len(k), -1), b)], axis=1)


def _permute_hidden(omega, shapes, perms):
    """``P·ω``: hidden layer h's units (h = 1..L) permuted by ``perms[h - 1]``: ``W_{h-1}[:, π]``,
    ``b_{h-1}[π]``, ``W_h[π, :]``; Q_ω is unchanged."""
    blocks = _blocks(omega, shapes)
    for h, perm in enumerate(perms, start=1):
        blocks[h - 1][0] = blocks[h - 1][0][:, :, perm]
        blocks[h - 1][1] = blocks[h - 1][1][:, perm]
        blocks[h][0] = blocks[h][0][:, perm, :]
    return _flat(blocks)


def _w_set(q, n=6, seed=0):
    """Members of different Q-functions: Keras initialisations with a drawn last layer and biases."""
    rng = np.random.default_rng(seed)
    w = q.initial_params(n, seed)
    return (w + rng.normal(0, 0.2, w.shape)).astype(np.float32)


def _operator(q, **options):
    options = {"channels": [6, 5], "init_std": 0.3, "seed": 1, **options}
    pbo = EquivariantPBO(q, **options)
    if pbo.standardise:
        pbo.adapt(_w_set(q))
    return pbo


@pytest.mark.parametrize("family", FAMILIES, ids=list(FAMILIES))
@pytest.mark.parametrize(
    "residual, probes, mix_fixed, centre",
    [(False, 0, False, False), (True, 0, False, False), (True, 3, False, False), (True, 0, True, False),
     (True, 0, False, True), (False, 2, True, True)],
    ids=["plain", "residual", "probes", "mix_fixed_units", "centre_hidden", "plain_centre_hidden_all"],
)  # fmt: skip
def test_it_commutes_with_every_hidden_permutation(family, residual, probes, mix_fixed, centre):
    q = FAMILIES[family]
    pbo = _operator(
        q,
        residual=residual,
        activation="silu",
        probes=probes,
        mix_fixed_units=mix_fixed,
        centre_hidden=centre,
    )
    rng = np.random.default_rng(3)
    omega = _w_set(q, 4, seed=5)
    out = pbo(omega).numpy()
    assert np.abs(out - (omega if residual else 0)).max() > 1e-2  # a map that does something
    shapes = [layer.kernel_shape for layer in q.layout]
    for _ in range(3):
        perms = [rng.permutation(width) for width in q.hidden]
        assert any((p != np.arange(len(p))).any() for p in perms)
        got = pbo(_permute_hidden(omega, shapes, perms)).numpy()
        np.testing.assert_allclose(got, _permute_hidden(out, shapes, perms), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("family", ["two_hidden", "per_action"])
def test_it_tells_input_features_and_actions_apart(family):
    """Permuting the input features (W_0's rows), or the outputs (the last layer's columns and bias) of a
    per-action Q, is not a symmetry of Q: the embeddings make the operator see it."""
    q = FAMILIES[family]
    pbo = _operator(q, residual=True)
    omega = _w_set(q, 4, seed=5)
    out = pbo(omega).numpy()
    shapes = [layer.kernel_shape for layer in q.layout]

    def permute_inputs(x, perm):
        blocks = _blocks(x, shapes)
        blocks[0][0] = blocks[0][0][:, perm, :]
        return _flat(blocks)

    perm = np.roll(np.arange(shapes[0][0]), 1)
    change = np.abs(pbo(permute_inputs(omega, perm)).numpy() - permute_inputs(out, perm)).max()
    assert change > 1e-2 * np.abs(out - omega).max()
    if family == "per_action":

        def permute_outputs(x, perm):
            blocks = _blocks(x, shapes)
            blocks[-1][0], blocks[-1][1] = blocks[-1][0][:, :, perm], blocks[-1][1][:, perm]
            return _flat(blocks)

        perm = np.roll(np.arange(q.n_actions), 1)
        change = np.abs(pbo(permute_outputs(omega, perm)).numpy() - permute_outputs(out, perm)).max()
        assert change > 1e-2 * np.abs(out - omega).max()


def test_its_weight_count_does_not_depend_on_the_hidden_widths():
    def trained(q, **options):
        pbo = EquivariantPBO(q, channels=[16, 16], **options)
        return sum(int(np.prod(v.shape)) for v in pbo.trainable_weights)

    def flat(hidden):
        return FlatMLPQ(2, hidden, [-1.0, 1.0])

    def per_action(hidden):
        return PerActionMLPQ(3, hidden, 2)

    def count(hidden, probes=0):
        return trained(flat(hidden), probes=probes)

    assert count([5, 4]) == count([64, 64]) == count([256, 3])
    assert count([5]) != count([5, 4])  # one more Q layer: one more set of matrices
    # probes: the first operator layer's P×16 matrices, 2 for Q layer 0 (its outputs are hidden units), 3
    # for Q layer 1 (both sides hidden), 1 for the output layer (its inputs); the probe inputs not trained
    assert count([5, 4], probes=8) == count([64, 64], probes=8) == count([5, 4]) + 6 * 8 * 16

    # mix_fixed_units: per operator layer (1 -> 16 -> 16 -> 1 channels) one (a·C, a·C') matrix over the 3
    # inputs of FlatMLPQ(2, ...) (2 state features and the action); one output, so nothing over outputs
    added = sum((3 * c_in) * (3 * c_out) for c_in, c_out in [(1, 16), (16, 16), (16, 1)])
    mixed = trained(flat([5, 4]), mix_fixed_units=True)
    assert mixed == trained(flat([64, 64]), mix_fixed_units=True) == count([5, 4]) + added
    # PerActionMLPQ(3, ..., 2): 3 inputs, and 2 outputs for the last kernel and the last bias
    added = sum((9 + 2 * 4) * c_in * c_out for c_in, c_out in [(1, 16), (16, 16), (16, 1)])
    mixed = trained(per_action([5, 4]), mix_fixed_units=True)
    assert mixed == trained(per_action([64, 7]), mix_fixed_units=True)
    assert mixed == trained(per_action([5, 4])) + added


@pytest.mark.parametrize(
    "probes, mix_fixed, centre", [(0, False, False), (2, False, False), (0, True, False), (0, False, True)]
)
def test_its_gradients_are_finite_differences_in_float64(probes, mix_fixed, centre):
    q = FlatMLPQ(1, [3, 2], [-1.0, 1.0])  # layers (2, 3), (3, 2), (2, 1): d = 20
    if mix_fixed:
        q = PerActionMLPQ(2, [3, 2], 2)  # layers (2, 3), (3, 2), (2, 2): d = 23, fixed units on both ends
    pbo = EquivariantPBO(
        q,
        channels=[3, 2],
        activation="silu",
        residual=True,
        init_std=0.5,
        seed=2,
        dtype="float64",
        probes=probes,
        mix_fixed_units=mix_fixed,
        centre_hidden=centre,
    )
    pbo.adapt(_w_set(q))
    rng = np.random.default_rng(0)
    omega = tf.constant(_w_set(q, 3, seed=7).astype(np.float64))
    weights = rng.normal(size=(3, q.d))

    apply = tf.function(pbo.apply)  # reads the variables at each call

    def loss():
        return tf.reduce_sum(apply(omega) * weights)

    with tf.GradientTape() as tape:
        tape.watch(omega)
        value = loss()
    grads = tape.gradient(value, [omega, *pbo.trainable_weights])
    assert all(v.dtype == tf.float64 for v in pbo.weights)
    eps = 1e-6
    omega_np = omega.numpy()
    for flat_index in rng.choice(omega_np.size, 12, replace=False):
        i, j = np.unravel_index(flat_index, omega_np.shape)
        plus, minus = omega_np.copy(), omega_np.copy()
        plus[i, j] += eps
        minus[i, j] -= eps
        numeric = (
            np.sum(apply(tf.constant(plus)).numpy() * weights)
            - np.sum(apply(tf.constant(minus)).numpy() * weights)
        ) / (2 * eps)
        np.testing.assert_allclose(grads[0].numpy()[i, j], numeric, rtol=1e-6, atol=1e-8)
    checked = 0
    for variable, grad in zip(pbo.trainable_weights, grads[1:], strict=True):
        start = variable.numpy()
        flat = start.reshape(-1)
        for index in rng.choice(flat.size, 1, replace=False):
            values = []
            for sign in (1, -1):
                moved = flat.copy()
                moved[index] += sign * eps
                variable.assign(moved.reshape(start.shape))
                values.append(float(loss()))
            variable.assign(start)
            numeric = (values[0] - values[1]) / (2 * eps)
            np.testing.assert_allclose(grad.numpy().reshape(-1)[index], numeric, rtol=1e-6, atol=1e-8)
            checked += 1
    assert checked == len(pbo.trainable_weights) > 60


def _by_hand(pbo, omega, q_slope=0.0):
    """`EquivariantPBO.apply` entry by entry with Python loops, from its docstring's formula (``q_slope``:
    the Q network's hidden units, ReLU at 0, leaky above, for the probe features)."""
    shapes, n_q = pbo.layer_shapes, len(pbo.layer_shapes)
    mean, scale = pbo.input_mean.numpy(), pbo.input_scale.numpy()
    act = {"relu": lambda x: np.maximum(x, 0.0)}[pbo.activation]
    outs = []
    for x in omega.astype(np.float64):
        blocks = _blocks(x[None], shapes)
        feats = []  # per hidden layer: [unit][probe], the activations at the probe inputs over their RMS
        if pbo.probes:
            u = pbo.probe_inputs.numpy().astype(np.float64).tolist()  # [probe][input unit]
            for l in range(n_q - 1):
                kernel, bias = blocks[l][0][0], blocks[l][1][0]
                a_n, b_n = shapes[l]
                pre = [
                    [sum(row[i] * kernel[i, j] for i in range(a_n)) + bias[j] for j in range(b_n)]
                    for row in u
                ]
                u = [[max(v, q_slope * v) for v in row] for row in pre]
                rms = np.sqrt(sum(v * v for row in u for v in row) / (len(u) * b_n))
                feats.append(np.array([[row[j] / rms for row in u] for j in range(b_n)]))
        h = []  # per Q layer: kernel [a][b] -> C-vector, bias [b] -> C-vector
        for l, (kernel, bias) in enumerate(blocks):
            k = (kernel[0] - mean[2 * l]) / scale[2 * l]
            b = (bias[0] - mean[2 * l + 1]) / scale[2 * l + 1]
            h.append((k[:, :, None], b[:, None]))
        for t, per_layer in enumerate(pbo.mixers):
            w = [{key: v.numpy().astype(np.float64) for key, v in weights.items()} for weights in per_layer]
            new = []
            for l, (k, b) in enumerate(h):
                a_n, b_n = shapes[l]
                c_out = w[l]["k_c"].shape[0]
                layer_mean = sum(k[i, j] for i in range(a_n) for j in range(b_n)) / (a_n * b_n)
                bias_mean = sum(b[j] for j in range(b_n)) / b_n
                nk, nb = np.zeros((a_n, b_n, c_out)), np.zeros((b_n, c_out))

                def row_mean(layer, i, h=h):  # mean over unit i's outgoing weights in Q layer ``layer``
                    kk = h[layer][0]
                    return sum(kk[i, jj] for jj in range(kk.shape[1])) / kk.shape[1]

                def col_mean(layer, j, h=h):  # mean over unit j's incoming weights in Q layer ``layer``
                    kk = h[layer][0]
                    return sum(kk[ii, j] for ii in range(kk.shape[0])) / kk.shape[0]

                for i in range(a_n):
                    for j in range(b_n):
                        rows = [row_mean(l, i)] + ([col_mean(l - 1, i), h[l - 1][1][i]] if l > 0 else [])
                        cols = [col_mean(l, j), b[j]] + ([row_mean(l + 1, j)] if l < n_q - 1 else [])
                        v = k[i, j] @ w[l]["k_self"]
                        v = v + np.concatenate(rows) @ w[l]["k_row"] + np.concatenate(cols) @ w[l]["k_col"]
                        v = v + np.concatenate([layer_mean, bias_mean]) @ w[l]["k_all"] + w[l]["k_c"]
                        if l == 0:
                            v = v + w[l]["k_in_emb"][i]
                        if l == n_q - 1:
                            v = v + w[l]["k_out_emb"][j]
                        if feats and t == 0 and l < n_q - 1:
                            v = v + feats[l][j] @ w[l]["k_probe_col"]
                        if feats and t == 0 and l > 0:
                            v = v + feats[l - 1][i] @ w[l]["k_probe_row"]
                        c_in = k.shape[-1]
                        if "k_in_fixed" in w[l]:  # W_0[i', j] through the matrix of the pair (i', i)
                            m = w[l]["k_in_fixed"]
                            for i2 in range(a_n):
                                block = m[i2 * c_in : (i2 + 1) * c_in, i * c_out : (i + 1) * c_out]
                                v = v + k[i2, j] @ block
                        if "k_out_fixed" in w[l]:  # W_L[i, j'] through the matrix of the pair (j', j)
                            m = w[l]["k_out_fixed"]
                            for j2 in range(b_n):
                                block = m[j2 * c_in : (j2 + 1) * c_in, j * c_out : (j + 1) * c_out]
                                v = v + k[i, j2] @ block
                        nk[i, j] = v
                for j in range(b_n):
                    cols = [col_mean(l, j)] + ([row_mean(l + 1, j)] if l < n_q - 1 else [])
                    v = b[j] @ w[l]["b_self"] + np.concatenate(cols) @ w[l]["b_col"]
                    v = v + np.concatenate([bias_mean, layer_mean]) @ w[l]["b_all"] + w[l]["b_c"]
                    if l == n_q - 1:
                        v = v + w[l]["b_out_emb"][j]
                    if feats and t == 0 and l < n_q - 1:
                        v = v + feats[l][j] @ w[l]["b_probe"]
                    if "b_out_fixed" in w[l]:  # b_L[j'] through the matrix of the pair (j', j)
                        m, c_in = w[l]["b_out_fixed"], b.shape[-1]
                        for j2 in range(b_n):
                            v = v + b[j2] @ m[j2 * c_in : (j2 + 1) * c_in, j * c_out : (j + 1) * c_out]
                    nb[j] = v
                new.append((nk, nb))
            last = t == len(pbo.mixers) - 1
            h = new if last else [(act(k), act(b)) for k, b in new]
        out = []
        for l, (k, b) in enumerate(h):
            for piece, f, s in ((blocks[l][0][0], k[..., 0], 2 * l), (blocks[l][1][0], b[..., 0], 2 * l + 1)):
                out.append((piece + scale[s] * f).reshape(-1))  # residual: ω + σ f(z)
        outs.append(np.concatenate(out))
    return np.stack(outs)


def test_one_output_is_the_formula_worked_out_entry_by_entry():
    q = FlatMLPQ(1, [2], [-1.0, 1.0])  # layers (2, 2), (2, 1): d = 9
    pbo = EquivariantPBO(q, channels=[2], residual=True, init_std=0.7, seed=4)
    w = _w_set(q)
    pbo.adapt(w)
    blocks = np.split(w.astype(np.float64), [4, 6, 8], axis=1)
    np.testing.assert_allclose(pbo.input_mean.numpy(), [b.mean() for b in blocks], rtol=1e-6)
    np.testing.assert_allclose(pbo.input_scale.numpy(), [b.std() for b in blocks], rtol=1e-6)
    for weights in pbo.mixers[0]:  # non-zero constants, so every term is checked
        weights["k_c"].assign(np.full(weights["k_c"].shape, 0.3, np.float32))
        weights["b_c"].assign(np.full(weights["b_c"].shape, -0.2, np.float32))
    omega = _w_set(q, 2, seed=9)
    want = _by_hand(pbo, omega)
    assert np.abs(want - omega).max() > 0.05
    np.testing.assert_allclose(pbo(omega).numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("slope", [0.0, 0.3], ids=["relu_q", "leaky_q"])
def test_the_probe_features_enter_as_the_formula_worked_out_entry_by_entry(slope):
    """``probes``: each hidden unit's activations at the probe inputs (by hand: loops over units and
    probes; the Q network's own activation, ReLU or leaky) join the first operator layer through their
    matrices; without them the map is another."""
    q = FlatMLPQ(1, [2, 3], [-1.0, 1.0], negative_slope=slope)  # layers (2, 2), (2, 3), (3, 1): d = 22
    pbo = EquivariantPBO(q, channels=[2], residual=True, init_std=0.7, seed=4, probes=3)
    pbo.adapt(_w_set(q))
    assert pbo.probe_inputs.shape == (3, 2) and not pbo.probe_inputs.trainable
    omega = _w_set(q, 2, seed=9)
    want = _by_hand(pbo, omega, slope)
    np.testing.assert_allclose(pbo(omega).numpy(), want, rtol=1e-5, atol=1e-6)
    for weights in pbo.mixers[0]:  # the probe matrices matter: zeroed, the output moves
        for key in [key for key in weights if "probe" in key]:
            weights[key].assign(np.zeros(weights[key].shape, np.float32))
    assert np.abs(pbo(omega).numpy() - want).max() > 1e-3
    np.testing.assert_allclose(pbo(omega).numpy(), _by_hand(pbo, omega, slope), rtol=1e-5, atol=1e-6)


def test_the_fixed_unit_terms_enter_as_the_formula_worked_out_entry_by_entry():
    """``mix_fixed_units``: the first kernel's columns mixed over the input features and the last kernel's
    rows and bias mixed over the actions, one matrix per pair (by hand: loops over the pairs); zeroed, the
    map is the one without them."""
    q = PerActionMLPQ(2, [2], 3)  # layers (2, 2), (2, 3): d = 15
    pbo = EquivariantPBO(q, channels=[2], residual=True, init_std=0.7, seed=4, mix_fixed_units=True)
    pbo.adapt(_w_set(q))
    keys = {key for weights in pbo.mixers[0] for key in weights if "fixed" in key}
    assert keys == {"k_in_fixed", "k_out_fixed", "b_out_fixed"}
    omega = _w_set(q, 2, seed=9)
    want = _by_hand(pbo, omega)
    np.testing.assert_allclose(pbo(omega).numpy(), want, rtol=1e-5, atol=1e-6)
    without = EquivariantPBO(q, channels=[2], residual=True, init_std=0.7, seed=4)
    without.adapt(_w_set(q))
    for mine, theirs in zip(pbo.mixers, without.mixers, strict=True):
        for weights, other in zip(mine, theirs, strict=True):
            for key, variable in weights.items():
                if "fixed" in key:
                    variable.assign(np.zeros(variable.shape, np.float32))
                else:
                    other[key].assign(variable)
    assert np.abs(pbo(omega).numpy() - want).max() > 1e-3
    np.testing.assert_allclose(pbo(omega).numpy(), without(omega).numpy(), rtol=1e-6, atol=1e-7)


def test_it_compiles_under_xla_and_matches_graph_mode():
    q = FAMILIES["per_action"]
    pbo = _operator(q, residual=True, channels=[4])
    omega = tf.constant(_w_set(q, 5, seed=1))
    eager = pbo(omega).numpy()
    compiled = tf.function(lambda x: pbo.chain(x, 2), jit_compile=True)(omega).numpy()
    np.testing.assert_allclose(compiled[0], eager, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(compiled[1], pbo(eager).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES, ids=list(FAMILIES))
@pytest.mark.parametrize("residual", [True, False], ids=["residual", "plain"])
def test_centre_hidden_is_the_same_update_less_its_means_over_the_hidden_units(family, residual):
    """``centre_hidden``: the operator with the same weights, its update (the output less ω, or less the
    W set's block means) centred by hand over each block's hidden-unit axes: a kernel's rows after the
    first layer, its columns before the last, and the hidden biases; the output bias keeps its update."""
    q = FAMILIES[family]
    free = _operator(q, residual=residual, probes=2)
    centred = _operator(q, residual=residual, probes=2, centre_hidden=True)
    for a, b in zip(free.weights, centred.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # the same seed: the same operator
    omega = _w_set(q, 3, seed=7)
    shapes = [layer.kernel_shape for layer in q.layout]
    mean = free.input_mean.numpy().astype(np.float64)
    base = omega if residual else _flat([[np.full_like(k, mean[2 * l]), np.full_like(b, mean[2 * l + 1])]
                                         for l, (k, b) in enumerate(_blocks(omega, shapes))])  # fmt: skip
    update = _blocks(free(omega).numpy().astype(np.float64) - base, shapes)
    last = len(shapes) - 1
    for l, (kernel, bias) in enumerate(update):
        if l > 0:
            kernel -= kernel.mean(axis=1, keepdims=True)
        if l < last:
            kernel -= kernel.mean(axis=2, keepdims=True)
            bias -= bias.mean(axis=1, keepdims=True)
    got = centred(omega).numpy().astype(np.float64)
    np.testing.assert_allclose(got, base + _flat(update), rtol=1e-5, atol=1e-5)
    blocks = _blocks(got - base, shapes)
    assert np.abs(blocks[last][1]).max() > 1e-3  # the output bias still moves
    for l, (kernel, bias) in enumerate(blocks):  # what is left has no common part over any hidden axis
        if l > 0:
            np.testing.assert_allclose(kernel.mean(axis=1), 0, atol=1e-5)
        if l < last:
            np.testing.assert_allclose(kernel.mean(axis=2), 0, atol=1e-5)
            np.testing.assert_allclose(bias.mean(axis=1), 0, atol=1e-5)
            assert np.abs(kernel).max() > 1e-3  # and the rest of the update is kept


def test_without_standardisation_or_residual_the_output_is_the_last_layer_alone():
    q = FAMILIES["one_hidden"]
    zero = EquivariantPBO(q, channels=[4], init_std=0.0, standardise=False)
    omega = _w_set(q, 3)
    np.testing.assert_array_equal(zero(omega).numpy(), np.zeros_like(omega))
    residual = EquivariantPBO(q, channels=[4], init_std=0.0, standardise=True, residual=True)
    np.testing.assert_array_equal(residual(omega).numpy(), omega)  # identity at init_std = 0
    plain = EquivariantPBO(q, channels=[4], init_std=0.0)
    plain.adapt(_w_set(q))
    np.testing.assert_allclose(
        plain(omega).numpy()[:, :15], np.full((3, 15), plain.input_mean.numpy()[0]), rtol=1e-6
    )  # the first kernel's entries: its mean over W (f = 0)


def test_the_kind_is_built_through_gin_with_its_options_and_the_standardisation_of_w():
    q = FAMILIES["two_hidden"]
    w = _w_set(q)
    gin.parse_config(
        "make_pbo.kind = 'equivariant'\nmake_pbo.init_std = 0.01\nEquivariantPBO.channels = [3]\n"
        "EquivariantPBO.residual = True\nEquivariantPBO.activation = 'silu'\nEquivariantPBO.probes = 5\n"
        "EquivariantPBO.centre_hidden = True"
    )
    try:
        pbo = make_pbo(None, q, name="pbo", seed=3, w_set=w)
    finally:
        gin.clear_config()
    assert isinstance(pbo, EquivariantPBO) and pbo.name == "pbo"
    assert (pbo.channels, pbo.residual, pbo.activation, pbo.init_std) == ([3], True, "silu", 0.01)
    assert pbo.probes == 5 and pbo.probe_inputs.shape == (5, q.layout[0].kernel_shape[0])
    assert pbo.centre_hidden
    np.testing.assert_allclose(pbo.input_mean.numpy()[0], w[:, :15].mean(), rtol=1e-5)
    again = make_pbo(None, q, kind="equivariant", seed=3)
    np.testing.assert_array_equal(
        again.weights[0].numpy(), make_pbo(None, q, kind="equivariant", seed=3).weights[0]
    )


def test_its_config_rebuilds_it_and_a_clone_computes_the_same_map():
    """ProDQN's target operator is a clone (`pbo_tf.agents.networks.clone_pbo`: `get_config`, `from_config`,
    every weight copied, the standardisation too)."""
    from pbo_tf.agents.networks import clone_pbo

    q = FAMILIES["per_action"]
    pbo = _operator(q, residual=True, probes=4, mix_fixed_units=True, centre_hidden=True)
    clone = clone_pbo(pbo, name="target")
    assert clone.probes == 4 and clone.mix_fixed_units and clone.centre_hidden
    np.testing.assert_array_equal(clone.probe_inputs.numpy(), pbo.probe_inputs.numpy())
    assert clone.layer_shapes == pbo.layer_shapes and clone.get_config()["name"] == "target"
    omega = _w_set(q, 3, seed=4)
    np.testing.assert_array_equal(clone(omega).numpy(), pbo(omega).numpy())
    config = dict(pbo.get_config(), d=q.d + 1)
    with pytest.raises(ValueError, match=rf"layers .* hold {q.d} parameters, not d = {q.d + 1}"):
        EquivariantPBO.from_config(config)


def test_bad_input_is_refused_in_one_line():
    q = FAMILIES["one_hidden"]
    with pytest.raises(ValueError, match=r"needs a FlatMLPQ Q family, got TableQ"):
        registry.build("equivariant", TableQ(3, 2))
    with pytest.raises(ValueError, match=r"channels must be a non-empty list of positive counts"):
        EquivariantPBO(q, channels=[])
    with pytest.raises(ValueError, match=r"unknown EquivariantPBO activation 'tanh'"):
        EquivariantPBO(q, activation="tanh")
    with pytest.raises(ValueError, match=r"EquivariantPBO.probes must be an integer >= 0, got -1"):
        EquivariantPBO(q, probes=-1)
    with pytest.raises(ValueError, match=r"adapt\(\) needs W as \[n_W, 26\], got shape \[3, 4\]"):
        EquivariantPBO(q).adapt(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"adapt\(\) needs an EquivariantPBO built with standardise=True"):
        EquivariantPBO(q, standardise=False).adapt(np.zeros((3, q.d)))


def test_profqi_trains_it_with_the_bellman_and_fixed_point_terms():
    """ProFQI with Eq. (3) and the fixed-point term, one refresh of 12 passes (one Adam step each: all of D
    and W): the first step's loss is the loss computed by hand from the initial operator, the loss falls
    towards the refresh's fixed target, and the trained operator still commutes with a hidden
    permutation."""
    from pbo_tf.data.transitions import Transitions
    from pbo_tf.loss_terms import BellmanTerm, FixedPointTerm
    from pbo_tf.losses import pbo_loss, target_chain
    from pbo_tf.optimizers import AnnealedAdam
    from tests.builders import profqi_trainer

    q = FlatMLPQ(2, [8], [-1.0, 1.0])
    rng = np.random.default_rng(0)
    n = 200
    states, actions = rng.uniform(-1, 1, (n, 2)), rng.integers(0, 2, n)
    rewards = np.sin(2 * states[:, 0]) * (2 * actions - 1)  # a reward Q can fit: the loss can fall
    data = Transitions.from_arrays(
        states, actions, rewards, rng.uniform(-1, 1, (n, 2)), rng.uniform(size=n) < 0.1
    )
    w = _w_set(q, 6)
    pbo, target = (make_pbo(None, q, kind="equivariant", init_std=0.05, seed=0, w_set=w) for _ in range(2))
    trainer = profqi_trainer(
        pbo=pbo, target_pbo=target, q_family=q, dataset=data.to_dataset(), w_set=w, K=3, gamma=0.9,
        optimizer=AnnealedAdam(lr_start=3e-3, lr_end=3e-3), seed=0, log=None, jit_compile=False,
        refreshes=1, passes_per_refresh=12, batch_size=200, w_batch_size=6,
        loss_terms=(BellmanTerm(), FixedPointTerm(iterations=2)), omega0=w[0],
    )  # fmt: skip
    for va, vb in zip(trainer.target_pbo.weights, pbo.weights, strict=True):
        va.assign(vb)
    estimate = pbo.iterate(tf.constant(w[:1]), 2)[-1]
    batch = {name: tf.constant(value) for name, value in trainer.data.items()}
    want, extras = pbo_loss(
        pbo, q, tf.constant(w), batch, target_chain(pbo, tf.constant(w), 3), 0.9,
        fixed_point_term=True, fixed_point_input=estimate,
    )  # fmt: skip
    assert float(extras.fixed_point) > 0
    losses = trainer.train()
    np.testing.assert_allclose(losses[0], float(want), rtol=1e-4)
    assert len(losses) == 12 and np.all(np.isfinite(losses)) and losses[-1] < 0.75 * losses[0]
    shapes = [layer.kernel_shape for layer in q.layout]
    perm = [rng.permutation(8)]
    omega = _w_set(q, 3, seed=2)
    np.testing.assert_allclose(
        pbo(_permute_hidden(omega, shapes, perm)).numpy(),
        _permute_hidden(pbo(omega).numpy(), shapes, perm),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("stop_gradient_between", [False, True])
def test_the_looped_chain_is_the_composed_chain_in_values_and_gradients(stop_gradient_between):
    """`chain` runs the K applications as one `tf.scan` loop (conv and equivariant): the values and the
    gradients (weights and ω) of `composed_chain`'s K nested applications."""
    from pbo_tf.operators.base import composed_chain
    from pbo_tf.operators.conv import ConvPBO

    q = FAMILIES["two_hidden"]
    omega = tf.constant(_w_set(q, 3, seed=6))
    for pbo in (_operator(q, residual=True), ConvPBO(q.d, channels=[3], kernel_size=5, init_std=0.3, seed=0)):
        pbo.ensure_built()
        got, want = [], []
        for chain, out in (
            (lambda x, p=pbo: p.chain(x, 3, stop_gradient_between), got),
            (lambda x, p=pbo: composed_chain(p, x, 3, stop_gradient_between), want),
        ):
            with tf.GradientTape() as tape:
                tape.watch(omega)
                loss = tf.reduce_sum(chain(omega) ** 2)
            out.append(float(loss))
            sources = [omega, *pbo.trainable_weights]
            grads = tape.gradient(loss, sources, unconnected_gradients=tf.UnconnectedGradients.ZERO)
            out.extend(g.numpy() for g in grads)  # (ω is unconnected when the gradient stops between)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        for g_got, g_want in zip(got[1:], want[1:], strict=True):
            np.testing.assert_allclose(g_got, g_want, rtol=1e-4, atol=1e-6)


def test_an_unrolled_chain_is_the_looped_chain_and_its_clone_unrolls_too():
    """``unroll_chain=True`` writes the K applications out: the same values and gradients as the looped
    chain of an operator with the same weights, inside a compiled function too; the option survives
    `get_config` (ProDQN's target operator is a clone)."""
    from pbo_tf.agents.networks import clone_pbo

    q = FAMILIES["two_hidden"]
    looped, unrolled = _operator(q, residual=True), _operator(q, residual=True, unroll_chain=True)
    omega = tf.constant(_w_set(q, 3, seed=6))
    results = []
    for pbo in (looped, unrolled):

        @tf.function
        def loss_and_grads(x, p=pbo):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(p.chain(x, 4) ** 2)
            return loss, tape.gradient(loss, [x, *p.trainable_weights])

        loss, grads = loss_and_grads(omega)
        results.append([loss.numpy(), *(g.numpy() for g in grads)])
        graph = loss_and_grads.get_concrete_function(omega).graph
        ops = {op.type for op in graph.get_operations()}
        assert ("While" in ops or "StatelessWhile" in ops) != pbo.unroll_chain
    for got, want in zip(results[1], results[0], strict=True):  # float32 rounding of sums of this scale
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(want).max()))
    clone = clone_pbo(unrolled, name="target")
    assert clone.unroll_chain and not clone_pbo(looped, name="target").unroll_chain


def test_operators_of_several_seeds_apply_and_chain_each_on_its_own_parameters():
    from pbo_tf.operators import apply_stacked, chain_stacked

    q = FAMILIES["one_hidden"]
    pbos = [_operator(q, residual=True, seed=s) for s in (0, 1)]
    params = np.stack([_w_set(q, 3, seed=s) for s in (2, 3)])
    applied = apply_stacked(pbos, params).numpy()
    chained = chain_stacked(pbos, params, 2).numpy()
    for i, pbo in enumerate(pbos):
        np.testing.assert_allclose(applied[i], pbo(params[i]).numpy(), rtol=1e-6)
        np.testing.assert_allclose(chained[:, i], pbo.chain(params[i], 2).numpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(applied[0] - pbos[1](params[0]).numpy()).max() > 1e-3  # the seeds' operators differ
