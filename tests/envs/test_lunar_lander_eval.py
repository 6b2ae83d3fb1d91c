"""Lunar lander evaluation: every (policy, episode) pair in lockstep, episodes seeded per index."""

import numpy as np
import pytest

pytest.importorskip("Box2D")

from pbo_tf.envs.lunar_lander.evaluation import episode_seed, evaluate_lunar_lander  # noqa: E402
from pbo_tf.q import FlatMLPQ  # noqa: E402
from tests.experiments import ground_truth  # noqa: E402


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


def _plain_gymnasium_loop(q, params, n_episodes, max_steps, gamma, seed):
    """One greedy policy (first action on ties, its Q in NumPy), one episode at a time, stepped by hand in
    `gymnasium.make`'s LunarLander-v3: the metrics per policy and every episode's length."""
    out, lengths = [], []
    for p in params:

        def greedy(obs, p=p):  # first action on ties
            return int(np.argmax(ground_truth.numpy_mlp_q(q, p, obs)))

        metrics, episode_lengths = ground_truth.policy_episodes(
            "LunarLander-v3", greedy, n_episodes, max_steps, gamma, seed
        )
        out.append(metrics)
        lengths += episode_lengths
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


def test_the_per_action_q_network_is_evaluated_as_a_plain_gymnasium_loop():
    """``LunarLanderEnv.per_action_outputs``: the state alone in, one output per action (d = 1324 at the
    paper's [30, 30], against its 1261 with the action index fed in); its greedy policies are evaluated as a
    plain one-episode-at-a-time loop does."""
    from pbo_tf.envs.lunar_lander.online import LunarLanderEnv
    from pbo_tf.q import PerActionMLPQ

    paper = LunarLanderEnv().q_family()
    assert isinstance(paper, FlatMLPQ) and not isinstance(paper, PerActionMLPQ) and paper.d == 1261
    paper_widths = LunarLanderEnv(per_action_outputs=True).q_family()
    assert isinstance(paper_widths, PerActionMLPQ) and paper_widths.n_actions == 4
    assert paper_widths.d == (8 * 30 + 30) + (30 * 30 + 30) + (30 * 4 + 4)
    q = LunarLanderEnv(hidden=[5], per_action_outputs=True).q_family()
    params = np.random.default_rng(3).normal(0.0, 0.7, (2, q.d)).astype(np.float32)
    got = evaluate_lunar_lander(q, params, n_episodes=2, max_steps=40, gamma=0.95, seed=1)
    want, _ = _plain_gymnasium_loop(q, params, 2, 40, 0.95, 1)
    for g, w in zip(got, want, strict=True):
        for key in w:
            assert g[key] == pytest.approx(w[key], rel=1e-9, abs=1e-9), key
    assert got[0] != got[1]  # two policies that act differently
