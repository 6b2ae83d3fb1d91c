"""Chain-walk (Munos & Szepesvári 2003 / Lagoudakis & Parr 2003), the finite MDP of the paper's Sec. 5.1.

A chain of ``N`` states ``0 .. N-1`` and two actions, ``0`` = left and ``1`` = right. The chosen move
succeeds with probability ``success_prob`` (0.9); otherwise the agent stays where it is. Both ends, states
``0`` and ``N-1``, are absorbing (every action self-loops) and pay a reward of 1 for both actions; every
other state pays 0. The reward depends on the current state only. With ``gamma = 0.9`` the optimal value of
both ends is ``1 / (1 - 0.9) = 10``. There is no termination: episodes are cut by the registration's
``max_episode_steps``.

Tabular model layout (shared with the ``table`` Q family and the ``tabular``/``oracle`` PBOs, Eq. PBO_finite):

* ``P`` float64 ``[N * 2, N]``, row ``s * 2 + a`` is the next-state distribution of ``(s, a)``;
* ``R`` float64 ``[N * 2]``, same row order;
* ``Q`` tables are ``[N, 2]`` so that ``Q.reshape(-1)`` follows the same ``s * 2 + a`` order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np
from gymnasium import spaces

if TYPE_CHECKING:
    from pbo_tf.data.transitions import Transitions

N_STATES = 20
N_ACTIONS = 2
SUCCESS_PROB = 0.9
GAMMA = 0.9

LEFT = 0
RIGHT = 1


def _validate_model_args(n_states: int, success_prob: float) -> None:
    if int(n_states) != n_states or n_states < 2:
        raise ValueError(f"n_states must be an integer >= 2, got {n_states!r}")
    if not 0.0 <= success_prob <= 1.0:
        raise ValueError(f"success_prob must lie in [0, 1], got {success_prob!r}")


def transition_model(
    n_states: int = N_STATES, success_prob: float = SUCCESS_PROB
) -> tuple[np.ndarray, np.ndarray]:
    """The exact transition matrix and reward vector of the chain.

    Args:
      n_states: number of states ``N`` (>= 2).
      success_prob: probability that the chosen move happens; otherwise the agent stays.

    Returns:
      ``(P, R)``: ``P`` float64 ``[N * 2, N]`` with rows summing to 1, ``R`` float64 ``[N * 2]``; row
      ``s * 2 + a`` describes the pair ``(s, a)``.

    Raises:
      ValueError: ``n_states < 2`` or ``success_prob`` outside ``[0, 1]``.
    """
    _validate_model_args(n_states, success_prob)
    n_states = int(n_states)
    P = np.zeros((n_states * N_ACTIONS, n_states), dtype=np.float64)
    R = np.zeros(n_states * N_ACTIONS, dtype=np.float64)
    ends = (0, n_states - 1)
    for s in range(n_states):
        for a, step in ((LEFT, -1), (RIGHT, 1)):
            row = s * N_ACTIONS + a
            if s in ends:
                P[row, s] = 1.0
                R[row] = 1.0
            else:
                P[row, s + step] += success_prob
                P[row, s] += 1.0 - success_prob
    return P, R


def optimal_q(
    n_states: int = N_STATES, success_prob: float = SUCCESS_PROB, gamma: float = GAMMA, tol: float = 1e-12
) -> np.ndarray:
    """The optimal action-value function ``Q*`` by value iteration on the exact model.

    Iterates ``Q <- R + gamma P max_a Q`` from ``Q = 0`` until the sup-norm change falls below ``tol``
    (the remaining error is then at most ``gamma / (1 - gamma) * tol``).

    Args:
      n_states: number of states ``N``.
      success_prob: probability that the chosen move happens.
      gamma: discount factor in ``[0, 1)``.
      tol: stopping threshold on the sup-norm change between two iterates.

    Returns:
      float64 ``[N, 2]`` table, ``Q*[s, a]``.

    Raises:
      ValueError: invalid model arguments or ``gamma`` outside ``[0, 1)``.
    """
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must lie in [0, 1) for value iteration to converge, got {gamma!r}")
    P, R = transition_model(n_states, success_prob)
    q = np.zeros(n_states * N_ACTIONS, dtype=np.float64)
    max_iterations = 100_000
    for _ in range(max_iterations):
        new_q = R + gamma * P @ q.reshape(n_states, N_ACTIONS).max(axis=1)
        delta = np.max(np.abs(new_q - q))
        q = new_q
        if delta < tol:
            break
    else:  # pragma: no cover - only reachable for gamma extremely close to 1
        raise RuntimeError(f"value iteration did not reach tol={tol} in {max_iterations} iterations")
    return q.reshape(n_states, N_ACTIONS)


def sample_next_states(P: np.ndarray, rows: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Samples next states by inverse-CDF sampling, one uniform number per transition.

    Args:
      P: ``[N * 2, N]`` transition matrix.
      rows: ``[B]`` int row indices ``s * 2 + a``.
      uniforms: ``[B]`` numbers in ``[0, 1)``.

    Returns:
      int64 ``[B]`` next states.
    """
    cdf = np.cumsum(P[np.asarray(rows)], axis=-1)
    cdf[..., -1] = 1.0  # guard against the cumulative sum rounding to slightly below 1
    return np.argmax(np.asarray(uniforms)[..., None] < cdf, axis=-1)


class ChainWalkEnv(gymnasium.Env):
    """The chain-walk MDP as a gymnasium environment (registered as ``pbo_tf/ChainWalk-v0``).

    Observations are integer states in ``Discrete(n_states)``; actions are ``0`` (left) and ``1`` (right).
    The exact model is exposed as ``P`` ``[N * 2, N]``, ``R`` ``[N * 2]`` and ``gamma``. The reward of a
    step is ``R(s, a)`` of the state the step starts from. ``step`` never terminates.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        n_states: int = N_STATES,
        success_prob: float = SUCCESS_PROB,
        gamma: float = GAMMA,
        render_mode: str | None = None,
    ):
        """Builds the environment.

        Args:
          n_states: number of states ``N``.
          success_prob: probability that the chosen move happens.
          gamma: discount factor of the task (informational; the env returns undiscounted rewards).
          render_mode: must be ``None`` (no rendering).
        """
        if render_mode is not None:
            raise ValueError(f"ChainWalkEnv has no render modes, got render_mode={render_mode!r}")
        self.P, self.R = transition_model(n_states, success_prob)
        self.n_states = int(n_states)
        self.success_prob = float(success_prob)
        self.gamma = float(gamma)
        self.render_mode = render_mode
        self.observation_space = spaces.Discrete(self.n_states)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self._state: int | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Starts an episode in a uniformly random state, or in ``options["state"]`` when given.

        Raises:
          ValueError: ``options["state"]`` is not an integer state of the chain.
        """
        super().reset(seed=seed)
        if options is not None and options.get("state") is not None:
            state = options["state"]
            if isinstance(state, np.ndarray) and state.shape == ():
                state = state.item()
            if (
                isinstance(state, bool)
                or not isinstance(state, (int, np.integer))
                or not 0 <= state < self.n_states
            ):
                raise ValueError(
                    f"options['state'] must be an integer in [0, {self.n_states - 1}], got {state!r}"
                )
            self._state = int(state)
        else:
            self._state = int(self.np_random.integers(self.n_states))
        return self._state, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        """Moves one step; returns ``(next_state, R(s, a), False, False, {})``.

        Raises:
          RuntimeError: called before ``reset``.
          ValueError: ``action`` is not 0 or 1.
        """
        if self._state is None:
            raise RuntimeError("ChainWalkEnv.step called before reset")
        if not self.action_space.contains(action):
            raise ValueError(f"action must be 0 (left) or 1 (right), got {action!r}")
        row = self._state * N_ACTIONS + int(action)
        reward = float(self.R[row])
        self._state = int(sample_next_states(self.P, np.array([row]), self.np_random.random(1))[0])
        return self._state, reward, False, False, {}


def collect_dataset(
    seed: int, repetitions: int = 10, n_states: int = N_STATES, success_prob: float = SUCCESS_PROB
) -> Transitions:
    """The paper's chain-walk dataset: every ``(s, a)`` pair ``repetitions`` times (400 by default).

    Transitions are ordered by state, then action, then repetition. Next states are sampled from the exact
    model with ``np.random.default_rng(seed)``; rewards are ``R(s, a)``; ``done`` is always 0.

    Args:
      seed: seed of the next-state sampling.
      repetitions: how many times each pair appears.
      n_states: number of states ``N``.
      success_prob: probability that the chosen move happens.

    Returns:
      `Transitions` with ``state``/``next_state`` int32 ``[N * 2 * repetitions]``, ``action`` int32, reward
      and done float32, all of that leading size.
    """
    from pbo_tf.data.transitions import Transitions  # lazy: keeps env registration free of TensorFlow

    if repetitions < 1:
        raise ValueError(f"repetitions must be >= 1, got {repetitions!r}")
    P, R = transition_model(n_states, success_prob)
    rng = np.random.default_rng(seed)
    state = np.repeat(np.arange(n_states), N_ACTIONS * repetitions)
    action = np.tile(np.repeat(np.arange(N_ACTIONS), repetitions), n_states)
    rows = state * N_ACTIONS + action
    next_state = sample_next_states(P, rows, rng.random(len(rows)))
    return Transitions.from_arrays(
        state=state.astype(np.int32),
        action=action.astype(np.int32),
        reward=R[rows],
        next_state=next_state.astype(np.int32),
        done=np.zeros(len(rows)),
    )
