"""Car-on-hill (Ernst, Geurts & Wehenkel 2005, "Tree-based batch mode RL"), the paper's offline benchmark.

A car of mass ``m = 1`` moves along the horizontal coordinate ``p`` of a hill of height ``Hill(p)``:

    Hill(p) = p² + p              (p < 0),        Hill(p) = p / √(1 + 5 p²)      (p ≥ 0),
    p̈ = (u − g m H′ − v² m H′ H″) / (m (1 + H′²)),       g = 9.81,

with ``v = ṗ`` and ``u = ±4`` (action index 0 → ``u = −4``, 1 → ``u = +4``). The control is held for
``DT = 0.1`` s. After the step the transition is classified: reward −1 and terminal if ``p < −1`` or
``|v| > 3``; reward +1 and terminal if ``p > 1`` and ``|v| ≤ 3``; else reward 0. ``GAMMA = 0.95``,
horizon 100, reset state ``(−0.5, 0)``.

Integration. ``H″`` jumps from 2 to 0 at ``p = 0`` (``H′`` is continuous), so ``p̈`` jumps by ``v²`` when the
car crosses the bottom-right junction. Fixed-step RK4 across such a jump is only first-order accurate
(errors of ~1e-2 per crossing), so every RK4 sub-step evaluates one *locked* branch of the hill (the side the
sub-step starts on) and, when the locked trial step ends on the other side, the sub-step is split at the
crossing time (root of the cubic Hermite interpolant of the trial step, refined by Newton) and finished with
the other branch. With ``N_SUBSTEPS = 10`` sub-steps of 0.01 s the state after a trajectory of several 0.1 s
steps agrees with a ``scipy.integrate.solve_ivp`` reference (DOP853, rtol 1e-10/1e-12) to better than 1e-6
(measured ~1e-8 .. 5e-7, see ``tests/envs/test_car_on_hill.py``).

The dynamics are written once (`step_states`, `transition_outcome`), vectorised over any batch shape and
generic over the array module ``xp``: NumPy (float64, used by the env, the dataset and the exact search) and
``tensorflow.experimental.numpy`` inside ``tf.function`` / XLA (the compiled greedy rollouts of
``pbo_tf.evaluation.car_on_hill`` and the TensorFlow backend of the exact search).

Exact optimum. `first_passage` runs a breadth-first search over all action sequences (see its docstring),
made affordable by an exact branch-and-bound pruning (certified upper bounds from rollouts + a sound energy
bound), and `optimal_values` turns it into ``V*``/``Q*`` on the 17 × 17 evaluation grid, cached as ``.npz``.

Evaluation grid (``layout``). ``"reference"`` (default, as the paper's code): the evaluation states are the
nodes ``linspace(−1, 1, 17) × linspace(−3, 3, 17)`` (borders included) and the cell of a node is the box of
width ``2/16 × 6/16`` centred on it, so the cells cover ``[−1.0625, 1.0625] × [−3.1875, 3.1875]``.
``"cells"``: 17 equal cells partitioning ``[−1, 1] × [−3, 3]`` evaluated at their midpoints. In both, cells
are numbered row-major ``i_p * 17 + i_v`` (the velocity index varies fastest).
"""

from __future__ import annotations

import math
import os
import time
import warnings
import zipfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np
from gymnasium import spaces

if TYPE_CHECKING:
    from pbo_tf.data.transitions import Transitions

MASS = 1.0
GRAVITY = 9.81
DT = 0.1
ACTION_FORCES = (-4.0, 4.0)  # action index 0 -> u = -4, 1 -> u = +4
N_ACTIONS = 2
MAX_POSITION = 1.0
MAX_VELOCITY = 3.0
GAMMA = 0.95
HORIZON = 100
RESET_STATE = (-0.5, 0.0)
ORIENTED_START = (0.1, 1.3)
ORIENTED_END = (0.5, 0.8)  # the reference implementation's value; the paper's appendix text says (0.5, 0.38)
N_SUBSTEPS = 10
GRID_SIZE = 17
BFS_LATTICE = 1e-5
LAYOUTS = ("reference", "cells")
DEFAULT_LAYOUT = "reference"
# Observation bounds: every non-terminal state lies in [-1, 1] x [-3, 3]; the state after a terminal step
# can lie outside (at most ~0.5 in p and ~2.5 in v beyond, see the test), so the Box is wider than the
# state space and observations are never clipped.
OBS_LOW = np.array([-2.0, -8.0], dtype=np.float32)
OBS_HIGH = np.array([2.0, 8.0], dtype=np.float32)
_CACHE_VERSION = 1


# ------------------------------------------------------------------------------------------ dynamics
class _ScalarModule:
    """The few array-module functions the dynamics use, over Python floats (fast single-state steps)."""

    sqrt = staticmethod(math.sqrt)

    @staticmethod
    def where(condition: bool, x: float, y: float) -> float:
        return x if condition else y

    @staticmethod
    def clip(x: float, low: float, high: float) -> float:
        return min(max(x, low), high)

    @staticmethod
    def abs(x: float) -> float:
        return abs(x)

    @staticmethod
    def logical_not(x: bool) -> bool:
        return not x

    @staticmethod
    def logical_and(x: bool, y: bool) -> bool:
        return x and y

    @staticmethod
    def logical_or(x: bool, y: bool) -> bool:
        return x or y

    @staticmethod
    def logical_xor(x: bool, y: bool) -> bool:
        return x != y


SCALAR = _ScalarModule()


def hill(p: Any, xp: Any = np) -> Any:
    """``Hill(p)``: ``p² + p`` for ``p < 0``, ``p / √(1 + 5 p²)`` for ``p ≥ 0`` (elementwise)."""
    return xp.where(p < 0.0, p * p + p, p / xp.sqrt(1.0 + 5.0 * p * p))


def hill_derivatives(p: Any, xp: Any = np, positive: Any = None) -> tuple[Any, Any]:
    """``(H′(p), H″(p))`` elementwise.

    Args:
      p: positions.
      xp: array module.
      positive: optional boolean array choosing the branch (``True``: the ``p ≥ 0`` formula) instead of the
        sign of ``p``; the integrator uses it to keep one smooth branch inside a sub-step.
    """
    if positive is None:
        positive = p >= 0.0
    s = 1.0 + 5.0 * p * p
    r = 1.0 / (s * xp.sqrt(s))  # (1 + 5p²)^(-3/2)
    d1 = xp.where(positive, r, 2.0 * p + 1.0)
    d2 = xp.where(positive, -15.0 * p * r / s, 2.0)
    return d1, d2


def acceleration(p: Any, v: Any, u: Any, xp: Any = np, positive: Any = None) -> Any:
    """``p̈ = (u − g m H′ − v² m H′ H″) / (m (1 + H′²))`` elementwise (``positive``: `hill_derivatives`)."""
    d1, d2 = hill_derivatives(p, xp, positive)
    return (u - GRAVITY * MASS * d1 - v * v * MASS * d1 * d2) / (MASS * (1.0 + d1 * d1))


def _rk4(p: Any, v: Any, u: Any, h: Any, positive: Any, xp: Any) -> tuple[Any, Any]:
    """One classical RK4 step of length ``h`` (scalar or array) on the hill branch ``positive``."""
    k1p, k1v = v, acceleration(p, v, u, xp, positive)
    k2p = v + 0.5 * h * k1v
    k2v = acceleration(p + 0.5 * h * k1p, k2p, u, xp, positive)
    k3p = v + 0.5 * h * k2v
    k3v = acceleration(p + 0.5 * h * k2p, k3p, u, xp, positive)
    k4p = v + h * k3v
    k4v = acceleration(p + h * k3p, k4p, u, xp, positive)
    return (
        p + (h / 6.0) * (k1p + 2.0 * k2p + 2.0 * k3p + k4p),
        v + (h / 6.0) * (k1v + 2.0 * k2v + 2.0 * k3v + k4v),
    )


def _split_substep(
    p0: Any, v0: Any, u: Any, h: float, positive: Any, p1: Any, v1: Any, xp: Any, newton_steps: int = 3
) -> tuple[Any, Any]:
    """Redoes a sub-step whose locked trial ``(p1, v1)`` crossed ``p = 0``: locked branch up to the crossing
    time, the other branch after it. The crossing time is the root of the cubic Hermite interpolant of the
    trial step (error O(h⁴)), found by Newton from the linear interpolation."""
    denom = p0 - p1
    denom = xp.where(denom == 0.0, 1.0, denom)  # only reached by entries that did not cross (xp = tnp)
    theta = xp.clip(p0 / denom, 0.0, 1.0)
    hv0, hv1 = h * v0, h * v1
    for _ in range(newton_steps):
        t2 = theta * theta
        t3 = t2 * theta
        value = (2.0 * t3 - 3.0 * t2 + 1.0) * p0 + (t3 - 2.0 * t2 + theta) * hv0
        value = value + (3.0 * t2 - 2.0 * t3) * p1 + (t3 - t2) * hv1
        slope = (6.0 * t2 - 6.0 * theta) * (p0 - p1) + (3.0 * t2 - 4.0 * theta + 1.0) * hv0
        slope = slope + (3.0 * t2 - 2.0 * theta) * hv1
        safe = xp.abs(slope) > 1e-300
        theta = xp.clip(theta - xp.where(safe, value / xp.where(safe, slope, 1.0), 0.0), 0.0, 1.0)
    tau = theta * h
    pc, vc = _rk4(p0, v0, u, tau, positive, xp)
    return _rk4(pc, vc, u, h - tau, xp.logical_not(positive), xp)


def _substep(p: Any, v: Any, u: Any, h: float, xp: Any) -> tuple[Any, Any]:
    """One RK4 sub-step with the ``p = 0`` crossing handled (see the module docstring)."""
    positive = p >= 0.0
    p1, v1 = _rk4(p, v, u, h, positive, xp)
    crossed = xp.logical_xor(p1 >= 0.0, positive)
    if xp is SCALAR:
        return _split_substep(p, v, u, h, positive, p1, v1, xp) if crossed else (p1, v1)
    if xp is np:  # only the few crossing entries are recomputed
        if not crossed.any():
            return p1, v1
        p1, v1 = p1.copy(), v1.copy()
        p1[crossed], v1[crossed] = _split_substep(
            p[crossed], v[crossed], u[crossed], h, positive[crossed], p1[crossed], v1[crossed], xp
        )
        return p1, v1
    # Traced array modules (tnp): split every entry and select (cheaper under XLA on CPU than compacting the
    # few crossing entries with top_k + scatter).
    p2, v2 = _split_substep(p, v, u, h, positive, p1, v1, xp)
    return xp.where(crossed, p2, p1), xp.where(crossed, v2, v1)


def step_pv(p: Any, v: Any, action: Any, xp: Any = np, n_substeps: int = N_SUBSTEPS) -> tuple[Any, Any]:
    """Integrates one ``DT`` step from positions ``p`` and velocities ``v`` (same shape) under ``action``.

    Args:
      p, v: positions and velocities (float64 arrays of one shape, or Python floats with ``xp=SCALAR``).
      action: action indices (0 → u = −4, 1 → u = +4), broadcastable to ``p``.
      xp: array module: ``numpy``, ``tensorflow.experimental.numpy`` (traceable) or `SCALAR`.
      n_substeps: number of RK4 sub-steps of ``DT / n_substeps``.

    Returns:
      ``(p', v')``.
    """
    if xp is SCALAR:
        u = ACTION_FORCES[1] if action == 1 else ACTION_FORCES[0]
    else:
        u = xp.where(action == 1, ACTION_FORCES[1], ACTION_FORCES[0])
        if xp is np:
            p, v = np.asarray(p, dtype=np.float64), np.asarray(v, dtype=np.float64)
            u = np.broadcast_to(u, p.shape)
    h = DT / n_substeps
    if xp is np or xp is SCALAR:
        for _ in range(n_substeps):
            p, v = _substep(p, v, u, h, xp)
        return p, v
    # Traced array module (tensorflow.experimental.numpy): a graph loop keeps the graph, and the XLA
    # compilation time, much smaller than unrolling the sub-steps.
    import tensorflow as tf

    _, p, v = tf.while_loop(
        lambda i, p, v: i < n_substeps,
        lambda i, p, v: (i + 1, *_substep(p, v, u, h, xp)),
        (tf.constant(0), p, v),
    )
    return p, v


def step_states(states: Any, actions: Any, xp: Any = np, n_substeps: int = N_SUBSTEPS) -> Any:
    """The next states ``[..., 2]`` of states ``[..., 2]`` (``(p, v)``) under action indices ``[...]``.

    Vectorised over any batch shape; with ``xp = tensorflow.experimental.numpy`` it is traceable inside
    ``tf.function`` (XLA included). Works in the dtype of ``states`` (use float64).
    """
    p, v = step_pv(states[..., 0], states[..., 1], actions, xp, n_substeps)
    return xp.stack([p, v], axis=-1)


def transition_outcome(next_states: Any, xp: Any = np) -> tuple[Any, Any]:
    """Reward and termination of the transition that lands in ``next_states`` ``[..., 2]``.

    Returns:
      ``(reward, terminated)``: reward −1 (terminal) if ``p < −1`` or ``|v| > 3``; +1 (terminal) if ``p > 1``
      and ``|v| ≤ 3``; else 0 (not terminal). ``reward`` has the dtype of ``next_states``.
    """
    p, v = next_states[..., 0], next_states[..., 1]
    crash = xp.logical_or(p < -MAX_POSITION, xp.abs(v) > MAX_VELOCITY)
    top = xp.logical_and(p > MAX_POSITION, xp.logical_not(crash))
    reward = xp.where(top, 1.0, xp.where(crash, -1.0, 0.0))
    if xp is not SCALAR:
        reward = xp.asarray(reward, dtype=next_states.dtype)
    return reward, xp.logical_or(crash, top)


def _outcome_pv(p: Any, v: Any) -> tuple[Any, Any]:
    """``(crash, top)`` boolean arrays (NumPy / floats) of states after a step."""
    crash = (p < -MAX_POSITION) | (np.abs(v) > MAX_VELOCITY)
    return crash, (p > MAX_POSITION) & ~crash


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


# ------------------------------------------------------------------------------------------ dataset
def _simulate_episodes(
    starts: np.ndarray, actions: np.ndarray, n_substeps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Runs episodes ``[E]`` side by side from ``starts`` ``[E, 2]`` with open-loop ``actions`` ``[E, T]``.

    Returns:
      ``(states [E, T, 2], next_states [E, T, 2], reward [E, T], lengths [E])``; an episode's length is the
      index of its terminal step + 1, or ``T``; entries after the end are meaningless.
    """
    n_episodes, horizon = actions.shape
    states = np.empty((n_episodes, horizon, 2))
    next_states = np.empty((n_episodes, horizon, 2))
    rewards = np.empty((n_episodes, horizon))
    lengths = np.full(n_episodes, horizon)
    alive = np.ones(n_episodes, dtype=bool)
    s = np.asarray(starts, dtype=np.float64)
    for t in range(horizon):
        nxt = step_states(s, actions[:, t], np, n_substeps)
        reward, terminated = transition_outcome(nxt)
        states[:, t], next_states[:, t], rewards[:, t] = s, nxt, reward
        ended = alive & terminated
        lengths[ended] = t + 1
        alive &= ~terminated
        if not alive.any():
            break
        s = np.where(alive[:, None], nxt, s)  # finished episodes stay frozen
    return states, next_states, rewards, lengths


def _collect_phase(
    rng: np.random.Generator,
    n_transitions: int,
    first_start: np.ndarray,
    next_start: Callable[[np.random.Generator], np.ndarray],
    horizon: int,
    n_substeps: int,
) -> tuple[np.ndarray, ...]:
    """``n_transitions`` transitions of consecutive episodes (truncated at ``horizon`` steps).

    Episode ``e`` draws, in this order, its start (``next_start(rng)``; the first episode uses
    ``first_start`` without drawing) and ``rng.integers(2, size=horizon)``, its uniform random actions. The
    episodes are simulated side by side in batches; the last batch may draw episodes that are not used,
    which changes nothing about the used ones.
    """
    parts: list[tuple[np.ndarray, ...]] = []
    collected, first = 0, True
    while collected < n_transitions:
        n_episodes = max(8, 2 * -(-(n_transitions - collected) // horizon))
        starts, actions = [], []
        for _ in range(n_episodes):
            starts.append(first_start if first else next_start(rng))
            actions.append(rng.integers(N_ACTIONS, size=horizon))
            first = False
        actions_arr = np.stack(actions)
        states, next_states, rewards, lengths = _simulate_episodes(np.stack(starts), actions_arr, n_substeps)
        for e in range(n_episodes):
            take = min(int(lengths[e]), n_transitions - collected)
            terminated = (rewards[e, :take] != 0.0).astype(np.float64)  # nonzero reward <=> terminal step
            parts.append(
                (
                    states[e, :take],
                    actions_arr[e, :take],
                    rewards[e, :take],
                    next_states[e, :take],
                    terminated,
                )
            )
            collected += take
            if collected == n_transitions:
                break
    return tuple(np.concatenate([part[i] for part in parts]) for i in range(5))


def collect_dataset(
    seed: int,
    n_random: int = 4500,
    n_oriented: int = 1000,
    horizon: int = HORIZON,
    oriented_start: tuple[float, float] = ORIENTED_START,
    oriented_end: tuple[float, float] = ORIENTED_END,
    n_substeps: int = N_SUBSTEPS,
) -> Transitions:
    """The paper's car-on-hill dataset (5500 transitions by default), uniform random actions throughout.

    First ``n_random`` transitions of episodes starting at ``(−0.5, 0)``; then ``n_oriented`` transitions of
    episodes starting at ``oriented_start`` for the first one and at
    ``α·oriented_end + (1 − α)·oriented_start``, ``α ~ U(0, 1)``, for each following one. An episode ends
    on termination or after ``horizon`` steps (the reference resets after ``horizon + 1`` steps, an
    off-by-one of no consequence).

    Randomness: ``np.random.SeedSequence(seed).spawn(2)`` gives one generator per phase; each episode draws
    its ``α`` (oriented phase, not the first episode) then ``horizon`` actions ``integers(2)`` (those after
    its end are unused). So the dataset is a pure function of the arguments, and the first ``k`` random-phase
    transitions do not depend on ``n_random >= k`` nor on ``n_oriented``. Episodes are simulated side by
    side (vectorised NumPy), which is much faster than stepping one state at a time.

    Returns:
      `Transitions` with ``state``/``next_state`` float32 ``[N, 2]``, ``action`` int32 indices,
      ``reward`` float32 in {−1, 0, 1}, ``done`` float32 = the terminated flag (truncations are not done).
    """
    from pbo_tf.data.transitions import Transitions  # lazy: keeps env registration free of TensorFlow

    if n_random < 0 or n_oriented < 0 or n_random + n_oriented == 0:
        raise ValueError(f"need n_random, n_oriented >= 0 with a positive sum, got {n_random}, {n_oriented}")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon!r}")
    rng_random, rng_oriented = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    start = np.asarray(oriented_start, dtype=np.float64)
    end = np.asarray(oriented_end, dtype=np.float64)
    reset = np.asarray(RESET_STATE, dtype=np.float64)

    def oriented_reset(rng: np.random.Generator) -> np.ndarray:
        alpha = rng.random()
        return alpha * end + (1.0 - alpha) * start

    phases = []
    if n_random:
        phases.append(_collect_phase(rng_random, n_random, reset, lambda _: reset, horizon, n_substeps))
    if n_oriented:
        phases.append(_collect_phase(rng_oriented, n_oriented, start, oriented_reset, horizon, n_substeps))
    state, action, reward, next_state, done = (np.concatenate([ph[i] for ph in phases]) for i in range(5))
    return Transitions.from_arrays(
        state=state.astype(np.float32),
        action=action.astype(np.int32),
        reward=reward,
        next_state=next_state.astype(np.float32),
        done=done,
    )


# ------------------------------------------------------------------------------------------ grid
def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def grid_axes(layout: str = DEFAULT_LAYOUT, n: int = GRID_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """The evaluation positions ``[n]`` and velocities ``[n]`` of the grid (see the module docstring)."""
    _check_layout(layout)
    if layout == "reference":
        return np.linspace(-MAX_POSITION, MAX_POSITION, n), np.linspace(-MAX_VELOCITY, MAX_VELOCITY, n)
    widths = 2.0 * MAX_POSITION / n, 2.0 * MAX_VELOCITY / n
    return (
        -MAX_POSITION + (np.arange(n) + 0.5) * widths[0],
        -MAX_VELOCITY + (np.arange(n) + 0.5) * widths[1],
    )


def grid_edges(layout: str = DEFAULT_LAYOUT, n: int = GRID_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """The cell edges ``[n + 1]`` along ``p`` and along ``v``."""
    _check_layout(layout)
    if layout == "reference":
        dp, dv = 2.0 * MAX_POSITION / (n - 1), 2.0 * MAX_VELOCITY / (n - 1)
        return (
            -MAX_POSITION - dp / 2 + dp * np.arange(n + 1),
            -MAX_VELOCITY - dv / 2 + dv * np.arange(n + 1),
        )
    return np.linspace(-MAX_POSITION, MAX_POSITION, n + 1), np.linspace(-MAX_VELOCITY, MAX_VELOCITY, n + 1)


def grid_centres(layout: str = DEFAULT_LAYOUT, n: int = GRID_SIZE) -> np.ndarray:
    """The ``n²`` evaluation states, float64 ``[n², 2]``, row-major: row ``i_p * n + i_v`` is
    ``(positions[i_p], velocities[i_v])`` — the velocity varies fastest."""
    positions, velocities = grid_axes(layout, n)
    pp, vv = np.meshgrid(positions, velocities, indexing="ij")
    return np.stack([pp.reshape(-1), vv.reshape(-1)], axis=1)


def cell_indices(
    states: np.ndarray, layout: str = DEFAULT_LAYOUT, n: int = GRID_SIZE, outside: str = "drop"
) -> np.ndarray:
    """The cell (row-major index ``i_p * n + i_v``) of each state ``[N, 2]``.

    Cells are half-open ``[e_i, e_{i+1})`` except the last, which includes its upper edge. States outside
    the cells (``layout="reference"``: outside ``[−1.0625, 1.0625] × [−3.1875, 3.1875]``; ``"cells"``: outside
    ``[−1, 1] × [−3, 3]``) get ``-1`` with ``outside="drop"`` (as the reference's sample counts) or the
    nearest border cell with ``outside="clip"``.

    Returns:
      int64 ``[N]``.
    """
    if outside not in ("drop", "clip"):
        raise ValueError(f"outside must be 'drop' or 'clip', got {outside!r}")
    states = np.asarray(states, dtype=np.float64)
    if states.ndim != 2 or states.shape[1] != 2:
        raise ValueError(f"states must have shape [N, 2], got {states.shape}")
    index = []
    inside = np.ones(len(states), dtype=bool)
    for axis, edges in enumerate(grid_edges(layout, n)):
        x = states[:, axis]
        i = np.floor((x - edges[0]) / (edges[1] - edges[0])).astype(np.int64)
        i = np.where(x == edges[-1], n - 1, i)
        inside &= (i >= 0) & (i < n)
        index.append(np.clip(i, 0, n - 1))
    cells = index[0] * n + index[1]
    return cells if outside == "clip" else np.where(inside, cells, -1)


def state_counts(
    states: np.ndarray, layout: str = DEFAULT_LAYOUT, n: int = GRID_SIZE, outside: str = "drop"
) -> np.ndarray:
    """The raw number of ``states`` ``[N, 2]`` per cell, int64 ``[n²]`` (see `cell_indices`)."""
    cells = cell_indices(states, layout, n, outside)
    return np.bincount(cells[cells >= 0], minlength=n * n).astype(np.int64)


# ------------------------------------------------------------------------------------------ exact optimum
def _numpy_stepper(n_substeps: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], tuple]:
    return lambda p, v, a: step_pv(p, v, a, np, n_substeps)


def _tensorflow_stepper(
    n_substeps: int, chunk: int = 1 << 15
) -> Callable[[np.ndarray, np.ndarray, np.ndarray], tuple]:
    """`step_pv` compiled with XLA on fixed-size chunks (one compilation). On a CPU it gains little over
    NumPy (the traced path integrates the junction-crossing split for every state, not only for the few
    that cross), so it mainly pays off on a GPU."""
    import tensorflow as tf
    import tensorflow.experimental.numpy as tnp

    compiled = tf.function(
        lambda p, v, a: step_pv(p, v, a, tnp, n_substeps), jit_compile=True, autograph=False
    )

    def stepper(p: np.ndarray, v: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out_p, out_v = np.empty_like(p), np.empty_like(v)
        for lo in range(0, len(p), chunk):
            hi = min(lo + chunk, len(p))
            pad = chunk - (hi - lo)
            args = [np.pad(x[lo:hi], (0, pad)) for x in (p, v, a)]
            rp, rv = compiled(*(tf.constant(x) for x in args))
            out_p[lo:hi], out_v[lo:hi] = rp.numpy()[: hi - lo], rv.numpy()[: hi - lo]
        return out_p, out_v

    return stepper


# Energy per unit mass shifted to be >= 0: W = v²(1 + H′²)/2 + g (H(p) − min H), min H = −1/4. Along any
# trajectory dW/dt = u v / m and |v| ≤ √(2W), so √W grows at most at rate U/(m√2) and |p| moves at most
# √2 (√W0 t + U t² / (2 m √2)). Reaching p > 1 needs W > g (H(1) + 1/4).
_U_MAX = max(abs(f) for f in ACTION_FORCES)
_SQRT_W_TOP = math.sqrt(GRAVITY * (1.0 / math.sqrt(6.0) + 0.25))
_DIVE_BRAKE_SPEEDS = (np.inf, 2.5, 2.0)  # dive policies: +4 when 0 < v <= speed, else -4


def shifted_energy(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``W = v² (1 + H′(p)²) / 2 + g (Hill(p) + 1/4) ≥ 0``, the mechanical energy per unit mass, shifted."""
    d1, _ = hill_derivatives(p)
    return 0.5 * v * v * (1.0 + d1 * d1) + GRAVITY * (hill(p) + 0.25)


def can_reach_top(p: np.ndarray, v: np.ndarray, steps: Any, margin: float = 1e-3) -> np.ndarray:
    """A necessary condition for any action sequence to reach ``p > 1`` within ``steps`` steps from (p, v).

    Sound for the exact dynamics (energy bound, see the comment above); ``margin`` absorbs the integration
    error (~1e-7). Used by `first_passage` to discard states that cannot beat a known success depth.
    """
    t = DT * np.asarray(steps, dtype=np.float64)
    root_w = np.sqrt(np.maximum(shifted_energy(p, v), 0.0))
    rate = _U_MAX / (MASS * math.sqrt(2.0))
    energy_ok = root_w + rate * t >= _SQRT_W_TOP - margin
    reach_ok = p + math.sqrt(2.0) * (root_w * t + 0.5 * rate * t * t) >= MAX_POSITION - margin
    return energy_ok & reach_ok


def _dive_success_steps(
    p: np.ndarray, v: np.ndarray, limits: np.ndarray, brake_speeds: np.ndarray, stepper: Callable
) -> np.ndarray:
    """Rolls out "+4 when 0 < v <= brake_speed, else −4" from each state for at most ``limits`` steps.

    Returns the step at which each rollout reaches the top, or a huge number if it does not.
    """
    success = np.full(len(p), np.iinfo(np.int64).max // 4, dtype=np.int64)
    idx = np.arange(len(p))
    for step in range(1, int(limits.max(initial=0)) + 1):
        keep = limits[idx] >= step
        idx, p, v = idx[keep], p[keep], v[keep]
        if not len(idx):
            break
        p, v = stepper(p, v, ((v > 0.0) & (v <= brake_speeds[idx])).astype(np.int64))
        crash, top = _outcome_pv(p, v)
        success[idx[top]] = step
        alive = ~(crash | top)
        idx, p, v = idx[alive], p[alive], v[alive]
    return success


def first_passage(
    states: np.ndarray,
    horizon: int = HORIZON,
    *,
    lattice: float | None = BFS_LATTICE,
    prune: bool = True,
    dives_per_root: int = 8,
    dive_steps: int = 40,
    dive_min_frontier: int = 64,
    n_substeps: int = N_SUBSTEPS,
    backend: str = "numpy",
    max_frontier: int = 1 << 26,
    chunk: int = 1 << 14,
    stats: dict[str, Any] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Breadth-first search over every action sequence of length ≤ ``horizon`` from each state.

    All roots advance together as one vectorised frontier, level by level; a level expands every frontier
    state with both actions. A root is resolved at the first depth ``d`` where some sequence reaches the top
    (``p > 1``, ``|v| ≤ 3``): outcome +1; or where its last surviving sequence terminates otherwise: outcome
    −1; a root with a sequence alive after ``horizon`` steps gets outcome 0, depth ``horizon``.

    Merging: frontier states of the same root whose ``(p, v)`` fall in the same cell of the lattice of
    spacing ``lattice`` (anchored at ``(−1, −3)``) are merged, the first one kept (``None``: no merging). On
    car-on-hill the 2^d sequences stay far apart, so merging at 1e-5 almost never happens.

    Pruning (exact, ``prune=True``): the 2^d growth is tamed by branch and bound. At every level a few
    frontier states of each root with a large frontier (the ``dives_per_root`` most energetic) are rolled
    out with simple energy-pumping policies; a rollout that reaches the top certifies an upper bound ``b``
    on the root's success depth (the state's own action sequence followed by the rollout's). From then on
    the root's states that cannot reach the top within ``b − depth`` more steps (`can_reach_top`, a sound
    energy bound) are discarded: they cannot take part in any success at depth ≤ ``b``, so the first
    success depth is unchanged (tested against ``prune=False``). Roots without a certified bound are never
    pruned, so their −1/0 outcomes are exhaustive. From the bottom of the hill (answer depth 19) the
    largest frontier shrinks from ~250 000 to ~2 800 states.

    Args:
      states: float ``[N, 2]`` roots (inside ``[-1, 1] x [-3, 3]``).
      horizon: maximum number of steps.
      lattice: merge spacing, or ``None``.
      prune: enable the branch-and-bound pruning.
      dives_per_root: rollouts (per policy) per unresolved root and level that look for upper bounds.
      dive_steps: maximum length of those rollouts.
      dive_min_frontier: only roots with at least this many frontier states dive (pruning is pointless on
        small frontiers).
      n_substeps: RK4 sub-steps per step.
      backend: ``"numpy"`` or ``"tensorflow"`` (`step_pv` compiled with XLA in fixed-size chunks: pays
        off on a GPU; on a CPU it costs a long compilation for a small gain).
      max_frontier: raise instead of growing the frontier beyond this many states.
      chunk: number of frontier states expanded at once (NumPy is faster when a chunk's temporaries fit
        in the CPU cache than with one huge batch).
      stats: optional dict that receives ``frontier_sizes`` (after each level), ``merged`` and ``pruned``
        (states discarded in total) and ``seconds``.

    Returns:
      ``(outcome, depth)``: int8 ``[N]`` in {+1, −1, 0} and int64 ``[N]``.

    Raises:
      RuntimeError: the frontier would exceed ``max_frontier``.
    """
    started = time.perf_counter()
    roots = np.asarray(states, dtype=np.float64).reshape(-1, 2)
    n_roots = len(roots)
    if backend == "numpy":
        stepper = _numpy_stepper(n_substeps)
    elif backend == "tensorflow":
        stepper = _tensorflow_stepper(n_substeps)
    else:
        raise ValueError(f"backend must be 'numpy' or 'tensorflow', got {backend!r}")
    if lattice is not None:
        if lattice <= 0:
            raise ValueError(f"lattice must be positive or None, got {lattice!r}")
        bits_p = int(np.ceil(np.log2(2.0 * MAX_POSITION / lattice + 2)))
        bits_v = int(np.ceil(np.log2(2.0 * MAX_VELOCITY / lattice + 2)))
        if bits_p + bits_v + max(1, int(np.ceil(np.log2(n_roots + 1)))) > 63:
            raise ValueError(f"lattice {lattice} is too fine for {n_roots} roots (int64 keys)")
    no_bound = horizon + 1
    outcome = np.zeros(n_roots, dtype=np.int8)
    depth = np.full(n_roots, horizon, dtype=np.int64)
    resolved = np.zeros(n_roots, dtype=bool)
    bound = np.full(n_roots, no_bound, dtype=np.int64)  # certified upper bound on the success depth
    p, v, root = roots[:, 0].copy(), roots[:, 1].copy(), np.arange(n_roots)
    sizes: list[int] = []
    merged = pruned = 0

    def improve_bounds(level: int) -> None:
        """Dives from the most energetic frontier states of the roots whose frontier is large enough for
        pruning to matter (updates ``bound``)."""
        if not prune or not len(p) or dives_per_root < 1:
            return
        frontier_size = np.bincount(root, minlength=n_roots)
        wanted = (frontier_size >= dive_min_frontier) & (bound > level + 1)
        candidates = np.flatnonzero(wanted[root])
        if not len(candidates):
            return
        order = candidates[np.lexsort((-shifted_energy(p[candidates], v[candidates]), root[candidates]))]
        sorted_roots = root[order]
        group_start = np.searchsorted(sorted_roots, sorted_roots, side="left")
        chosen = order[np.arange(len(order)) - group_start < dives_per_root]
        chosen = np.tile(chosen, len(_DIVE_BRAKE_SPEEDS))
        brake = np.repeat(_DIVE_BRAKE_SPEEDS, len(chosen) // len(_DIVE_BRAKE_SPEEDS))
        limits = np.minimum(np.minimum(bound[root[chosen]] - 1, horizon) - level, dive_steps)
        steps = _dive_success_steps(p[chosen], v[chosen], limits, brake, stepper)
        hit = steps <= limits
        np.minimum.at(bound, root[chosen[hit]], level + steps[hit])

    for level in range(1, horizon + 1):
        parts, success = [], np.zeros(n_roots, dtype=bool)
        for lo in range(0, len(p), chunk):
            cp, cv, cr = p[lo : lo + chunk], v[lo : lo + chunk], root[lo : lo + chunk]
            m = len(cp)
            np_, nv = stepper(np.concatenate([cp, cp]), np.concatenate([cv, cv]), np.repeat(np.arange(2), m))
            nr = np.concatenate([cr, cr])
            crash, top = _outcome_pv(np_, nv)
            success[nr[top]] = True
            alive = ~(crash | top)
            parts.append((np_[alive], nv[alive], nr[alive]))
        new_success = success & ~resolved
        outcome[new_success], depth[new_success], resolved[new_success] = 1, level, True
        p = np.concatenate([x[0] for x in parts])
        v = np.concatenate([x[1] for x in parts])
        root = np.concatenate([x[2] for x in parts])
        keep = ~resolved[root]
        p, v, root = p[keep], v[keep], root[keep]
        # A certified success at this depth that the search did not reproduce (its path was merged away).
        due = ~resolved & (bound <= level)
        outcome[due], depth[due], resolved[due] = 1, bound[due], True
        keep = ~resolved[root]
        p, v, root = p[keep], v[keep], root[keep]
        if lattice is not None and len(p):
            ip = np.floor((p + MAX_POSITION) / lattice).astype(np.int64)
            iv = np.floor((v + MAX_VELOCITY) / lattice).astype(np.int64)
            key = (root << (bits_p + bits_v)) | (ip << bits_v) | iv
            _, first = np.unique(key, return_index=True)
            merged += len(p) - len(first)
            first.sort()
            p, v, root = p[first], v[first], root[first]
        improve_bounds(level)
        if prune and len(p):
            bounded = bound[root] <= horizon
            keep = ~bounded | can_reach_top(p, v, bound[root] - level)
            pruned += len(p) - int(keep.sum())
            p, v, root = p[keep], v[keep], root[keep]
        has_alive = np.zeros(n_roots, dtype=bool)
        has_alive[root] = True
        empty = ~resolved & ~has_alive
        certified = empty & (bound <= horizon)  # every state pruned: the certified success is the optimum
        outcome[certified], depth[certified], resolved[certified] = 1, bound[certified], True
        dead = empty & ~certified
        outcome[dead], depth[dead], resolved[dead] = -1, level, True
        sizes.append(len(p))
        if len(p) > max_frontier:
            raise RuntimeError(
                f"first_passage: frontier of {len(p)} states at depth {level} exceeds "
                f"max_frontier={max_frontier}"
            )
        if resolved.all():
            break
    if stats is not None:
        stats.update(
            frontier_sizes=sizes, merged=merged, pruned=pruned, seconds=time.perf_counter() - started
        )
    return outcome, depth


def values_from_first_passage(outcome: np.ndarray, depth: np.ndarray, gamma: float = GAMMA) -> np.ndarray:
    """``V*``: ``γ^(d−1)`` for outcome +1, ``−γ^(d−1)`` for −1, 0 for 0 (float64)."""
    return outcome.astype(np.float64) * gamma ** (np.asarray(depth, dtype=np.float64) - 1.0)


def optimal_state_values(
    states: np.ndarray, horizon: int = HORIZON, gamma: float = GAMMA, **kwargs: Any
) -> np.ndarray:
    """Exact ``V*`` ``[N]`` of states ``[N, 2]`` by `first_passage` (``kwargs`` are forwarded to it)."""
    return values_from_first_passage(*first_passage(states, horizon, **kwargs), gamma)


def optimal_q_values(
    states: np.ndarray,
    horizon: int = HORIZON,
    gamma: float = GAMMA,
    n_substeps: int = N_SUBSTEPS,
    **kwargs: Any,
) -> np.ndarray:
    """Exact ``Q*`` ``[N, 2]``: ``r`` for a terminal successor, else ``γ V*(s′)`` with ``V*(s′)`` searched
    over ``horizon − 1`` steps (``s′`` the exact successor; ``kwargs`` are forwarded to `first_passage`)."""
    states = np.asarray(states, dtype=np.float64).reshape(-1, 2)
    n = len(states)
    p2, v2 = step_pv(
        np.concatenate([states[:, 0]] * 2),
        np.concatenate([states[:, 1]] * 2),
        np.repeat([0, 1], n),
        np,
        n_substeps,
    )
    crash, top = _outcome_pv(p2, v2)
    q = np.where(top, 1.0, np.where(crash, -1.0, 0.0))
    live = ~(crash | top)
    if live.any() and horizon > 1:
        successors = np.stack([p2[live], v2[live]], axis=1)
        q[live] = gamma * optimal_state_values(
            successors, horizon - 1, gamma, n_substeps=n_substeps, **kwargs
        )
    return q.reshape(2, n).T


def default_cache_dir() -> str:
    """``$PBO_TF_CACHE`` if set, else ``~/.cache/pbo_tf``."""
    return os.environ.get("PBO_TF_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pbo_tf")


def optimal_values_cache_path(
    cache_dir: str | None = None,
    gamma: float = GAMMA,
    horizon: int = HORIZON,
    layout: str = DEFAULT_LAYOUT,
    lattice: float | None = BFS_LATTICE,
    n_substeps: int = N_SUBSTEPS,
) -> str:
    """The ``.npz`` file `optimal_values` reads and writes for these parameters."""
    name = (
        f"car_on_hill_optimal_{layout}{GRID_SIZE}_gamma{gamma!r}_h{horizon}_lattice{lattice!r}"
        f"_rk{n_substeps}_v{_CACHE_VERSION}.npz"
    )
    return os.path.join(cache_dir or default_cache_dir(), name)


def optimal_values(
    gamma: float = GAMMA,
    horizon: int = HORIZON,
    cache_dir: str | None = None,
    *,
    layout: str = DEFAULT_LAYOUT,
    lattice: float | None = BFS_LATTICE,
    n_substeps: int = N_SUBSTEPS,
    backend: str = "numpy",
    use_cache: bool = True,
    verbose: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``V*`` ``[289]`` and ``Q*`` ``[289, 2]`` at the grid states (`grid_centres`), cached.

    ``Q*`` comes from `optimal_q_values` (one search from the 578 successors) and ``V* = max_a Q*``, which is
    exactly the search from the grid state itself (the best first action; tested on a subset of cells).
    The first call computes them (a long search, made affordable by `first_passage`'s pruning) and writes
    ``optimal_values_cache_path(...)`` atomically (``.npz``, no pickle); later calls load the file. An
    unreadable or inconsistent cache file is recomputed and overwritten.

    Args:
      gamma, horizon: discount and maximum number of steps.
      cache_dir: folder of the cache (default `default_cache_dir`).
      layout: grid layout (module docstring).
      lattice, n_substeps, backend: search settings (`first_passage`).
      use_cache: read and write the cache.
      verbose: print the search time.

    Returns:
      ``(v_star, q_star)`` float64.
    """
    from pbo_tf.io import atomic_open

    path = optimal_values_cache_path(cache_dir, gamma, horizon, layout, lattice, n_substeps)
    n_cells = GRID_SIZE * GRID_SIZE
    if use_cache and os.path.exists(path):
        try:
            with np.load(path, allow_pickle=False) as data:
                v_star, q_star = data["v_star"], data["q_star"]
            if v_star.shape == (n_cells,) and q_star.shape == (n_cells, 2):
                return v_star.astype(np.float64), q_star.astype(np.float64)
            raise ValueError(f"shapes {v_star.shape}, {q_star.shape}")
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
            warnings.warn(
                f"recomputing the car-on-hill optimum: unreadable cache {path!r} ({e})", stacklevel=2
            )
    started = time.perf_counter()
    q_star = optimal_q_values(
        grid_centres(layout), horizon, gamma, n_substeps, lattice=lattice, backend=backend
    )
    v_star = q_star.max(axis=1)
    seconds = time.perf_counter() - started
    if verbose:
        print(f"car-on-hill optimal values: {seconds:.1f} s")
    if use_cache:
        with atomic_open(path, "wb") as f:
            np.savez(
                f,
                v_star=v_star,
                q_star=q_star,
                gamma=np.float64(gamma),
                horizon=np.int64(horizon),
                lattice=np.float64(np.nan if lattice is None else lattice),
                n_substeps=np.int64(n_substeps),
                layout=np.str_(layout),
                seconds=np.float64(seconds),
            )
    return v_star, q_star
