r"""Exact Bellman iterates of CartPole-v1 from a zero Q, and what their greedy policies return.

CartPole-v1 is deterministic (gymnasium's Euler step) and rewards 1 on every step, the terminating one
included, so the k-th Bellman iterate of ``Q_0 = 0`` is

    T^k(0)(s, a) = sum_{i < m} γ^i,   m = the longest survival (at most k steps) of the action sequences
                                          that start with a in s.

`lookahead_q` finds m by depth-first search (the push towards the pole's lean first; it stops at the first
sequence that survives k steps). This is the ground truth for the k-th iterate of an algorithm started at a
zero Q (ProDQN's ω₀ and i-DQN's head 0 have a zero last layer): `greedy_returns` plays the greedy policy of
``T^k(0)`` (ties to one action or at random; where both actions survive k steps the values tie), and
`compare_greedy` plays a learned Q's greedy policy and checks its action against ``T^k(0)`` at every state
it visits.

    python -m pbo_tf.envs.gym.cartpole_lookahead --ks=5,10,20 --episodes=3
    python -m pbo_tf.envs.gym.cartpole_lookahead --ks=20 --run_dirs=runs/cp/gym/prodqn/seed_0

prints, per k, the returns of ``T^k(0)``'s greedy policy and, with ``--run_dirs``, each run's ``ω_k``
(``iterates.npz``) against it: how many visited states have actions of different exact value, and on how
many of those the learned greedy action is the exactly better one; with ``--errors=N`` also the RMS
distance of ``Q_{ω_k}`` to ``T^k(0)`` on N states around the start (`iterate_errors`). The search costs up
to ``2^k`` steps per state: k ≤ 30 takes seconds to minutes, near the track's ends longer.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence

import numpy as np

# gymnasium.envs.classic_control.CartPoleEnv's constants (CartPole-v1)
GRAVITY, CART_MASS, POLE_MASS, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = CART_MASS + POLE_MASS
POLE_MASS_LENGTH = POLE_MASS * HALF_LENGTH
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4
MAX_STEPS = 500  # CartPole-v1's registered episode limit

State = tuple[float, float, float, float]


def step(state: State, action: int) -> tuple[State, bool]:
    """One step of CartPole-v1 (Euler, as gymnasium's): ``(next state, terminated)``."""
    x, x_dot, theta, theta_dot = state
    force = FORCE if action == 1 else -FORCE
    cos, sin = math.cos(theta), math.sin(theta)
    temp = (force + POLE_MASS_LENGTH * theta_dot * theta_dot * sin) / TOTAL_MASS
    theta_acc = (GRAVITY * sin - cos * temp) / (
        HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos * cos / TOTAL_MASS)
    )
    x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS
    x, x_dot = x + TAU * x_dot, x_dot + TAU * x_acc
    theta, theta_dot = theta + TAU * theta_dot, theta_dot + TAU * theta_acc
    terminated = x < -X_LIMIT or x > X_LIMIT or theta < -THETA_LIMIT or theta > THETA_LIMIT
    return (x, x_dot, theta, theta_dot), terminated


def survival(state: State, depth: int) -> int:
    """The most steps (at most ``depth``, the terminating step counted) any action sequence takes from
    ``state`` before the episode terminates."""
    if depth <= 0:
        return 0
    first = 1 if state[2] + 0.5 * state[3] > 0 else 0  # towards the lean first: found sooner, same result
    best = 0
    for action in (first, 1 - first):
        following, terminated = step(state, action)
        steps = 1 if terminated else 1 + survival(following, depth - 1)
        if steps > best:
            best = steps
            if best == depth:
                break
    return best


def lookahead_q(state: State, k: int, gamma: float = 0.99) -> np.ndarray:
    """``T^k(0)(state, ·)``, the two actions' exact k-th Bellman iterate of the zero Q."""
    values = []
    for action in (0, 1):
        following, terminated = step(state, action)
        m = 1 if terminated or k <= 1 else 1 + survival(following, k - 1)
        values.append(sum(gamma**i for i in range(m)) if k > 0 else 0.0)
    return np.array(values)


def reset_state(seed: int) -> State:
    """The state gymnasium's ``CartPole-v1`` starts from after ``reset(seed=seed)``."""
    import gymnasium

    env = gymnasium.make("CartPole-v1")
    env.reset(seed=int(seed))
    state = tuple(float(v) for v in env.unwrapped.state)
    env.close()
    return state


def greedy_returns(
    k: int, seeds: Sequence[int], tie: str = "first", max_steps: int = MAX_STEPS, gamma: float = 0.99
) -> list[int]:
    """Returns of ``T^k(0)``'s greedy policy from ``reset(seed)`` for each seed; ``tie``: the action taken
    where the two values are equal, ``"first"`` (0, as `numpy.argmax`), ``"last"`` (1) or ``"random"``
    (drawn with a generator seeded by the episode's seed)."""
    if tie not in ("first", "last", "random"):
        raise ValueError(f"tie must be 'first', 'last' or 'random', got {tie!r}")
    returns = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        state, total = reset_state(seed), 0
        for _ in range(max_steps):
            q = lookahead_q(state, k, gamma)
            if q[0] != q[1]:
                action = int(np.argmax(q))
            else:
                action = int(rng.integers(2)) if tie == "random" else int(tie == "last")
            state, terminated = step(state, action)
            total += 1
            if terminated:
                break
        returns.append(total)
    return returns


def compare_greedy(
    q_values: Callable[[State], np.ndarray],
    k: int,
    seeds: Sequence[int],
    max_steps: int = MAX_STEPS,
    gamma: float = 0.99,
) -> dict:
    """Plays the greedy policy of ``q_values`` (a state's two action values; first action on ties) from
    ``reset(seed)`` for each seed and checks it against ``T^k(0)`` at every visited state.

    Returns:
      ``returns`` (per seed), ``visited`` (states), ``decisive`` (visited states whose two actions have
      different ``T^k(0)`` values), ``right`` (of those, where the learned action is the exactly better
      one) and ``first_wrong`` (the first visited state where it is not, with both Q's values, or None).
    """
    out = {"returns": [], "visited": 0, "decisive": 0, "right": 0, "first_wrong": None}
    for seed in seeds:
        state, total = reset_state(seed), 0
        for t in range(max_steps):
            learned = np.asarray(q_values(state))
            action = int(np.argmax(learned))
            exact = lookahead_q(state, k, gamma)
            out["visited"] += 1
            if exact[0] != exact[1]:
                out["decisive"] += 1
                if exact[action] > exact[1 - action]:
                    out["right"] += 1
                elif out["first_wrong"] is None:
                    out["first_wrong"] = dict(
                        seed=int(seed), step=t, state=[round(v, 3) for v in state],
                        exact=[round(float(v), 3) for v in exact],
                        learned=[round(float(v), 3) for v in learned],
                    )  # fmt: skip
            state, terminated = step(state, action)
            total += 1
            if terminated:
                break
        out["returns"].append(total)
    return out


def start_region_states(n: int = 300, seed: int = 0) -> np.ndarray:
    """``n`` states drawn uniformly around the start: x, ẋ ∈ [−1, 1], θ ∈ [−0.15, 0.15], θ̇ ∈ [−1.5, 1.5]."""
    rng = np.random.default_rng(seed)
    return rng.uniform([-1.0, -1.0, -0.15, -1.5], [1.0, 1.0, 0.15, 1.5], size=(n, 4))


def exact_values(states: np.ndarray, k: int, gamma: float = 0.99) -> np.ndarray:
    """``T^k(0)`` at every state of ``states`` (``[n, 4]``): ``[n, 2]``."""
    return np.array([lookahead_q(tuple(float(v) for v in s), k, gamma) for s in states])


def iterate_errors(
    run_dir: str,
    ks: Sequence[int],
    states: np.ndarray,
    gamma: float = 0.99,
    exact: Mapping[int, np.ndarray] | None = None,
) -> list[dict]:
    """How far a finished CartPole-v1 run's ``ω_k`` (``iterates.npz``) is from ``T^k(0)`` on ``states``
    (``[n, 4]``), per k: the mean of each over states and actions, the RMS of their difference, and on the
    decisive states (where the exact actions' values differ) how many the learned action difference has the
    exact one's sign. ``exact``: `exact_values` of these states by k, when already computed (the search is
    the costly part). Imports TensorFlow."""
    import tensorflow as tf

    iterates, q = _run_iterates(run_dir, ks)
    learned_all = q.q_all(tf.constant(iterates, tf.float32), tf.constant(states, tf.float32)).numpy()
    rows = []
    for k in ks:
        exact_k = exact[k] if exact is not None and k in exact else exact_values(states, k, gamma)
        learned = learned_all[k]
        decisive = exact_k[:, 1] != exact_k[:, 0]
        signs = np.sign(learned[decisive, 1] - learned[decisive, 0]) == np.sign(
            exact_k[decisive, 1] - exact_k[decisive, 0]
        )
        rows.append(
            dict(
                k=int(k), exact_mean=float(exact_k.mean()), learned_mean=float(learned.mean()),
                rms=float(np.sqrt(np.mean((learned - exact_k) ** 2))), decisive=int(decisive.sum()),
                sign_right=int(signs.sum()),
            )
        )  # fmt: skip
    return rows


def run_q_values(run_dir: str, k: int) -> Callable[[State], np.ndarray]:
    """The action values of a finished CartPole-v1 run's ``ω_k`` (``iterates.npz``; imports TensorFlow)."""
    import tensorflow as tf

    iterates, q = _run_iterates(run_dir, [k])
    params = tf.constant(iterates[k : k + 1], tf.float32)
    return lambda state: q.q_all(params, tf.constant([state], tf.float32))[0, 0].numpy()


def _run_iterates(run_dir: str, ks: Sequence[int]):
    """``(iterates [n, d], the run's Q family)`` of a finished run; a `ValueError` when it has no ω_k for
    some k of ``ks``."""
    from pbo_tf.experiments.reader import RunReader

    run = RunReader(run_dir)
    iterates = run.iterates()
    for k in ks:
        if not 0 <= k < len(iterates):
            raise ValueError(f"{run_dir!r} has iterates k = 0..{len(iterates) - 1}, not k = {k}")
    return iterates, run.experiment().q_family()


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", default="5,10,20", help="comma-separated k")
    parser.add_argument("--episodes", type=int, default=3, help="episodes (reset seeds 100, 101, ...)")
    parser.add_argument("--max_steps", type=int, default=MAX_STEPS)
    parser.add_argument("--run_dirs", default="", help="comma-separated finished CartPole-v1 run folders")
    parser.add_argument(
        "--errors", type=int, default=0, help="with --run_dirs: ω_k against T^k(0) on this many start states"
    )
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",") if k]
    seeds = [100 + i for i in range(args.episodes)]
    print(f"| k | T^k(0) greedy, ties to 0 | ties to 1 | ties at random |  ({len(seeds)} episodes, "
          f"reset seeds {seeds[0]}..{seeds[-1]}, cut at {args.max_steps})")  # fmt: skip
    print("|---|---|---|---|")
    for k in ks:
        cells = [greedy_returns(k, seeds, tie, args.max_steps) for tie in ("first", "last", "random")]
        print(f"| {k} | " + " | ".join(f"{np.mean(c):.1f} {c}" for c in cells) + " |", flush=True)
    run_dirs = [d for d in args.run_dirs.split(",") if d]
    if run_dirs:
        print("\n| run | k | return | visited | decisive | learned right | first wrong |")
        print("|---|---|---|---|---|---|---|")
        for run_dir in run_dirs:
            for k in ks:
                c = compare_greedy(run_q_values(run_dir, k), k, seeds, args.max_steps)
                print(f"| {run_dir} | {k} | {np.mean(c['returns']):.1f} {c['returns']} | {c['visited']} | "
                      f"{c['decisive']} | {c['right']} | {c['first_wrong']} |", flush=True)  # fmt: skip
    if run_dirs and args.errors:
        states = start_region_states(args.errors)
        exact = {k: exact_values(states, k) for k in ks}  # once for every run
        print(f"\n| run | k | T^k(0) mean | learned mean | RMS | sign right on decisive |  ({args.errors} "
              "states)")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for run_dir in run_dirs:
            for row in iterate_errors(run_dir, ks, states, exact=exact):
                print(f"| {run_dir} | {row['k']} | {row['exact_mean']:.2f} | {row['learned_mean']:.2f} | "
                      f"{row['rms']:.2f} | {row['sign_right']}/{row['decisive']} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
