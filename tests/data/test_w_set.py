"""The W sampler: the paper's W unchanged by default, a last layer drawn N(0, std²) on request (the hidden
layers still the paper's draws), ω₀ as chosen, and one-line errors for bad values."""

import gin
import numpy as np
import pytest

from pbo_tf.data.w_set import draw_w_set, iterate_choice, last_layer_size, mix_in_iterates
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


def test_iterate_choice_spreads_the_members_evenly_over_the_iterates():
    assert iterate_choice(9, 9).tolist() == list(range(9))
    assert iterate_choice(9, 4).tolist() == [0, 2, 4, 6]  # floor(i * 9 / 4)
    assert iterate_choice(3, 7).tolist() == [0, 0, 0, 1, 1, 2, 2]  # floor(i * 3 / 7)
    assert iterate_choice(1, 3).tolist() == [0, 0, 0]


def test_mixed_in_members_are_the_iterates_plus_noise_relative_to_their_size():
    q = _q()
    w, _ = draw_w_set(q, 301, seed=4)
    rng = np.random.default_rng(0)
    iterates = rng.normal(size=(3, q.d)).astype(np.float32)
    iterates[2] *= 10.0  # a ten times larger iterate gets ten times the noise
    before = w.copy()
    mixed = mix_in_iterates(w, iterates, members=300, noise=0.2, seed=4)
    np.testing.assert_array_equal(w, before)  # the input is not modified
    np.testing.assert_array_equal(mixed[0], w[0])  # W[0] stays as drawn
    # members 1 .. 300 copy iterates 0, 1, 2 in blocks of 100 (iterate_choice(3, 300))
    for j in range(3):
        copies = mixed[1 + 100 * j : 1 + 100 * (j + 1)].astype(np.float64)
        rms = np.sqrt(np.mean(iterates[j].astype(np.float64) ** 2))
        z = (copies - iterates[j]) / rms  # 15 100 draws of N(0, 0.2²)
        assert abs(z.mean()) < 4 * 0.2 / np.sqrt(z.size)
        assert z.std() == pytest.approx(0.2, rel=0.03)
    np.testing.assert_array_equal(mix_in_iterates(w, iterates, 300, 0.2, seed=4), mixed)  # reproducible
    assert not np.array_equal(mix_in_iterates(w, iterates, 300, 0.2, seed=5), mixed)
    # no noise: exact copies; no members: W as drawn
    exact = mix_in_iterates(w[:5], iterates, members=3, noise=0.0, seed=4)
    np.testing.assert_array_equal(exact[:2], w[:2])
    np.testing.assert_array_equal(exact[2:], iterates[[0, 1, 2]])
    np.testing.assert_array_equal(mix_in_iterates(w[:5], iterates, 0, 0.2, seed=4), w[:5])


def test_bad_mix_ins_are_one_line_errors():
    q = _q()
    w, _ = draw_w_set(q, 4, seed=0)
    iterates = np.zeros((2, q.d), np.float32)
    with pytest.raises(ValueError, match=r"must number 0 \.\. \|W\| - 1 = 3 \(W\[0\] stays\), got 4"):
        mix_in_iterates(w, iterates, members=4, noise=0.1, seed=0)
    with pytest.raises(ValueError, match="relative noise must be a finite number >= 0, got -0.1"):
        mix_in_iterates(w, iterates, members=2, noise=-0.1, seed=0)
    with pytest.raises(ValueError, match=r"must be \[m >= 1, 151\], got \[2, 150\]"):
        mix_in_iterates(w, iterates[:, :150], members=2, noise=0.1, seed=0)
    bad = iterates.copy()
    bad[1, 3] = np.nan
    with pytest.raises(ValueError, match="not all finite"):
        mix_in_iterates(w, bad, members=2, noise=0.1, seed=0)
    with pytest.raises(ValueError, match="WSampler.fqi_members must be an integer >= 0, got -1"):
        WSampler(fqi_members=-1)
    with pytest.raises(ValueError, match="WSampler.fqi_members must be an integer >= 0, got 1.5"):
        WSampler(fqi_members=1.5)
    with pytest.raises(ValueError, match="WSampler.fqi_noise must be a finite number >= 0"):
        WSampler(fqi_noise=float("inf"))


def test_gin_binds_the_fqi_members_and_metrics_record_them_only_when_set():
    assert "w_fqi_members" not in WSampler().config()
    gin.parse_config(["WSampler.fqi_members = 2", "WSampler.fqi_noise = 0.0"])
    sampler = WSampler()
    assert sampler.config() == {
        "w_last_layer_std": 0.0,
        "omega0": "paper",
        "w_fqi_members": 2,
        "w_fqi_noise": 0.0,
    }
    w, _ = sampler(_q(), 4, 0)
    iterates = np.ones((3, 151), np.float32)
    np.testing.assert_array_equal(sampler.mix_in(w, iterates, 0), np.concatenate([w[:2], iterates[[0, 1]]]))
