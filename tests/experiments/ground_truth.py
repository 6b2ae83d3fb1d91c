"""Independent derivations of the values the tiny runs report at k = 0, shared by the runner tests.

At k = 0 every run evaluates ``ω_0``: zero for the table and LQR families, and for the MLP families the
seed's initial network, whose last layer is zero, so ``Q ≡ 0`` and the greedy policy (first action on ties)
plays action 0 everywhere. These functions compute what such a run must report from the papers'
definitions, in NumPy, without the runner, the problems or the evaluation modules: the exact chain-walk
``Q*`` by value iteration, the LQR optimum by iterating the Riccati equation, and the constant-action
policy's returns by plain rollouts of the environments' dynamics (`pbo_tf.envs`, checked against their own
ground truth in ``tests/envs``).
"""

from __future__ import annotations

import functools

import numpy as np


def chain_walk_q_star(n: int = 20, success: float = 0.9, gamma: float = 0.9) -> np.ndarray:
    """``Q*`` ``[n, 2]`` (actions left, right) by value iteration: the intended move succeeds with
    probability ``success``, else the walker stays; the two ends self-loop and pay 1 for both actions."""
    q = np.zeros((n, 2))
    for _ in range(2000):
        v = q.max(axis=1)
        new = np.empty_like(q)
        for s in range(n):
            for a, step in enumerate((-1, 1)):
                if s in (0, n - 1):
                    new[s, a] = 1.0 + gamma * v[s]
                else:
                    new[s, a] = gamma * (success * v[s + step] + (1 - success) * v[s])
        q = new
    return q


# LQR constants of the paper (DESIGN.md §2): s' = A s + B a, r = Q s² + 2 S s a + R a², γ = 1.
LQR_A, LQR_B, LQR_Q, LQR_R, LQR_S = -0.45554542, 0.54189110, -0.72501767, -0.93264484, -0.62723827 / 2


def lqr_optimum() -> dict[str, float]:
    """``P`` of the discrete Riccati equation (iterated from 0) and the optimal ``G = Q + A²P``,
    ``I = S + ABP``."""
    p = 0.0
    for _ in range(10_000):
        p = LQR_Q + LQR_A**2 * p - (LQR_S + LQR_A * LQR_B * p) ** 2 / (LQR_R + LQR_B**2 * p)
    return {"P": p, "G": LQR_Q + LQR_A**2 * p, "I": LQR_S + LQR_A * LQR_B * p}


def lqr_zero_policy_p() -> float:
    """``P`` of the policy ``a = 0`` (the greedy policy of ``Q_0`` = ``M a²``, M < 0): ``P = Q + A² P``."""
    return LQR_Q / (1 - LQR_A**2)


@functools.cache
def _car_on_hill_constant_action_values(action: int) -> np.ndarray:
    """The discounted return ``[289]`` of 100-step rollouts (γ = 0.95) playing ``action`` from each node of
    the grid ``linspace(−1, 1, 17) × linspace(−3, 3, 17)`` (row-major), all nodes stepped together, each
    stopped at its first terminal transition."""
    from pbo_tf.envs import car_on_hill as coh

    p, v = np.linspace(-1, 1, 17), np.linspace(-3, 3, 17)
    states = np.stack(np.meshgrid(p, v, indexing="ij"), -1).reshape(-1, 2)
    values = np.zeros(len(states))
    alive = np.ones(len(states), bool)
    for t in range(100):
        states[alive] = coh.step_states(states[alive], np.full(int(alive.sum()), action), np)
        reward, terminated = coh.transition_outcome(states[alive], np)
        values[alive] += 0.95**t * reward
        alive[alive] = ~terminated
        if not alive.any():
            break
    values.flags.writeable = False
    return values


def car_on_hill_constant_action_j(dataset_states: np.ndarray, action: int = 0) -> dict[str, float]:
    """``J`` and ``J_normalised`` of the policy that plays ``action`` everywhere: 100-step rollouts
    (γ = 0.95) from the nodes of the reference grid ``linspace(−1, 1, 17) × linspace(−3, 3, 17)``, each
    weighted by the number of dataset states in the node's cell (2/16 × 6/16, centred on the node)."""
    values = _car_on_hill_constant_action_values(int(action))
    edges_p = np.linspace(-1 - 1 / 16, 1 + 1 / 16, 18)
    edges_v = np.linspace(-3 - 3 / 16, 3 + 3 / 16, 18)
    counts, _, _ = np.histogram2d(dataset_states[:, 0], dataset_states[:, 1], bins=[edges_p, edges_v])
    weighted = values * counts.reshape(-1)
    return {"J": weighted.mean(), "J_normalised": weighted.sum() / counts.sum()}


def bicycle_constant_action(
    n_policies: int, n_rollouts: int, max_steps: int, gamma: float, seed: int, action: int = 0
) -> dict[str, float]:
    """Balancing time (s) and discounted return of policy 0 of ``n_policies`` evaluated together, each
    rollout playing ``action`` from upright, with the noise of step ``t`` the documented ThreeFry draw
    ``rollout_noise(seed, t, [n_policies, n_rollouts])`` (policy 0 takes its first row)."""
    from pbo_tf.envs import bicycle as bk
    from pbo_tf.envs.bicycle.evaluation import rollout_noise

    state = np.zeros((n_rollouts, 4))
    alive = np.ones(n_rollouts, bool)
    steps = np.zeros(n_rollouts)
    returns = np.zeros(n_rollouts)
    for t in range(max_steps):
        if not alive.any():
            break
        noise = rollout_noise(seed, t, (n_policies, n_rollouts), bk.NOISE).numpy()[0]
        next_state, reward, fell = bk.bicycle_step(state, np.full(n_rollouts, action), noise, xp=np)
        returns += np.where(alive, gamma**t * reward, 0.0)
        steps += alive
        state = np.where(alive[:, None], next_state, state)
        alive &= ~fell
    return {"balancing_time_s": steps.mean() * bk.DT, "discounted_return": returns.mean()}


def numpy_mlp_q(q, params, state) -> np.ndarray:
    """``Q(s, ·)`` ``[|A|]`` of one flat `FlatMLPQ` parameter vector from the documented layout (Keras's
    ``get_weights()`` order: each layer's kernel ``[in, out]`` row-major, then its bias), in float64 NumPy;
    ``state`` as the network is fed it (a caller scales it first where the family scales its inputs). A
    `PerActionMLPQ` is fed the state alone and its outputs are ``Q(s, ·)``."""
    from pbo_tf.q import PerActionMLPQ

    def forward(h):
        offset = 0
        for layer, (n_in, n_out) in enumerate(q.layer_shapes):
            kernel = params[offset : offset + n_in * n_out].reshape(n_in, n_out)
            offset += n_in * n_out
            h = h @ kernel + params[offset : offset + n_out]
            offset += n_out
            if layer < len(q.layer_shapes) - 1:
                h = np.maximum(h, 0.0)
        assert offset == q.d
        return h

    state = np.asarray(state, np.float64)
    if isinstance(q, PerActionMLPQ):
        return forward(state)
    return np.array([forward(np.concatenate([state, a]))[0] for a in q.action_values])


def policy_episodes(gym_id: str, policy, n_episodes: int, max_steps: int, gamma: float, seed: int):
    """``n_episodes`` episodes of ``gym_id`` stepped one at a time by hand with ``policy(observation) ->
    action``, episode j reset with the evaluation's seed ``seed · 1 000 003 + j``: ``(metrics, lengths)``,
    the mean discounted return, return and length, and every episode's length."""
    import gymnasium

    per_episode = []
    for j in range(n_episodes):
        env = gymnasium.make(gym_id, max_episode_steps=max_steps)
        obs, _ = env.reset(seed=seed * 1_000_003 + j)
        discounted, total, length = 0.0, 0.0, 0
        while True:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            discounted += gamma**length * reward
            total += reward
            length += 1
            if terminated or truncated:
                break
        env.close()
        per_episode.append((discounted, total, length))
    d, r, n = np.mean(per_episode, axis=0)
    return {"discounted_return": d, "return": r, "episode_length": n}, [e[2] for e in per_episode]


def constant_action_metrics(
    gym_id: str, n_episodes: int, max_steps: int, gamma: float, seed: int, action: int = 0
) -> dict[str, float]:
    """`policy_episodes` of the policy that plays ``action`` throughout."""
    return policy_episodes(gym_id, lambda obs: action, n_episodes, max_steps, gamma, seed)[0]


def lunar_lander_constant_action(
    n_episodes: int, max_steps: int, gamma: float, seed: int, action: int = 0
) -> dict[str, float]:
    """`constant_action_metrics` on gymnasium's ``LunarLander-v3``."""
    return constant_action_metrics("LunarLander-v3", n_episodes, max_steps, gamma, seed, action)


def zero_q_held_out_residual(file, data) -> dict[str, float]:
    """The held-out Bellman residual of ``Q ≡ 0`` on a user's dataset: the mean squared reward of the rows
    of ``file`` (common key names) that the run's training ``data`` (`Transitions`' keys) does not hold,
    found row by row (float32 rows, as the run stores them)."""

    def rows(s, a, r, s2, d):
        return [
            tuple(np.concatenate([np.ravel(x) for x in fields]).tolist())
            for fields in zip(*(np.asarray(v, np.float32) for v in (s, a, r, s2, d)), strict=True)
        ]

    keys = ("observations", "actions", "rewards", "next_observations", "terminals")
    trained = set(rows(*(data[k] for k in ("state", "action", "reward", "next_state", "done"))))
    held = [i for i, row in enumerate(rows(*(file[k] for k in keys))) if row not in trained]
    mean = float(np.mean(np.asarray(file["rewards"], np.float32)[held].astype(np.float64) ** 2))
    return {"bellman_residual": mean, "bellman_residual_rms": float(np.sqrt(mean))}
