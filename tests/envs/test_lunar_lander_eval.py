"""Lunar lander evaluation: every (policy, episode) pair in lockstep, episodes seeded per index."""

import numpy as np
import pytest

pytest.importorskip("Box2D")

from pbo_tf.envs.lunar_lander.evaluation import episode_seed, evaluate_lunar_lander  # noqa: E402
from pbo_tf.q import FlatMLPQ  # noqa: E402


def _q():
    return FlatMLPQ(8, [4], np.arange(4, dtype=np.float32))


def test_policies_share_their_episode_starts_and_chunks_change_nothing():
    q = _q()
    a, b = q.initial_params(2, 0)
    params = np.stack([a, b, a])  # policies 0 and 2 are the same greedy policy
    together = evaluate_lunar_lander(q, params, n_episodes=2, max_steps=15, gamma=0.9)
    assert together[0] == together[2]  # same policy, same seeded episodes: same numbers
    assert set(together[0]) == {"discounted_return", "return", "episode_length"}
    assert all(1 <= m["episode_length"] <= 15 for m in together)
    one_policy_at_a_time = evaluate_lunar_lander(q, params, n_episodes=2, max_steps=15, gamma=0.9, max_envs=2)
    assert one_policy_at_a_time == together


def test_gamma_one_gives_the_undiscounted_return_and_seeds_are_distinct():
    q = _q()
    params = q.initial_params(1, 3)
    (m,) = evaluate_lunar_lander(q, params, n_episodes=2, max_steps=10, gamma=1.0, seed=1)
    assert m["discounted_return"] == pytest.approx(m["return"])
    assert len({episode_seed(s, j) for s in range(3) for j in range(5)}) == 15


def _numpy_q(q, params, state):
    """``Q(s, ·)`` ``[|A|]`` of one flat parameter vector, from the documented layout (Keras's
    ``get_weights()`` order: each layer's kernel ``[in, out]`` row-major, then its bias), in NumPy."""
    values, offset = [], 0
    for a in q.action_values:
        h = np.concatenate([state, a]).astype(np.float64)
        offset = 0
        for layer, (n_in, n_out) in enumerate(q.layer_shapes):
            kernel = params[offset : offset + n_in * n_out].reshape(n_in, n_out)
            offset += n_in * n_out
            h = h @ kernel + params[offset : offset + n_out]
            offset += n_out
            if layer < len(q.layer_shapes) - 1:
                h = np.maximum(h, 0.0)
        values.append(h[0])
    assert offset == q.d
    return np.array(values)


def _plain_gymnasium_loop(q, params, n_episodes, max_steps, gamma, seed):
    """One policy, one episode at a time: the textbook loop over `gymnasium.make`'s lunar lander. Returns
    the metrics per policy and every episode's length."""
    import gymnasium

    out, lengths = [], []
    for p in params:
        per_episode = []
        for j in range(n_episodes):
            env = gymnasium.make("LunarLander-v3", max_episode_steps=max_steps)
            obs, _ = env.reset(seed=episode_seed(seed, j))
            discounted, total, length = 0.0, 0.0, 0
            while True:
                action = int(np.argmax(_numpy_q(q, p, obs)))  # first action on ties
                obs, reward, terminated, truncated, _ = env.step(action)
                discounted += gamma**length * reward
                total += reward
                length += 1
                if terminated or truncated:
                    break
            env.close()
            per_episode.append((discounted, total, length))
            lengths.append(length)
        d, r, n = np.mean(per_episode, axis=0)
        out.append({"discounted_return": d, "return": r, "episode_length": n})
    return out, lengths


def test_lockstep_evaluation_equals_a_plain_gymnasium_loop():
    q = _q()
    rng = np.random.default_rng(1)
    params = rng.normal(0.0, 0.7, (3, q.d)).astype(np.float32)  # three greedy policies that act differently
    n_episodes, max_steps, gamma, seed = 3, 71, 0.95, 2  # some episodes land or crash, some are cut
    got = evaluate_lunar_lander(q, params, n_episodes, max_steps, gamma, seed=seed, max_envs=6)
    want, lengths = _plain_gymnasium_loop(q, params, n_episodes, max_steps, gamma, seed)
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        for key in w:
            assert g[key] == pytest.approx(w[key], rel=1e-9, abs=1e-9), key
    assert min(lengths) < max_steps == max(lengths)  # both ends of an episode are exercised
    assert len({round(w["return"], 6) for w in want}) == 3
