"""The car-on-hill gymnasium environment (`CarOnHillEnv`, registered as ``pbo_tf/CarOnHill-v0``).

A thin stateful wrapper around `pbo_tf.envs.car_on_hill.dynamics`: single-state steps use the scalar array
module, so an episode never pays NumPy's per-call overhead, and the float64 state is kept internally while
observations are float32.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from pbo_tf.envs.car_on_hill.dynamics import (
    GAMMA,
    MAX_POSITION,
    MAX_VELOCITY,
    N_ACTIONS,
    N_SUBSTEPS,
    RESET_STATE,
    SCALAR,
    step_pv,
    transition_outcome,
)

# Observation bounds: every non-terminal state lies in [-1, 1] x [-3, 3]; the state after a terminal step
# can lie outside (at most ~0.5 in p and ~2.5 in v beyond, see the test), so the Box is wider than the
# state space and observations are never clipped.
OBS_LOW = np.array([-2.0, -8.0], dtype=np.float32)
OBS_HIGH = np.array([2.0, 8.0], dtype=np.float32)


def _validate_state(state: Any, name: str = "options['state']") -> tuple[float, float]:
    try:
        arr = np.asarray(state, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a pair (p, v) of real numbers, got {state!r}") from e
    if arr.shape != (2,) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be a finite pair (p, v), got {state!r}")
    if abs(arr[0]) > MAX_POSITION or abs(arr[1]) > MAX_VELOCITY:
        raise ValueError(f"{name} must lie in [-1, 1] x [-3, 3], got {state!r}")
    return float(arr[0]), float(arr[1])


# ------------------------------------------------------------------------------------------ environment
class CarOnHillEnv(gymnasium.Env):
    """Car-on-hill as a gymnasium environment (registered as ``pbo_tf/CarOnHill-v0``, 100-step limit).

    Observations are float32 ``(p, v)`` in a `Box` ``[-2, 2] x [-8, 8]``: every non-terminal observation lies
    in the state space ``[-1, 1] x [-3, 3]``, the observation after a terminal step is the true (unclipped)
    state, which can leave the state space by up to ~0.5 in ``p`` and ~2.5 in ``v``. Actions are
    ``Discrete(2)``: 0 → ``u = −4``, 1 → ``u = +4``. The dynamics are deterministic; the internal state is
    float64. ``step`` returns ``(obs, reward, terminated, False, {})``; stepping after termination raises.
    """

    metadata = {"render_modes": []}

    def __init__(self, n_substeps: int = N_SUBSTEPS, render_mode: str | None = None):
        """Builds the environment.

        Args:
          n_substeps: RK4 sub-steps per 0.1 s step.
          render_mode: must be ``None`` (no rendering).
        """
        if render_mode is not None:
            raise ValueError(f"CarOnHillEnv has no render modes, got render_mode={render_mode!r}")
        if int(n_substeps) != n_substeps or n_substeps < 1:
            raise ValueError(f"n_substeps must be a positive integer, got {n_substeps!r}")
        self.n_substeps = int(n_substeps)
        self.gamma = GAMMA
        self.render_mode = render_mode
        self.observation_space = spaces.Box(OBS_LOW, OBS_HIGH, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self._state: tuple[float, float] | None = None
        self._terminated = False

    @property
    def state(self) -> np.ndarray | None:
        """The float64 internal state ``(p, v)`` (``None`` before ``reset``)."""
        return None if self._state is None else np.array(self._state, dtype=np.float64)

    def _observation(self) -> np.ndarray:
        return np.array(self._state, dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts at ``(−0.5, 0)``, or at ``options["state"]`` (a pair inside ``[-1, 1] x [-3, 3]``).

        Raises:
          ValueError: ``options["state"]`` is not a finite pair inside the state space.
        """
        super().reset(seed=seed)
        if options is not None and options.get("state") is not None:
            self._state = _validate_state(options["state"])
        else:
            self._state = RESET_STATE
        self._terminated = False
        return self._observation(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Applies ``u = ±4`` for 0.1 s.

        Raises:
          RuntimeError: called before ``reset`` or after a terminal step.
          ValueError: ``action`` is not 0 or 1.
        """
        if self._state is None:
            raise RuntimeError("CarOnHillEnv.step called before reset")
        if self._terminated:
            raise RuntimeError("CarOnHillEnv.step called after a terminal step; call reset")
        if not self.action_space.contains(action):
            raise ValueError(f"action must be 0 (u = -4) or 1 (u = +4), got {action!r}")
        p, v = step_pv(self._state[0], self._state[1], int(action), SCALAR, self.n_substeps)
        self._state = (p, v)
        reward, terminated = transition_outcome(np.array([p, v]))
        self._terminated = bool(terminated)
        return self._observation(), float(reward), self._terminated, False, {}
