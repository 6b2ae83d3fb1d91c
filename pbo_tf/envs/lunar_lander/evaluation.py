"""Lunar lander evaluation: `pbo_tf.envs.gym.evaluation.evaluate_greedy` on ``LunarLander-v3``."""

from __future__ import annotations

from pbo_tf.envs.gym.evaluation import episode_seed, evaluate_greedy

__all__ = ["episode_seed", "evaluate_lunar_lander"]


def evaluate_lunar_lander(
    q_family,
    params,
    n_episodes: int = 100,
    max_steps: int = 1000,
    gamma: float = 0.99,
    seed: int = 0,
    max_envs: int | None = None,
    env_id: str = "LunarLander-v3",
) -> list[dict]:
    """`evaluate_greedy` with lunar lander's defaults (100 episodes of at most 1000 steps, γ = 0.99)."""
    return evaluate_greedy(
        q_family,
        params,
        env_id,
        n_episodes=n_episodes,
        max_steps=max_steps,
        gamma=gamma,
        seed=seed,
        max_envs=max_envs,
    )
