"""Car-on-hill dynamics: hill shape, equations of motion, integration step and transition outcome.

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
generic over the array module ``xp``: NumPy (float64, used by the env, the dataset and the exact search),
`SCALAR` (Python floats, single-state env steps) and ``tensorflow.experimental.numpy`` inside
``tf.function`` / XLA (the compiled greedy rollouts of ``pbo_tf.envs.car_on_hill.evaluation`` and the
TensorFlow backend of the exact search). Every other module of the package builds on this one and this one
imports none of them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

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
N_SUBSTEPS = 10


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
