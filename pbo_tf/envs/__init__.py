"""The environments of the paper, one package each, and the registry that names them.

Each environment lives in one package, ``pbo_tf.envs.<env>``: its dynamics and gymnasium environment, its
dataset, its exact solution, its evaluation protocol, and the views the experiments take of it, an offline
`pbo_tf.envs.base.Problem` (``<env>.problem``) and an online `pbo_tf.envs.base.OnlineEnv` (``<env>.online``):

* `chain_walk`, `lqr`, `car_on_hill`: offline;
* `bicycle`: offline and online;
* `lunar_lander`: online (gymnasium's ``LunarLander-v3``).

`pbo_tf.envs.registry` names each one's problem, online spec and gymnasium id as lazy ``"module:attr"``
strings, and those of other packages, which declare them through the entry-point group ``pbo_tf.envs``;
the offline runner, the online runner and the gymnasium registration read it. ``register_all()``
(called by ``import pbo_tf``) registers ``pbo_tf/ChainWalk-v0``, ``pbo_tf/LQR-v0``, ``pbo_tf/CarOnHill-v0``
(100 steps each, the paper's horizon; chain-walk and LQR never terminate by themselves) and
``pbo_tf/Bicycle-v0`` (50 000 steps = 500 s, the evaluation horizon) without importing the environment
modules. `to_tf_agents` (gymnasium -> TF-Agents ``PyEnvironment``) is exported lazily, so ``import pbo_tf``
does not load TensorFlow.
"""

from __future__ import annotations

from typing import Any

import gymnasium

from pbo_tf.envs import registry
from pbo_tf.envs.registry import ENV_IDS, NAMESPACE, register_gymnasium


def register_all() -> None:
    """Registers every ``pbo_tf`` environment id with gymnasium (`pbo_tf.envs.registry`); ids already
    registered are skipped."""
    register_gymnasium()


def known_ids() -> list[str]:
    """The sorted ``pbo_tf/...`` ids currently in the gymnasium registry."""
    return sorted(env_id for env_id in gymnasium.registry if env_id.startswith(NAMESPACE + "/"))


def make(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """`gymnasium.make` with a clear error for unknown ids.

    Any id in the gymnasium registry works (e.g. ``LunarLander-v3``); the ``pbo_tf`` ids are registered
    first if needed, and the ids of the environments of other packages (`pbo_tf.envs.registry`'s entry
    points) when ``env_id`` is not known yet.

    Args:
      env_id: a registered gymnasium id, e.g. ``ENV_IDS["chain_walk"]``.
      **kwargs: forwarded to `gymnasium.make` (e.g. ``max_episode_steps``, or environment constructor kwargs).

    Returns:
      The wrapped environment, as `gymnasium.make` returns it.

    Raises:
      ValueError: ``env_id`` is not in the gymnasium registry; the message lists the ``pbo_tf`` ids.
      pbo_tf.envs.registry.EntryPointError: an environment package's entry point failed to load.
    """
    register_all()
    if env_id not in gymnasium.registry:  # an id of a package outside pbo_tf (its entry point registers it)
        registry.load_entry_points()
    if env_id not in gymnasium.registry:
        raise ValueError(f"unknown environment id {env_id!r}; known ids: {known_ids()}")
    return gymnasium.make(env_id, **kwargs)


def __getattr__(name: str):
    if name == "to_tf_agents":  # lazy: the adapter imports TF-Agents (and TensorFlow)
        from pbo_tf.envs.tf_agents_adapter import to_tf_agents

        return to_tf_agents
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ENV_IDS", "known_ids", "make", "register_all", "to_tf_agents"]
