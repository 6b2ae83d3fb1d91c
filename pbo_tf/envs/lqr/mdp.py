"""Scalar linear quadratic regulator (paper Sec. 5.2 and appendix "Closed-Form of PBO for LQR MDP").

Dynamics and reward (reward *maximisation*, both quadratic forms are negative definite):

    s' = A s + B a,        r(s, a) = Q s² + 2 S s a + R a²,        gamma = 1.

The optimal value is ``V*(s) = P s²`` where ``P`` is the stabilising solution of the scalar discrete
algebraic Riccati equation

    P = Q + A² P − (S + A B P)² / (R + B² P),      R + B² P < 0,

and the optimal action-value function is ``Q*(s, a) = G s² + 2 I s a + M a²`` with
``(G, I, M) = (Q + A² P, S + A B P, R + B² P)``. The Q family of the paper fixes ``M`` and learns
``omega = (G, I)``; the paper uses ``M = -1.20`` (`M_PAPER`), the reference code fixes ``M`` at the optimal
value (``optimal_params()["M"]`` = -1.199...).

Dataset actions: the paper's dataset is the 11 × 11 mesh of ``(s, a)`` over ``[-4, 4]²``. Its actions are
not on the 200-action linspace over ``[-8, 8]`` used for the max in the Bellman target
(`discrete_actions`), so `collect_dataset` stores in ``Transitions.action`` the int32 index into
`mesh_actions` and the LQR Q family receives that per-dataset action-value table (``mesh_actions(...)``)
to turn indices back into continuous actions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np
from gymnasium import spaces

if TYPE_CHECKING:
    from pbo_tf.data.transitions import Transitions

A = -0.45554542
B = 0.54189110
Q = -0.72501767
R = -0.93264484
S = -0.62723827 / 2  # the reference gives 2S (the paper's reward has the term -0.63 s a)
GAMMA = 1.0
M_PAPER = -1.20
ACTION_LOW = -8.0
ACTION_HIGH = 8.0
N_ACTIONS = 200
STATE_LOW = -4.0
STATE_HIGH = 4.0


def riccati_p(A: float = A, B: float = B, Q: float = Q, R: float = R, S: float = S) -> float:
    """The stabilising solution ``P`` of the scalar Riccati equation of this reward-maximisation LQR.

    Multiplying ``P = Q + A² P − (S + A B P)² / (R + B² P)`` by ``R + B² P`` gives the quadratic
    ``B² P² + (R − A² R − Q B² + 2 A B S) P + S² − Q R = 0``. Among its real roots the one with
    ``R + B² P < 0`` (the greedy action is a maximum) and ``|A + B L| < 1`` for
    ``L = −(S + A B P)/(R + B² P)`` (the greedy policy is stabilising) is kept and polished with Newton
    steps on the original equation.

    Args:
      A, B, Q, R, S: the model constants (defaults: the paper's).

    Returns:
      ``P`` as a Python float (``V*(s) = P s²``).

    Raises:
      ValueError: no root is both a maximum and stabilising (e.g. ``B = 0`` with ``|A| >= 1``).
    """
    a2 = B * B
    a1 = R - A * A * R - Q * B * B + 2.0 * A * B * S
    a0 = S * S - Q * R
    if a2 == 0.0:
        roots = [-a0 / a1] if a1 != 0.0 else []
    else:
        disc = a1 * a1 - 4.0 * a2 * a0
        if disc < 0.0:
            roots = []
        else:
            # Numerically stable pair of roots (no cancellation between -a1 and sqrt(disc)).
            q = -0.5 * (a1 + math.copysign(math.sqrt(disc), a1))
            roots = [q / a2, a0 / q] if q != 0.0 else [0.0]

    def residual(p: float) -> float:
        return Q + A * A * p - (S + A * B * p) ** 2 / (R + B * B * p) - p

    for p in sorted(roots):
        m = R + B * B * p
        if m >= 0.0 or abs(A + B * (-(S + A * B * p) / m)) >= 1.0:
            continue
        for _ in range(5):  # Newton polish: removes the rounding of the closed form
            m = R + B * B * p
            i = S + A * B * p
            derivative = A * A - (2.0 * A * B * i * m - B * B * i * i) / (m * m) - 1.0
            if derivative == 0.0:
                break
            p_new = p - residual(p) / derivative
            if p_new == p:
                break
            p = p_new
        return float(p)
    raise ValueError(f"no stabilising maximising Riccati solution for A={A}, B={B}, Q={Q}, R={R}, S={S}")


def optimal_params() -> dict[str, float]:
    """The optimal quadratic Q-function parameters and value coefficient of the paper's LQR.

    Returns:
      ``{"G": Q + A² P, "I": S + A B P, "M": R + B² P, "P": P}`` (``Q*(s, a) = G s² + 2 I s a + M a²``).
    """
    p = riccati_p()
    return {"G": Q + A * A * p, "I": S + A * B * p, "M": R + B * B * p, "P": p}


def greedy_gain(G: Any, I: Any, M: Any) -> Any:
    """The gain ``L = -I / M`` of the greedy policy ``a = L s`` of ``G s² + 2 I s a + M a²`` (``M < 0``).

    Works elementwise on floats and NumPy arrays.
    """
    return -I / M


def policy_value(L: float) -> float:
    """``P_L`` such that the value (gamma = 1) of the linear policy ``a = L s`` is ``P_L s²``.

    ``P_L = (Q + 2 S L + R L²) / (1 − (A + B L)²)`` when the closed loop ``A + B L`` is stable, else
    ``-inf`` (the negative-definite rewards then sum to minus infinity from any ``s != 0``).
    """
    closed_loop = A + B * L
    if abs(closed_loop) >= 1.0:
        return -math.inf
    return float((Q + 2.0 * S * L + R * L * L) / (1.0 - closed_loop * closed_loop))


def oracle_operator(
    G: Any,
    I: Any,
    M: Any,
    *,
    A: float = A,
    B: float = B,
    Q: float = Q,
    S: float = S,
) -> tuple[Any, Any]:
    """The paper's closed-form PBO for LQR (Eq. PBO_lqr): ``(G, I) -> (Q + A² c, S + A B c)``, c = G − I²/M.

    This is the exact Bellman update of the ``s²`` and ``s a`` coefficients: for ``M < 0``,
    ``r(s, a) + max_a' Q_ω(s', a') = G' s² + 2 I' s a + (R + B² c) a²``. The ``a²`` coefficient
    ``R + B² c`` generally differs from the family's fixed ``M``, so ``Q_{Λ(ω)}`` is not exactly the Bellman
    target; on the paper's 11 × 11 mesh the least-squares projection of the target onto the family has the
    same ``I'`` but a different ``G'`` (the ``a²`` residual correlates with ``s²``). At ``M = M*`` and
    ``(G, I) = (G*, I*)`` the two coincide, and ``(G*, I*)`` is the fixed point.

    Args:
      G, I: current parameters, floats or NumPy arrays of the same shape ``[...]``.
      M: the fixed ``a²`` coefficient (negative), broadcastable to ``G``.
      A, B, Q, S: the model constants (defaults: the paper's).

    Returns:
      ``(G', I')`` with the broadcast shape of the inputs.
    """
    c = G - I * I / M
    return Q + A * A * c, S + A * B * c


def reward(state: Any, action: Any) -> Any:
    """``r(s, a) = Q s² + 2 S s a + R a²`` elementwise."""
    return Q * state * state + 2.0 * S * state * action + R * action * action


def next_state(state: Any, action: Any) -> Any:
    """``s' = A s + B a`` elementwise."""
    return A * state + B * action


def discrete_actions(n: int = N_ACTIONS, low: float = ACTION_LOW, high: float = ACTION_HIGH) -> np.ndarray:
    """The action set the Bellman target maximises over: float32 ``[n]`` linspace over ``[low, high]``."""
    return np.linspace(low, high, n).astype(np.float32)


def mesh_actions(n: int = 11, low: float = STATE_LOW, high: float = STATE_HIGH) -> np.ndarray:
    """The dataset's action values: float32 ``[n]`` linspace; ``Transitions.action`` indexes into it."""
    return np.linspace(low, high, n).astype(np.float32)


class LQREnv(gymnasium.Env):
    """The scalar LQR as a gymnasium environment (registered as ``pbo_tf/LQR-v0``).

    Observations are float32 ``[1]``; actions float32 ``[1]`` in ``[-8, 8]`` (out-of-range actions are
    clipped to the bounds, as in gymnasium's Pendulum). ``step`` returns ``r = Q s² + 2 S s a + R a²`` and
    ``s' = A s + B a`` computed in float64 from the internal (float64) state; it never terminates. The model
    constants are exposed as attributes ``A, B, Q, R, S, gamma``.
    """

    metadata = {"render_modes": []}

    def __init__(self, render_mode: str | None = None):
        if render_mode is not None:
            raise ValueError(f"LQREnv has no render modes, got render_mode={render_mode!r}")
        self.A, self.B, self.Q, self.R, self.S, self.gamma = A, B, Q, R, S, GAMMA
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(ACTION_LOW, ACTION_HIGH, shape=(1,), dtype=np.float32)
        self._state: float | None = None

    def _observation(self) -> np.ndarray:
        return np.array([self._state], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts from ``U[-4, 4]``, or from ``options["state"]`` (a scalar or a shape-``(1,)`` array).

        Raises:
          ValueError: ``options["state"]`` is not a finite real scalar / single-element array.
        """
        super().reset(seed=seed)
        if options is not None and options.get("state") is not None:
            raw = options["state"]
            try:
                arr = np.asarray(raw, dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise ValueError(f"options['state'] must be a real number, got {raw!r}") from e
            if arr.shape not in ((), (1,)) or not np.all(np.isfinite(arr)):
                raise ValueError(f"options['state'] must be a finite scalar or shape-(1,) array, got {raw!r}")
            self._state = float(arr.reshape(()))
        else:
            self._state = float(self.np_random.uniform(STATE_LOW, STATE_HIGH))
        return self._observation(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Applies ``a`` (clipped to ``[-8, 8]``); returns ``(s', r(s, a), False, False, {})``.

        Raises:
          RuntimeError: called before ``reset``.
          ValueError: ``action`` is not a finite scalar / single-element array.
        """
        if self._state is None:
            raise RuntimeError("LQREnv.step called before reset")
        arr = np.asarray(action, dtype=np.float64)
        if arr.size != 1 or not np.isfinite(arr).all():
            raise ValueError(f"action must be one finite number (shape (1,)), got {action!r}")
        a = float(np.clip(arr.reshape(()), ACTION_LOW, ACTION_HIGH))
        r = float(reward(self._state, a))
        self._state = float(next_state(self._state, a))
        return self._observation(), r, False, False, {}


def collect_dataset(n: int = 11, low: float = STATE_LOW, high: float = STATE_HIGH) -> Transitions:
    """The paper's LQR dataset: the ``n × n`` mesh of ``(s, a)`` over ``[low, high]²`` (121 transitions).

    Transitions are ordered by state, then action. ``action`` holds the int32 index into
    ``mesh_actions(n, low, high)``; rewards and next states are computed in float64 from the float32 mesh
    values (so they are exactly consistent with the stored states and ``mesh_actions``), then stored as
    float32. ``done`` is always 0.

    Args:
      n: mesh points per axis.
      low, high: bounds of the mesh for both the state and the action.

    Returns:
      `Transitions` with ``state``/``next_state`` float32 ``[n², 1]``, ``action`` int32 ``[n²]`` in
      ``0 .. n-1``, ``reward``/``done`` float32 ``[n²]``.
    """
    from pbo_tf.data.transitions import Transitions  # lazy: keeps env registration free of TensorFlow

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n!r}")
    states = np.linspace(low, high, n).astype(np.float32).astype(np.float64)
    actions = mesh_actions(n, low, high).astype(np.float64)
    state_index, action_index = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    s = states[state_index.reshape(-1)]
    a = actions[action_index.reshape(-1)]
    return Transitions.from_arrays(
        state=s.astype(np.float32)[:, None],
        action=action_index.reshape(-1).astype(np.int32),
        reward=reward(s, a),
        next_state=next_state(s, a).astype(np.float32)[:, None],
        done=np.zeros(n * n),
    )
