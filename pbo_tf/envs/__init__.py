"""Gymnasium environments of the paper, their exact solutions, and their registration.

``register_all()`` (called by ``import pbo_tf``) registers:

* ``pbo_tf/ChainWalk-v0`` -> `pbo_tf.envs.chain_walk.ChainWalkEnv`;
* ``pbo_tf/LQR-v0`` -> `pbo_tf.envs.lqr.LQREnv`;
* ``pbo_tf/CarOnHill-v0`` -> `pbo_tf.envs.car_on_hill.CarOnHillEnv` (100 steps, the paper's horizon);
* ``pbo_tf/Bicycle-v0`` -> `pbo_tf.envs.bicycle.BicycleEnv` (50 000 steps = 500 s, the evaluation horizon).

Chain-walk and LQR never terminate by themselves and are cut at 100 steps. Registration uses string entry
points, so registering does not import the environment modules. `to_tf_agents` (gymnasium -> TF-Agents
``PyEnvironment``) is exported lazily, so ``import pbo_tf`` does not load TensorFlow.
"""

from __future__ import annotations

from typing import Any

import gymnasium

ENV_IDS = {
    "chain_walk": "pbo_tf/ChainWalk-v0",
    "lqr": "pbo_tf/LQR-v0",
    "car_on_hill": "pbo_tf/CarOnHill-v0",
    "bicycle": "pbo_tf/Bicycle-v0",
}

NAMESPACE = "pbo_tf"

_REGISTRATIONS: dict[str, dict[str, Any]] = {
    ENV_IDS["chain_walk"]: {"entry_point": "pbo_tf.envs.chain_walk:ChainWalkEnv", "max_episode_steps": 100},
    ENV_IDS["lqr"]: {"entry_point": "pbo_tf.envs.lqr:LQREnv", "max_episode_steps": 100},
    ENV_IDS["car_on_hill"]: {"entry_point": "pbo_tf.envs.car_on_hill:CarOnHillEnv", "max_episode_steps": 100},
    ENV_IDS["bicycle"]: {"entry_point": "pbo_tf.envs.bicycle:BicycleEnv", "max_episode_steps": 50_000},
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


def __getattr__(name: str):
    if name == "to_tf_agents":  # lazy: the adapter imports TF-Agents (and TensorFlow)
        from pbo_tf.envs.tf_agents_adapter import to_tf_agents

        return to_tf_agents
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ENV_IDS", "known_ids", "make", "register_all", "to_tf_agents"]
