"""The loss terms' machinery (`pbo_tf.loss_terms`): how terms add up and name their metrics, what the context
computes once, the one-line errors, and the gin bindings a config does not list."""

import re

import gin
import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.loss_terms import (
    BellmanTerm,
    FixedPointTerm,
    LossContext,
    LossTerm,
    check_terms,
    combine_terms,
    progress_text,
    summary_scalars,
    target_chain,
)
from pbo_tf.loss_terms.configurable import ConfiguredBellmanTerm, ConfiguredFixedPointTerm, check_bound_terms
from pbo_tf.operators import LinearPBO
from pbo_tf.q import TableQ
from tests.test_losses import BATCH


class _Constant(LossTerm):
    """A term of value ``value``, metrics ``seen`` (the loss before it) and ``twice`` (2 × value)."""

    def __init__(self, name, value, weight=1.0):
        super().__init__(weight)
        self.name, self.value = name, value

    def __call__(self, context):
        value = tf.constant(self.value)
        return value, {"seen": context.loss_so_far, "twice": 2.0 * value}


def _context(pbo=None, **kwargs):
    pbo = pbo or _linear()
    omega = tf.zeros([1, 2])
    return LossContext(
        pbo=pbo, q_family=TableQ(2, 1), params=omega, batch=BATCH, gamma=0.5,
        target_params=target_chain(pbo, omega, 2), **kwargs,
    )  # fmt: skip


def _linear():
    pbo = LinearPBO(2)
    pbo.ensure_built()
    pbo.dense.kernel.assign(0.5 * np.eye(2, dtype=np.float32))
    pbo.dense.bias.assign([1.0, 0.0])
    return pbo


def test_terms_add_up_with_their_weights_and_name_their_metrics():
    """L = 1 · 2 + 0.5 · 3 + 0 · 7 = 3.5; each term sees the weighted sum before it (0, 2, 3.5) and its
    metrics come under its name, its own loss before its weight under the bare name."""
    terms = [_Constant("a", 2.0), _Constant("b", 3.0, weight=0.5), _Constant("c", 7.0, weight=0.0)]
    loss, metrics = combine_terms(terms, _context())
    assert float(loss) == 3.5
    got = {key: float(value) for key, value in metrics.items()}
    assert got == {
        "a": 2.0, "a/seen": 0.0, "a/twice": 4.0,
        "b": 3.0, "b/seen": 2.0, "b/twice": 6.0,
        "c": 7.0, "c/seen": 3.5, "c/twice": 14.0,
    }  # fmt: skip
    assert summary_scalars({"a": 2.0, "a/seen": 0.0}) == {"loss_terms/a": 2.0, "loss_terms/a/seen": 0.0}


def test_the_progress_text_shows_each_term_and_the_metrics_it_chooses():
    bellman, fixed = BellmanTerm(), FixedPointTerm()
    metrics = {"bellman": 0.0123, "bellman/k1": 0.5, "fixed_point": 1.5, "fixed_point/scale": 0.25}
    assert (
        progress_text([bellman, fixed], metrics) == "bellman 0.0123, fixed_point 1.5, fixed_point/scale 0.25"
    )
    assert progress_text([bellman], {}) == ""


def test_the_context_computes_the_prediction_chain_once_per_choice():
    calls = []
    pbo = _linear()
    real = pbo.chain
    pbo.chain = lambda params, K, stop=False: calls.append(stop) or real(params, K, stop)
    context = _context(pbo)
    for _ in range(3):
        combine_terms([BellmanTerm()], context)
    context.prediction_chain(True)
    assert calls == [False, True]
    # r + γ (1 − done) Q(s') on BATCH at Λ̄^0(0) = 0 and Λ̄(0) = (1, 0): s' = 1 has Q 0, the second is done
    np.testing.assert_allclose(context.targets.numpy()[:, 0], [[1.0, 0.0], [1.0, 0.0]])
    given = tf.ones([2, 1, 2])
    assert _context(predicted=given).prediction_chain() is given  # a caller's chain is used as given


def test_terms_and_contexts_refuse_bad_input_in_one_line():
    owner = "ProFQIConfig.loss_terms"
    for make, message in (
        (lambda: check_terms([BellmanTerm(), "fixed_point"], owner),
         f"{owner} takes pbo_tf.loss_terms.LossTerm objects, got 'fixed_point'"),
        (lambda: check_terms([], owner), f"{owner} needs at least one loss term"),
        (lambda: _Constant("a", 1.0, weight=float("nan")), "_Constant.weight must be a finite number >= 0"),
        (lambda: FixedPointTerm(warmup=2), "FixedPointTerm.warmup must be a fraction of the run in [0, 1]"),
        (lambda: _context(predicted=tf.ones([3, 1, 2])), "predicted must be the chain [K=2, n_w, d=2], got"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(message)) as error:
            make()
        assert "\n" not in str(error.value)
    assert check_terms(BellmanTerm(), "x")[0].name == "bellman"  # one term alone is a list of one


def test_a_binding_of_a_term_the_config_does_not_list_is_refused():
    """``FixedPointTerm.iterations = 30`` with the paper's terms would be ignored: refused in one line naming
    the binding and the list; a gin-built list that holds the term passes, and so does an unbound one."""
    try:
        check_bound_terms((BellmanTerm(),), "ProFQIConfig.loss_terms")  # nothing bound
        gin.parse_config("FixedPointTerm.iterations = 30\nBellmanTerm.normalisation = 'reference'")
        with pytest.raises(ValueError) as error:
            check_bound_terms((BellmanTerm(),), "ProFQIConfig.loss_terms")
        assert str(error.value) == (
            "BellmanTerm.normalisation = 'reference' is bound but ProFQIConfig.loss_terms = [@BellmanTerm()] "
            "holds no BellmanTerm built with it: list @BellmanTerm() there (e.g. ProFQIConfig.loss_terms = "
            "[@BellmanTerm(), @FixedPointTerm()])"
        )
        built = (ConfiguredBellmanTerm(), ConfiguredFixedPointTerm())
        check_bound_terms(built, "ProFQIConfig.loss_terms")
        assert built[0].normalisation == "reference" and built[1].iterations == 30  # the bindings took
        with pytest.raises(ValueError, match="^FixedPointTerm.iterations = 30 is bound but"):
            check_bound_terms(built[:1], "ProDQNConfig.loss_terms")
    finally:
        gin.clear_config()
