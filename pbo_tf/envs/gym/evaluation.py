"""Greedy returns of many Q policies in any gymnasium environment, every (policy, episode) in lockstep.

`evaluate_greedy` runs ``n_episodes`` episodes of each greedy policy ``Q_{params[i]}`` (first action on
ties) with one batched Q evaluation per time step for every (policy, episode) pair. Episode j of every
policy starts from the same seeded reset (`episode_seed`), so the policies compare like with like.

Metrics, per policy (means over its episodes): ``discounted_return`` (γ = 0.99, the paper's J), the
undiscounted ``return`` and ``episode_length``.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def paired_greedy_fn(q_family, state_dim: int):
    """A compiled ``(params [n, d], states [n, B, s]) -> actions [n, B]`` (one trace for every shape)."""
    return tf.function(
        q_family.greedy_actions_paired,
        autograph=False,
        input_signature=(
            tf.TensorSpec([None, q_family.d], tf.float32),
            tf.TensorSpec([None, None, state_dim], tf.float32),
        ),
    )


def episode_seed(eval_seed: int, episode: int) -> int:
    """The reset seed of evaluation episode ``episode`` (the same for every policy)."""
    return int(eval_seed) * 1_000_003 + int(episode)


def evaluate_greedy(
    q_family,
    params,
    env_id: str,
    n_episodes: int = 100,
    max_steps: int = 1000,
    gamma: float = 0.99,
    seed: int = 0,
    max_envs: int | None = None,
) -> list[dict]:
    """Greedy returns of ``Q_{params[i]}`` in the gymnasium environment ``env_id``, every (policy, episode)
    stepped in lockstep.

    Args:
      q_family: the Q family (``greedy_actions_paired`` on ``[n, B, state_dim]`` raw observations; a
        family that scales its inputs does so itself).
      params: ``[n, d]`` parameter vectors (one greedy policy each).
      env_id: the gymnasium id (any registered one: ``LunarLander-v3``, ``CartPole-v1``, ...).
      n_episodes: episodes per policy; episode j of every policy starts from ``reset(seed=episode_seed(seed,
        j))``.
      max_steps: episode cut (the evaluation horizon).
      gamma: discount of ``discounted_return``.
      seed: evaluation seed.
      max_envs: at most this many environments are stepped together (whole policies at a time; at least
        one policy); default all ``n × n_episodes``.

    Returns:
      Per policy: ``{"discounted_return", "return", "episode_length"}``, means over its episodes.
    """
    from pbo_tf.envs import make

    params = np.asarray(params, np.float32)
    n = len(params)
    state_dim = int(q_family.state_dim)
    greedy = paired_greedy_fn(q_family, state_dim)
    per_chunk = n if max_envs is None else max(1, min(n, int(max_envs) // int(n_episodes)))
    envs = [make(env_id, max_episode_steps=int(max_steps)) for _ in range(per_chunk * n_episodes)]
    discounted = np.zeros((n, n_episodes))
    undiscounted = np.zeros((n, n_episodes))
    lengths = np.zeros((n, n_episodes), np.int64)
    try:
        for start in range(0, n, per_chunk):
            chunk = params[start : start + per_chunk]
            m = len(chunk)
            active = envs[: m * n_episodes]  # index i = policy (i // n_episodes), episode (i % n_episodes)
            obs = np.stack(
                [env.reset(seed=episode_seed(seed, i % n_episodes))[0] for i, env in enumerate(active)]
            ).astype(np.float32)
            alive = np.ones(len(active), bool)
            disc_ret = np.zeros(len(active))
            ret = np.zeros(len(active))
            length = np.zeros(len(active), np.int64)
            weight = 1.0
            chunk_tensor = tf.constant(chunk)
            for _ in range(int(max_steps)):
                if not alive.any():
                    break
                actions = greedy(chunk_tensor, obs.reshape(m, n_episodes, state_dim)).numpy().reshape(-1)
                for i in np.flatnonzero(alive):
                    o, r, terminated, truncated, _ = active[i].step(int(actions[i]))
                    obs[i] = o
                    ret[i] += r
                    disc_ret[i] += weight * r
                    length[i] += 1
                    if terminated or truncated:
                        alive[i] = False
                weight *= gamma
            discounted[start : start + m] = disc_ret.reshape(m, n_episodes)
            undiscounted[start : start + m] = ret.reshape(m, n_episodes)
            lengths[start : start + m] = length.reshape(m, n_episodes)
    finally:
        for env in envs:
            env.close()
    return [
        {
            "discounted_return": float(discounted[i].mean()),
            "return": float(undiscounted[i].mean()),
            "episode_length": float(lengths[i].mean()),
        }
        for i in range(n)
    ]
