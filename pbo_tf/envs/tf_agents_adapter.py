"""A gymnasium -> TF-Agents ``PyEnvironment`` adapter (TF-Agents 0.19 on PyPI has no gymnasium suite).

`to_tf_agents` wraps a gymnasium environment (an instance, a registered id, or a zero-argument constructor)
in a `GymnasiumPyEnvironment`, which TF-Agents' `TFPyEnvironment`, `BatchedPyEnvironment`,
`ParallelPyEnvironment`, drivers, policies and metrics use unchanged.

Specs (all ``BoundedArraySpec``):

* ``Discrete(n, start)`` -> int32 scalar in ``[start, start + n - 1]``. int32 (not gymnasium's int64) is the
  action and tabular-state dtype of the rest of ``pbo_tf`` (`pbo_tf.data.transitions`, the Q families);
  TF-Agents' ``QPolicy`` / ``DqnAgent`` accept any integer action spec.
* ``Box`` -> the Box's shape and bounds; floating Boxes (observations *and* actions) become float32, the
  dtype TF-Agents networks use; integer Boxes (e.g. uint8 images) keep their dtype. Actions are cast back to
  the Box dtype before they reach gymnasium.
* ``MultiDiscrete`` -> int32 ``nvec.shape`` in ``[start, start + nvec - 1]``; ``MultiBinary`` -> int32 in
  ``[0, 1]``; ``Tuple`` / ``Dict`` -> tuples / dicts of the above.
* reward: float32 scalar; discount: the default float32 scalar in ``[0, 1]``.

Time steps follow TF-Agents' conventions, where ``discount`` is the per-step *continuation* factor
(agents multiply it by their own ``gamma``):

* ``reset`` -> ``ts.restart`` (FIRST, reward 0, discount 1);
* gymnasium ``terminated`` -> ``ts.termination`` (LAST, discount 0, no bootstrap);
* ``truncated`` without ``terminated`` -> ``ts.truncation`` (LAST, discount ``discount``: bootstrap);
* otherwise -> ``ts.transition`` (MID, discount ``discount``).

Auto-reset is delegated to ``PyEnvironment(handle_auto_reset=True)``: the ``step`` after a LAST time step
(or a ``step`` before any ``reset``) resets the environment, ignores its action and returns a FIRST time
step. Drivers stepping a fixed number of *episodes* only stop if episodes end, so give never-ending
environments a ``max_episode_steps`` (the ``pbo_tf`` ids are registered with one).

Seeding: the first reset calls gymnasium's ``reset(seed=seed)``; later resets pass no seed, so they continue
the environment's own RNG. Two adapters built with the same seed therefore produce the same episodes under
the same actions. The action space is seeded with ``seed`` too. `GymnasiumPyEnvironment.seed` (used by
``ParallelPyEnvironment.seed``) re-arms this: the next reset uses the new seed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

try:
    from tf_agents.environments import py_environment
    from tf_agents.specs import array_spec
    from tf_agents.trajectories import time_step as ts
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

INT_DTYPE = np.int32
FLOAT_DTYPE = np.float32


def space_to_spec(space: spaces.Space, name: str | None = None) -> Any:
    """The TF-Agents ``BoundedArraySpec`` (or nest of them) describing a gymnasium space.

    Args:
      space: a ``Discrete``, ``Box``, ``MultiDiscrete``, ``MultiBinary``, or a ``Tuple`` / ``Dict`` of them.
      name: the spec's name (nested specs are named by their key or index under it).

    Returns:
      A ``BoundedArraySpec``, or a tuple / dict of them mirroring the space.

    Raises:
      TypeError: an unsupported space type.
    """
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return array_spec.BoundedArraySpec(
            shape=(), dtype=INT_DTYPE, minimum=start, maximum=start + int(space.n) - 1, name=name
        )
    if isinstance(space, spaces.Box):
        dtype = FLOAT_DTYPE if np.issubdtype(space.dtype, np.floating) else space.dtype
        return array_spec.BoundedArraySpec(
            shape=space.shape,
            dtype=dtype,
            minimum=np.asarray(space.low).astype(dtype),
            maximum=np.asarray(space.high).astype(dtype),
            name=name,
        )
    if isinstance(space, spaces.MultiDiscrete):
        start = np.asarray(space.start, dtype=np.int64)
        return array_spec.BoundedArraySpec(
            shape=space.shape,
            dtype=INT_DTYPE,
            minimum=start.astype(INT_DTYPE),
            maximum=(start + np.asarray(space.nvec) - 1).astype(INT_DTYPE),
            name=name,
        )
    if isinstance(space, spaces.MultiBinary):
        return array_spec.BoundedArraySpec(
            shape=space.shape, dtype=INT_DTYPE, minimum=0, maximum=1, name=name
        )
    if isinstance(space, spaces.Tuple):
        return tuple(
            space_to_spec(sub, f"{name}_{i}" if name else str(i)) for i, sub in enumerate(space.spaces)
        )
    if isinstance(space, spaces.Dict):
        return {key: space_to_spec(sub, key) for key, sub in space.spaces.items()}
    raise TypeError(f"unsupported gymnasium space {space!r}")


def _to_tf_agents_value(space: spaces.Space, value: Any) -> Any:
    """A gymnasium observation (nest) as numpy arrays of `space_to_spec`'s dtypes."""
    if isinstance(space, spaces.Tuple):
        return tuple(_to_tf_agents_value(sub, v) for sub, v in zip(space.spaces, value, strict=True))
    if isinstance(space, spaces.Dict):
        return {key: _to_tf_agents_value(sub, value[key]) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Box):
        dtype = FLOAT_DTYPE if np.issubdtype(space.dtype, np.floating) else space.dtype
        return np.asarray(value, dtype=dtype).reshape(space.shape)
    return np.asarray(value, dtype=INT_DTYPE).reshape(space.shape)


def _to_gymnasium_value(space: spaces.Space, value: Any) -> Any:
    """A TF-Agents action (nest of numpy arrays) in the form and dtype ``space`` expects."""
    if isinstance(space, spaces.Tuple):
        return tuple(_to_gymnasium_value(sub, v) for sub, v in zip(space.spaces, value, strict=True))
    if isinstance(space, spaces.Dict):
        return {key: _to_gymnasium_value(sub, value[key]) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Discrete):
        return int(np.asarray(value).reshape(()))
    return np.asarray(value, dtype=space.dtype).reshape(space.shape)


class GymnasiumPyEnvironment(py_environment.PyEnvironment):
    """A gymnasium environment seen as an unbatched TF-Agents ``PyEnvironment`` (see the module docstring)."""

    def __init__(self, gym_env: gymnasium.Env, *, seed: int | None = None, discount: float = 1.0):
        """Wraps ``gym_env``.

        Args:
          gym_env: the gymnasium environment; the adapter owns it (``close`` closes it).
          seed: seed of the first reset and of the action space; ``None`` leaves both to gymnasium.
          discount: continuation factor of MID and truncated LAST time steps, in ``[0, 1]``; terminal steps
            always have discount 0.

        Raises:
          TypeError: ``gym_env`` is not a ``gymnasium.Env``, or has an unsupported space.
          ValueError: ``discount`` outside ``[0, 1]``.
        """
        if not isinstance(gym_env, gymnasium.Env):
            raise TypeError(f"expected a gymnasium.Env, got {type(gym_env).__name__}")
        if not 0.0 <= float(discount) <= 1.0:
            raise ValueError(f"discount must lie in [0, 1], got {discount!r}")
        super().__init__(handle_auto_reset=True)
        self._env = gym_env
        self._discount = float(discount)
        self._observation_spec = space_to_spec(gym_env.observation_space, "observation")
        self._action_spec = space_to_spec(gym_env.action_space, "action")
        self._pending_seed: int | None = None
        self._info: dict[str, Any] = {}
        self.seed(seed)

    @property
    def gym_env(self) -> gymnasium.Env:
        """The wrapped gymnasium environment."""
        return self._env

    @property
    def discount(self) -> float:
        """The continuation factor of non-terminal time steps."""
        return self._discount

    def observation_spec(self) -> Any:
        """The observation spec, from the gymnasium observation space (see `space_to_spec`)."""
        return self._observation_spec

    def action_spec(self) -> Any:
        """The action spec, from the gymnasium action space (see `space_to_spec`)."""
        return self._action_spec

    def seed(self, seed: int | None) -> int | None:
        """Makes the next reset call gymnasium's ``reset(seed=seed)`` and seeds the action space.

        Args:
          seed: the seed; ``None`` leaves the environment's RNG as it is.

        Returns:
          ``seed``.
        """
        self._pending_seed = None if seed is None else int(seed)
        if seed is not None:
            self._env.action_space.seed(int(seed))
        return seed

    def get_info(self) -> dict[str, Any]:
        """The gymnasium ``info`` dict of the last ``reset`` or ``step``."""
        return self._info

    def _reset(self) -> ts.TimeStep:
        observation, info = self._env.reset(seed=self._pending_seed)
        self._pending_seed = None
        self._info = info
        return ts.restart(_to_tf_agents_value(self._env.observation_space, observation))

    def _step(self, action: Any) -> ts.TimeStep:
        gym_action = _to_gymnasium_value(self._env.action_space, action)
        observation, reward, terminated, truncated, info = self._env.step(gym_action)
        self._info = info
        observation = _to_tf_agents_value(self._env.observation_space, observation)
        reward = np.asarray(reward, dtype=np.float32)
        if terminated:
            return ts.termination(observation, reward)
        if truncated:
            return ts.truncation(observation, reward, discount=self._discount)
        return ts.transition(observation, reward, discount=self._discount)

    def render(self, mode: str = "rgb_array") -> Any:
        """The gymnasium ``render()`` output.

        gymnasium fixes the render mode at construction: pass ``render_mode=...`` to `to_tf_agents`.

        Args:
          mode: must equal the wrapped environment's ``render_mode``.

        Raises:
          NotImplementedError: the environment was made without a render mode.
          ValueError: ``mode`` differs from the environment's render mode.
        """
        env_mode = self._env.render_mode
        if env_mode is None:
            raise NotImplementedError("the gymnasium env has render_mode=None; make it with render_mode=...")
        if mode != env_mode:
            raise ValueError(f"the gymnasium env renders in mode {env_mode!r}, not {mode!r}")
        return self._env.render()

    def close(self) -> None:
        """Closes the wrapped gymnasium environment."""
        self._env.close()


def to_tf_agents(
    env_or_id: str | gymnasium.Env | Callable[..., gymnasium.Env],
    *,
    seed: int | None = None,
    discount: float | None = None,
    max_episode_steps: int | None = None,
    **make_kwargs: Any,
) -> GymnasiumPyEnvironment:
    """A TF-Agents ``PyEnvironment`` running a gymnasium environment.

    For ``ParallelPyEnvironment`` (which pickles its constructors with cloudpickle) pass e.g.
    ``functools.partial(to_tf_agents, "CartPole-v1", seed=i)`` as each constructor.

    Args:
      env_or_id: a gymnasium id (made with `pbo_tf.envs.make`, so ``pbo_tf/...`` ids are registered first),
        a ``gymnasium.Env`` instance (owned by the adapter from then on), or a callable returning one (called
        with ``**make_kwargs``).
      seed: seed of the first reset and of the action space (see the module docstring).
      discount: continuation factor of non-terminal time steps; ``None`` means 1.0.
      max_episode_steps: episode length limit (truncation). For an id it is passed to ``gymnasium.make``
        (overriding the registered limit); an instance or a callable's result is wrapped in
        ``gymnasium.wrappers.TimeLimit`` (an existing inner limit still applies if it is shorter).
      **make_kwargs: keyword arguments of ``gymnasium.make`` or of the callable (e.g. ``render_mode``).

    Returns:
      The `GymnasiumPyEnvironment`.

    Raises:
      ValueError: unknown id, ``make_kwargs`` given with an instance, bad ``discount`` or
        ``max_episode_steps``.
      TypeError: ``env_or_id`` is none of the accepted kinds, or a callable returned no ``gymnasium.Env``.
    """
    if max_episode_steps is not None and int(max_episode_steps) < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps!r}")
    if isinstance(env_or_id, str):
        from pbo_tf.envs import make  # lazy: pbo_tf.envs re-exports this module

        if max_episode_steps is not None:
            make_kwargs["max_episode_steps"] = int(max_episode_steps)
        env = make(env_or_id, **make_kwargs)
    else:
        if isinstance(env_or_id, gymnasium.Env):
            if make_kwargs:
                raise ValueError(f"keyword arguments {sorted(make_kwargs)} need an id or a callable")
            env = env_or_id
        elif callable(env_or_id):
            env = env_or_id(**make_kwargs)
            if not isinstance(env, gymnasium.Env):
                raise TypeError(f"the env constructor returned {type(env).__name__}, not a gymnasium.Env")
        else:
            raise TypeError(
                f"env_or_id must be an id, a gymnasium.Env or a callable, got {type(env_or_id).__name__}"
            )
        if max_episode_steps is not None:
            env = gymnasium.wrappers.TimeLimit(env, max_episode_steps=int(max_episode_steps))
    return GymnasiumPyEnvironment(env, seed=seed, discount=1.0 if discount is None else discount)


__all__ = ["GymnasiumPyEnvironment", "space_to_spec", "to_tf_agents"]
