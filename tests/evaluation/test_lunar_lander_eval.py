"""Lunar lander evaluation: every (policy, episode) pair in lockstep, episodes seeded per index."""

import numpy as np
import pytest

pytest.importorskip("Box2D")

from pbo_tf.evaluation.lunar_lander import episode_seed, evaluate_lunar_lander  # noqa: E402
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
