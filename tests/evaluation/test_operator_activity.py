"""operator_activity: a deep PBO with a dead layer is a constant map (spread exactly 0); a live one has a
spread > 0 and the active-unit counts of a forward pass done by hand in NumPy."""

import numpy as np
import pytest

from pbo_tf.evaluation.operator_activity import constant_map_message, operator_activity, spread
from pbo_tf.operators import DeepPBO, LinearPBO

D, HIDDEN = 3, [4, 5]


def _deep_pbo(rng, scale=1.0):
    """A DeepPBO with weights of about unit size (``scale`` on the output kernel), and its weights."""
    pbo = DeepPBO(D, hidden_units=HIDDEN)
    pbo.ensure_built()
    weights = []
    for layer in [*pbo.hidden_layers, pbo.output_layer]:
        kernel = rng.normal(size=layer.kernel.shape).astype(np.float32)
        bias = (0.3 * rng.normal(size=layer.bias.shape)).astype(np.float32)
        layer.kernel.assign(kernel)
        layer.bias.assign(bias)
        weights.append([kernel, bias])
    pbo.output_layer.kernel.assign(scale * weights[-1][0])
    weights[-1][0] = scale * weights[-1][0]
    return pbo, weights


def _inputs(rng):
    return rng.normal(size=(6, D)).astype(np.float32), rng.normal(size=(10, D)).astype(np.float32)


def test_spread_is_the_largest_std_over_rows():
    assert spread([[0.0, 0.0], [2.0, 1.0]]) == pytest.approx(1.0)  # stds 1 and 0.5
    assert spread([[1.0, 2.0]]) == 0.0
    assert spread(np.full((5, 3), 7.25, np.float32)) == 0.0


def test_a_dead_layer_makes_a_constant_map_with_spread_exactly_zero():
    rng = np.random.default_rng(0)
    pbo, _ = _deep_pbo(rng)
    dead = pbo.hidden_layers[1]  # no unit of the second hidden layer can fire: zero kernel, bias −1
    dead.kernel.assign(np.zeros(dead.kernel.shape, np.float32))
    dead.bias.assign(-np.ones(dead.bias.shape, np.float32))
    W, fresh = _inputs(rng)
    activity = operator_activity(pbo, W, fresh)
    assert activity["kind"] == "DeepPBO" and activity["width"] == HIDDEN
    for name, x in (("W", W), ("fresh", fresh)):
        one = activity[name]
        assert one["n"] == len(x)
        assert one["active_units"][1] == 0
        assert one["spread"] == 0.0 and one["relative_spread"] == 0.0  # exactly: every row is the output bias
        assert one["input_spread"] == pytest.approx(np.max(np.std(x.astype(np.float64), axis=0)))
        assert one["constant"] is True
    assert activity["constant"] is True
    units = activity["W"]["active_units"]
    assert constant_map_message(activity) == (
        f"the trained operator is a constant map (active units per hidden layer on W {units} of {HIDDEN}, "
        "spread of Λ over fresh ω 0): every k >= 1 gives the same Q"
    )


def test_a_live_operator_varies_and_its_unit_counts_match_numpy():
    rng = np.random.default_rng(1)
    pbo, weights = _deep_pbo(rng)
    W, fresh = _inputs(rng)
    activity = operator_activity(pbo, W, fresh)
    for name, x in (("W", W), ("fresh", fresh)):
        h, counts = x.astype(np.float64), []
        for kernel, bias in weights[:-1]:
            h = np.maximum(h @ kernel + bias, 0.0)
            counts.append(int(np.sum(np.any(h > 0, axis=0))))
        out = h @ weights[-1][0] + weights[-1][1]
        one = activity[name]
        assert one["active_units"] == counts
        assert min(counts) > 0
        assert one["spread"] > 0
        assert one["spread"] == pytest.approx(np.max(np.std(out, axis=0)), rel=1e-4)
        assert one["relative_spread"] == pytest.approx(one["spread"] / one["input_spread"])
        assert one["constant"] is False
    assert activity["constant"] is False and constant_map_message(activity) is None


def test_a_tiny_spread_counts_as_constant_although_units_fire():
    rng = np.random.default_rng(2)
    pbo, _ = _deep_pbo(rng, scale=1e-9)  # every unit fires as before, Λ's output barely moves
    pbo.output_layer.bias.assign(np.zeros(D, np.float32))  # (so that float32 resolves the 1e-9 changes)
    W, fresh = _inputs(rng)
    activity = operator_activity(pbo, W, fresh)
    assert min(activity["fresh"]["active_units"]) > 0
    assert activity["fresh"]["relative_spread"] <= 1e-6
    assert activity["constant"] is True
    assert operator_activity(pbo, W, fresh, tolerance=1e-12)["constant"] is False


def test_a_single_vector_says_nothing_and_other_operators_give_their_kind():
    rng = np.random.default_rng(3)
    pbo, _ = _deep_pbo(rng)
    W, fresh = _inputs(rng)
    activity = operator_activity(pbo, W[:1], fresh)
    assert activity["W"]["constant"] is None and activity["W"]["relative_spread"] is None
    assert activity["constant"] is False  # decided by the fresh vectors
    assert operator_activity(LinearPBO(D), W, fresh) == {"kind": "LinearPBO"}
    with pytest.raises(ValueError, match=r"\[n, 3\]"):
        operator_activity(pbo, np.zeros((2, 4)), fresh)


def test_the_scalable_operators_are_measured_by_their_spread():
    """An operator without hidden units to count (`spread_activity`): a constant map is found by its spread
    alone, and a residual one that adds the same vector to every ω is a translation."""
    import numpy as np
    import tensorflow as tf

    from pbo_tf.evaluation.operator_activity import operator_activity
    from pbo_tf.operators.base import PBO

    class Shift(PBO):
        spread_activity = True

        def __init__(self, d, residual, scale):
            super().__init__(d)
            self.residual, self.scale = residual, scale

        def apply(self, params):
            f = self.scale * params + 1.0
            return params + f if self.residual else f

    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    fresh = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    constant = operator_activity(Shift(3, False, 0.0), x, fresh)
    assert constant["constant"] is True and constant["W"]["spread"] == 0 and "width" not in constant
    assert constant_map_message(constant) == (
        "the trained operator is a constant map (spread of Λ over fresh ω 0): every k >= 1 gives the same Q"
    )
    function = operator_activity(Shift(3, False, 0.5), x, fresh)
    assert function["constant"] is False
    np.testing.assert_allclose(function["W"]["relative_spread"], 0.5, rtol=1e-6)  # Λ = x/2 + 1
    translation = operator_activity(Shift(3, True, 0.0), x, fresh)
    assert translation["constant"] is False and translation["translation"] is True  # Λ = ω + 1
    message = constant_map_message(translation)
    prefix = "the trained residual operator is a translation ω + c (relative spread of Λ(ω) − ω over W "
    assert message.startswith(prefix) and message.endswith("): its iterates drift along c")
    assert float(message[len(prefix) :].split(")")[0]) <= 1e-6  # (float32: 0 up to rounding)
    assert operator_activity(Shift(3, True, 0.5), x, fresh)["translation"] is False
    assert tf.is_tensor(Shift(3, False, 0.0)(tf.constant(x)))
