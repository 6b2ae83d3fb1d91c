"""The W sampler: the paper's W unchanged by default, a last layer drawn N(0, std²) on request (the hidden
layers still the paper's draws), ω₀ as chosen, and one-line errors for bad values."""

import gin
import numpy as np
import pytest

from pbo_tf.data.w_set import draw_w_set, last_layer_size
from pbo_tf.operators.factory import WSampler
from pbo_tf.q import FlatMLPQ, TableQ


def _q():
    return FlatMLPQ(2, [30], [-1.0, 1.0])  # d = 151, last layer 30 + 1 entries


def test_default_is_the_papers_w_and_omega0():
    q = _q()
    w, omega0 = draw_w_set(q, 5, seed=3)
    np.testing.assert_array_equal(w, q.initial_params(5, 3))
    np.testing.assert_array_equal(omega0, q.initial_params(1, 3)[0])
    assert np.all(w[:, -31:] == 0)  # every member is Q ≡ 0


def test_last_layer_is_drawn_with_the_chosen_std_and_the_rest_is_the_papers():
    q = _q()
    assert last_layer_size(q) == 31
    w, omega0 = draw_w_set(q, 400, seed=1, last_layer_std=0.25)
    paper = q.initial_params(400, 1)
    np.testing.assert_array_equal(w[:, :-31], paper[:, :-31])
    last = w[:, -31:].astype(np.float64)
    # 12 400 normal draws: mean within 4 standard errors of 0, std within 3% of 0.25
    assert abs(last.mean()) < 4 * 0.25 / np.sqrt(last.size)
    assert last.std() == pytest.approx(0.25, rel=0.03)
    assert abs(np.corrcoef(last[:, 0], last[:, 1])[0, 1]) < 0.2  # independent coordinates
    # ω₀ "paper": the seed's zero-last-layer network; "w0": W[0] as drawn
    np.testing.assert_array_equal(omega0, paper[0])
    w2, omega0_w = draw_w_set(q, 400, seed=1, last_layer_std=0.25, omega0="w0")
    np.testing.assert_array_equal(w2, w)  # reproducible
    np.testing.assert_array_equal(omega0_w, w[0])
    assert not np.array_equal(draw_w_set(q, 4, seed=2, last_layer_std=0.25)[0][:, -31:], w[:4, -31:])


def test_members_are_different_q_functions():
    q = _q()
    w, _ = draw_w_set(q, 4, seed=0, last_layer_std=0.25)
    values = q.q_all(w, np.array([[0.1, 0.2], [-0.5, 1.0]], np.float32)).numpy()
    assert np.min(np.std(values, axis=0)) > 1e-3  # the paper's W gives exactly 0 here


def test_bad_values_are_one_line_errors():
    with pytest.raises(ValueError, match="last_layer_std must be a finite number >= 0"):
        draw_w_set(_q(), 3, 0, last_layer_std=-1.0)
    with pytest.raises(ValueError, match="unknown omega0 'first'"):
        draw_w_set(_q(), 3, 0, omega0="first")
    with pytest.raises(ValueError, match="needs an MLP Q family"):
        draw_w_set(TableQ(3, 2), 3, 0, last_layer_std=0.1)
    with pytest.raises(ValueError, match="WSampler.last_layer_std"):
        WSampler(last_layer_std=float("nan"))


def test_gin_binds_the_sampler():
    gin.parse_config(["WSampler.last_layer_std = 0.5", "WSampler.omega0 = 'w0'"])
    sampler = WSampler()
    assert sampler.config() == {"w_last_layer_std": 0.5, "omega0": "w0"}
    w, omega0 = sampler(_q(), 3, 0)
    np.testing.assert_array_equal(omega0, w[0])
