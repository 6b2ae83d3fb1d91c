"""The paper's offline car-on-hill dataset (`collect_dataset`): random-action episodes from the reset
state, then from states drawn on a segment of "oriented" starts.

Kept apart from the environment so that collecting a dataset (vectorised over episodes) and stepping the
gymnasium env stay independent; both use the same `pbo_tf.envs.car_on_hill.dynamics`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from pbo_tf.envs.car_on_hill.dynamics import (
    HORIZON,
    N_ACTIONS,
    N_SUBSTEPS,
    RESET_STATE,
    step_states,
    transition_outcome,
)

if TYPE_CHECKING:
    from pbo_tf.data.transitions import Transitions

ORIENTED_START = (0.1, 1.3)
ORIENTED_END = (0.5, 0.8)  # the reference implementation's value; the paper's appendix text says (0.5, 0.38)


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
