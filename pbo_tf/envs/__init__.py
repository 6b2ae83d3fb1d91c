"""Gymnasium environments of the paper, their exact solutions, and their registration.

``register_all()`` (called by ``import pbo_tf``) registers:

* ``pbo_tf/ChainWalk-v0`` -> `pbo_tf.envs.chain_walk.ChainWalkEnv`;
* ``pbo_tf/LQR-v0`` -> `pbo_tf.envs.lqr.LQREnv`;

both with ``max_episode_steps=100`` (neither environment terminates by itself). Registration uses string
entry points, so registering does not import the environment modules.
"""

from __future__ import annotations

from typing import Any

import gymnasium

ENV_IDS = {"chain_walk": "pbo_tf/ChainWalk-v0", "lqr": "pbo_tf/LQR-v0"}

NAMESPACE = "pbo_tf"

_REGISTRATIONS: dict[str, dict[str, Any]] = {
    ENV_IDS["chain_walk"]: {"entry_point": "pbo_tf.envs.chain_walk:ChainWalkEnv", "max_episode_steps": 100},
    ENV_IDS["lqr"]: {"entry_point": "pbo_tf.envs.lqr:LQREnv", "max_episode_steps": 100},
}


def register_all() -> None:
    """Registers every ``pbo_tf`` environment id with gymnasium; ids already registered are skipped."""
    for env_id, kwargs in _REGISTRATIONS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, **kwargs)


def known_ids() -> list[str]:
    """The sorted ``pbo_tf/...`` ids currently in the gymnasium registry."""
    return sorted(env_id for env_id in gymnasium.registry if env_id.startswith(NAMESPACE + "/"))


def make(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """`gymnasium.make` with a clear error for unknown ids.

    Any id in the gymnasium registry works (e.g. ``LunarLander-v3``); the ``pbo_tf`` ids are registered
    first if needed.

    Args:
      env_id: a registered gymnasium id, e.g. ``ENV_IDS["chain_walk"]``.
      **kwargs: forwarded to `gymnasium.make` (e.g. ``max_episode_steps``, or environment constructor kwargs).

    Returns:
      The wrapped environment, as `gymnasium.make` returns it.

    Raises:
      ValueError: ``env_id`` is not in the gymnasium registry; the message lists the ``pbo_tf`` ids.
    """
    register_all()
    if env_id not in gymnasium.registry:
        raise ValueError(f"unknown environment id {env_id!r}; known ids: {known_ids()}")
    return gymnasium.make(env_id, **kwargs)


__all__ = ["ENV_IDS", "known_ids", "make", "register_all"]
