"""The walk: states 0..N-1 on a line, actions 0 (left) and 1 (right), deterministic moves clipped at the
ends, reward 1 for a move that lands on N-1, else 0. An episode starts at 0; its observation is the state
as one float. NumPy and gymnasium only."""

import gymnasium
import numpy as np
from gymnasium import spaces

N_STATES, N_ACTIONS, GAMMA = 5, 2, 0.8


def step(state, action, n_states=N_STATES):
    """``(next state, reward)`` of arrays of states and actions."""
    next_state = np.clip(np.asarray(state) + 2 * np.asarray(action) - 1, 0, n_states - 1)
    return next_state, (next_state == n_states - 1).astype(np.float64)


def bellman(q, gamma=GAMMA):
    """``T q (s, a) = r(s, a) + γ max_a' q(s', a')`` of a table ``q [N, 2]``."""
    n_states = len(q)
    states, actions = np.meshgrid(np.arange(n_states), np.arange(N_ACTIONS), indexing="ij")
    next_states, rewards = step(states, actions, n_states)
    return rewards + gamma * q.max(axis=1)[next_states]


def optimal_q(gamma=GAMMA, n_states=N_STATES, sweeps=500):
    """``Q* [N, 2]`` by value iteration (exact to float64 precision after 500 sweeps at γ = 0.8)."""
    q = np.zeros((n_states, N_ACTIONS))
    for _ in range(sweeps):
        q = bellman(q, gamma)
    return q


def collect_dataset(repetitions=1, n_states=N_STATES):
    """Every (s, a) ``repetitions`` times, states as ``[n, 1]`` floats (the observations)."""
    from pbo_tf.data.transitions import Transitions

    states = np.repeat(np.arange(n_states), N_ACTIONS * repetitions)
    actions = np.tile(np.repeat(np.arange(N_ACTIONS), repetitions), n_states)
    next_states, rewards = step(states, actions, n_states)
    obs, next_obs = (s.astype(np.float32)[:, None] for s in (states, next_states))
    return Transitions.from_arrays(obs, actions, rewards, next_obs, np.zeros(len(states)))


def greedy_return(q, gamma=GAMMA, steps=10):
    """``(return, discounted return)`` of the greedy policy of the table ``q [N, 2]`` (first action on
    ties) over ``steps`` steps from state 0."""
    state, total, discounted = 0, 0.0, 0.0
    for t in range(steps):
        state, reward = step(state, int(np.argmax(q[state])), len(q))
        total += float(reward)
        discounted += gamma**t * float(reward)
    return total, discounted


class ToyWalkEnv(gymnasium.Env):
    """The walk as a gymnasium environment (never terminates: the registration cuts it at 10 steps)."""

    observation_space = spaces.Box(0.0, N_STATES - 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(N_ACTIONS)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._state = 0
        return np.array([self._state], np.float32), {}

    def step(self, action):
        next_state, reward = step(self._state, int(action))
        self._state = int(next_state)
        return np.array([self._state], np.float32), float(reward), False, False, {}
