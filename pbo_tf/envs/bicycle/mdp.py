"""Bicycle balancing (Randløv & Alstrøm 1998) in the Lagoudakis & Parr (LSPI) variant of the paper.

State ``(ω, ω̇, θ, θ̇)``: ``ω`` is the tilt of the bicycle from the vertical, ``θ`` the angle of the
handlebar (both in radians, their rates in rad/s). Five discrete actions, in this order
(`ACTIONS`, ``(d, T)`` = displacement of the centre of mass in metres, torque on the handlebar):

    0: (−0.02, 0)    1: (0, 0)    2: (0.02, 0)    3: (0, −2)    4: (0, 2)

Uniform noise ``U(−noise, noise)`` is added to ``d`` (``noise = 0.002`` by default, ten times smaller than
Randløv's, as in the paper). One step is one explicit Euler step of ``dt = 0.01`` s of Randløv & Alstrøm's
equations

    φ = ω + atan(d / h),
    ω̈ = [M h g sin φ − cos φ (I_dc σ̇ θ̇ + sign(θ) v² (M_d r / r_f + M_d r / r_b + M h / r_CM))] / I_bc,
    θ̈ = (T − I_dv σ̇ ω̇) / I_dl,

with ``1/r_f = |sin θ| / l``, ``1/r_b = |tan θ| / l`` and ``1/r_CM = ((l − c)² + l² / tan² θ)^(−1/2)``
(0 at ``θ = 0``). ``ω`` and ``θ`` advance with the *old* rates, the rates with the accelerations; where
``|θ|`` passes 80° the handlebar rate is zeroed and ``θ`` is clipped to ±80°.

Because ``|θ| <= 80° < 90°``, ``sign(θ)|sin θ| = sin θ``, ``sign(θ)|tan θ| = tan θ`` and
``sign(θ) / r_CM = tan θ / sqrt((l − c)² tan² θ + l²)``; `bicycle_step` evaluates this equivalent form,
which has no division by zero, needs no branch at ``θ = 0`` and has finite gradients everywhere.

Reward and termination: the bicycle falls when ``|ω_{t+1}| > 12°``; the step then pays −1 and terminates.
Otherwise it pays the shaping reward ``10⁴ (|ω_t| − |ω_{t+1}|)``, positive when the bicycle straightens.
``gamma = 0.99``; evaluation episodes last at most 50 000 steps (500 s).

`bicycle_step` is written once, vectorised over any batch shape and generic over the array module:
``xp=np`` (float64) for the gymnasium env and the dataset, ``xp=tensorflow.experimental.numpy`` for the
compiled rollouts of `pbo_tf.envs.bicycle.evaluation`. The noise is an argument, sampled by the caller, so
both paths compute the same transition from the same noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np
from gymnasium import spaces

if TYPE_CHECKING:
    from pbo_tf.data.transitions import Transitions

# Model constants (metres, kilograms, seconds).
C = 0.66  # horizontal distance between the front tyre's contact point and the centre of mass
D_CM = 0.30  # vertical distance between the centre of mass and the cyclist
H = 0.94  # height of the centre of mass over the ground
L = 1.11  # distance between the front and the back tyre's contact points
M_C = 15.0  # mass of the bicycle
M_D = 1.7  # mass of a tyre
M_P = 60.0  # mass of the cyclist
R = 0.34  # radius of a tyre
V = 10.0 / 3.6  # velocity of the bicycle (10 km/h)
G = 9.82  # gravity
DT = 0.01  # Euler time step

M = M_C + M_P
I_BC = 13.0 / 3.0 * M_C * H**2 + M_P * (H + D_CM) ** 2
I_DC = M_D * R**2
I_DV = 1.5 * M_D * R**2
I_DL = 0.5 * M_D * R**2
SIGMA_DOT = V / R

OMEGA_BOUND = 12.0 * math.pi / 180.0  # the bicycle falls beyond this tilt
THETA_BOUND = 80.0 * math.pi / 180.0  # the handlebar is clipped to this angle

GAMMA = 0.99
NOISE = 0.002
MAX_EPISODE_STEPS = 50_000
FALL_REWARD = -1.0
SHAPING_SCALE = 1e4

# The five actions (d, T), in the order of the action indices.
ACTIONS = np.array([[-0.02, 0.0], [0.0, 0.0], [0.02, 0.0], [0.0, -2.0], [0.0, 2.0]], dtype=np.float64)
N_ACTIONS = len(ACTIONS)
# What the Q networks are fed for each action: (d, T) scaled to {-1, 0, 1} (offline and online runs alike).
ACTION_ENCODING = (ACTIONS / np.array([0.02, 2.0])).astype(np.float32)

# Default half-widths of the uniform box the dataset episodes start in (see `collect_dataset`).
START_SCALE = (math.radians(2.0), math.radians(5.0), math.radians(5.0), math.radians(20.0))


def bicycle_step(state: Any, action: Any, d_noise: Any, xp: Any = np) -> tuple[Any, Any, Any]:
    """One Euler step of the bicycle, vectorised over a batch, in the array module ``xp``.

    Args:
      state: float64 ``[..., 4]`` states ``(ω, ω̇, θ, θ̇)`` with ``|θ| <= 80°``.
      action: integer ``[...]`` action indices in ``0 .. 4`` (see `ACTIONS`).
      d_noise: float64 ``[...]`` noise added to the displacement ``d`` (sampled by the caller, e.g.
        ``U(−0.002, 0.002)``; zeros for a deterministic step).
      xp: the array module, ``numpy`` or ``tensorflow.experimental.numpy`` (traceable in a `tf.function`).

    Returns:
      ``(next_state, reward, terminated)``: float64 ``[..., 4]``, float64 ``[...]`` (−1 at a fall, else
      ``10⁴ (|ω_t| − |ω_{t+1}|)``) and bool ``[...]`` (``|ω_{t+1}| > 12°``).
    """
    omega, omega_dot, theta, theta_dot = (state[..., i] for i in range(4))
    d = xp.take(xp.asarray(ACTIONS[:, 0], dtype=xp.float64), action) + d_noise
    torque = xp.take(xp.asarray(ACTIONS[:, 1], dtype=xp.float64), action)

    phi = omega + xp.arctan(d / H)
    sin_theta = xp.sin(theta)
    tan_theta = xp.tan(theta)
    # sign(θ) (M_d r / r_f + M_d r / r_b + M h / r_CM), branch-free (see the module docstring).
    turn = M_D * R * (sin_theta + tan_theta) / L + M * H * tan_theta / xp.sqrt(
        (L - C) ** 2 * tan_theta * tan_theta + L**2
    )
    omega_ddot = (M * H * G * xp.sin(phi) - xp.cos(phi) * (I_DC * SIGMA_DOT * theta_dot + V**2 * turn)) / I_BC
    theta_ddot = (torque - I_DV * SIGMA_DOT * omega_dot) / I_DL

    next_omega = omega + DT * omega_dot
    next_omega_dot = omega_dot + DT * omega_ddot
    next_theta = theta + DT * theta_dot
    next_theta_dot = theta_dot + DT * theta_ddot
    next_theta_dot = xp.where(xp.abs(next_theta) > THETA_BOUND, xp.zeros_like(next_theta_dot), next_theta_dot)
    next_theta = xp.clip(next_theta, -THETA_BOUND, THETA_BOUND)
    next_state = xp.stack([next_omega, next_omega_dot, next_theta, next_theta_dot], axis=-1)

    terminated = xp.abs(next_omega) > OMEGA_BOUND
    shaping = SHAPING_SCALE * (xp.abs(omega) - xp.abs(next_omega))
    reward = xp.where(terminated, xp.full_like(shaping, FALL_REWARD), shaping)
    return next_state, reward, terminated


def _validated_state(raw: Any) -> np.ndarray:
    try:
        state = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"options['state'] must be 4 real numbers (ω, ω̇, θ, θ̇), got {raw!r}") from e
    if state.shape != (4,) or not np.all(np.isfinite(state)):
        raise ValueError(f"options['state'] must be a finite array of shape (4,), got {raw!r}")
    if abs(state[2]) > THETA_BOUND or abs(state[0]) > np.pi:
        raise ValueError(
            f"options['state'] needs |ω| <= π and |θ| <= 80° ({THETA_BOUND:.7f} rad), got {raw!r}"
        )
    return state


class BicycleEnv(gymnasium.Env):
    """Bicycle balancing as a gymnasium environment (registered as ``pbo_tf/Bicycle-v0``).

    Observations are float32 ``(ω, ω̇, θ, θ̇)`` in the `Box` ``|ω| <= π``, ``|θ| <= 80°`` (the clip of the
    dynamics) and, for the rates, the largest finite float32 (gymnasium's CartPole convention: finite, so
    ``check_env`` does not warn, yet no reachable value is excluded; the terminal ``ω`` lies just past
    ±12°). Actions are ``Discrete(5)`` (see `ACTIONS`). The internal state is float64; the
    displacement noise is drawn from ``self.np_random``. Episodes terminate when the bicycle falls; the
    registration truncates them after 50 000 steps. Attributes: ``gamma``, ``noise``.
    """

    metadata = {"render_modes": []}

    def __init__(self, noise: float = NOISE, render_mode: str | None = None):
        """Builds the environment.

        Args:
          noise: half-width of the uniform noise added to ``d`` (0 makes the dynamics deterministic).
          render_mode: must be ``None`` (no rendering).
        """
        if render_mode is not None:
            raise ValueError(f"BicycleEnv has no render modes, got render_mode={render_mode!r}")
        if not noise >= 0.0:
            raise ValueError(f"noise must be >= 0, got {noise!r}")
        self.noise = float(noise)
        self.gamma = GAMMA
        self.render_mode = render_mode
        big = np.finfo(np.float32).max
        high = np.array([np.pi, big, THETA_BOUND, big], dtype=np.float32)
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self._state: np.ndarray | None = None

    @property
    def state(self) -> np.ndarray | None:
        """A copy of the float64 internal state, ``None`` before the first reset."""
        return None if self._state is None else self._state.copy()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts from ``(0, 0, 0, 0)``, or from ``options["state"]`` (4 finite numbers, ``|ω| <= π``,
        ``|θ| <= 80°``).

        Raises:
          ValueError: ``options["state"]`` is malformed.
        """
        super().reset(seed=seed)
        if options is not None and options.get("state") is not None:
            self._state = _validated_state(options["state"])
        else:
            self._state = np.zeros(4, dtype=np.float64)
        return self._state.astype(np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One Euler step; returns ``(observation, reward, fell, False, {})``.

        Raises:
          RuntimeError: called before ``reset``.
          ValueError: ``action`` is not in ``0 .. 4``.
        """
        if self._state is None:
            raise RuntimeError("BicycleEnv.step called before reset")
        if not self.action_space.contains(action):
            raise ValueError(f"action must be an integer in [0, {N_ACTIONS - 1}], got {action!r}")
        d_noise = self.np_random.uniform(-self.noise, self.noise) if self.noise > 0.0 else 0.0
        next_state, reward, terminated = bicycle_step(
            self._state, np.asarray(int(action)), np.asarray(d_noise, dtype=np.float64)
        )
        self._state = next_state
        return next_state.astype(np.float32), float(reward), bool(terminated), False, {}


def collect_dataset(
    seed: int,
    n_transitions: int = 70_000,
    episode_length: int = 20,
    start_scale: float | Sequence[float] = START_SCALE,
    noise: float = NOISE,
) -> Transitions:
    """The paper's offline bicycle dataset: uniformly random actions in short episodes starting near 0.

    Each episode starts from a state drawn uniformly in the box ``|s_i| <= start_scale[i]`` (default: ω
    within ±2°, ω̇ within ±5°/s, θ within ±5°, θ̇ within ±20°/s, a small neighbourhood of the upright
    equilibrium) and is cut after ``episode_length`` steps, or earlier at a fall. Episodes are simulated
    together, vectorised over episodes; batches of ``ceil(remaining / episode_length)`` episodes are run
    until ``n_transitions`` are collected, and the concatenation is cut to exactly ``n_transitions`` (so
    the last episode may be shorter). Transitions are ordered episode by episode, then by time, so within an
    episode ``next_state[i] == state[i + 1]``. All randomness (starts, actions, noise) comes from
    ``np.random.default_rng(seed)``.

    Args:
      seed: seed of the generator.
      n_transitions: number of transitions to return (70 000 in the paper: 3 500 episodes of 20 steps).
      episode_length: the cut of every episode.
      start_scale: the half-widths of the start box, one number for all components or four.
      noise: half-width of the displacement noise.

    Returns:
      `Transitions` with ``state``/``next_state`` float32 ``[n, 4]``, ``action`` int32 ``[n]`` in
      ``0 .. 4``, ``reward`` float32 ``[n]`` and ``done`` float32 ``[n]`` (1 exactly at falls).

    Raises:
      ValueError: non-positive sizes, negative scales or noise, or a θ half-width above 80°.
    """
    from pbo_tf.data.transitions import Transitions  # lazy: keeps env registration free of TensorFlow

    if n_transitions < 1 or episode_length < 1:
        raise ValueError(
            f"n_transitions and episode_length must be >= 1, got {n_transitions}, {episode_length}"
        )
    scale = np.broadcast_to(np.asarray(start_scale, dtype=np.float64), (4,))
    if np.any(scale < 0.0) or not np.all(np.isfinite(scale)) or scale[2] > THETA_BOUND:
        raise ValueError(f"start_scale must be finite, >= 0 and <= 80° for θ, got {start_scale!r}")
    if not noise >= 0.0:
        raise ValueError(f"noise must be >= 0, got {noise!r}")

    rng = np.random.default_rng(seed)
    chunks: list[tuple[np.ndarray, ...]] = []
    collected = 0
    while collected < n_transitions:
        n_episodes = -(-(n_transitions - collected) // episode_length)
        state = rng.uniform(-scale, scale, size=(n_episodes, 4))
        actions = rng.integers(N_ACTIONS, size=(episode_length, n_episodes))
        d_noise = rng.uniform(-noise, noise, size=(episode_length, n_episodes))
        alive = np.ones(n_episodes, dtype=bool)
        steps: list[tuple[np.ndarray, ...]] = []
        for t in range(episode_length):
            next_state, reward, terminated = bicycle_step(state, actions[t], d_noise[t])
            steps.append((state, actions[t], reward, next_state, terminated, alive))
            alive = alive & ~terminated
            state = next_state
        # [time, episode, ...] -> [episode, time, ...], then keep the steps taken before or at the fall.
        fields = [np.swapaxes(np.stack(column), 0, 1) for column in zip(*steps, strict=True)]
        mask = fields.pop()
        chunks.append(tuple(field[mask] for field in fields))
        collected += int(mask.sum())

    state, action, reward, next_state, done = (
        np.concatenate(column)[:n_transitions] for column in zip(*chunks, strict=True)
    )
    return Transitions.from_arrays(
        state=state.astype(np.float32),
        action=action.astype(np.int32),
        reward=reward,
        next_state=next_state.astype(np.float32),
        done=done.astype(np.float32),
    )
