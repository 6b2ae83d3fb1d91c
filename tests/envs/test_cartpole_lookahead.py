"""`pbo_tf.envs.gym.cartpole_lookahead`: the exact k-th Bellman iterate of CartPole-v1 from a zero Q.

Ground truth: gymnasium's own CartPole-v1 (its states and terminations step by step), every action sequence
of length k enumerated by brute force with gymnasium copies, and value iteration written out on that tree.
"""

import copy
import itertools

import gymnasium
import numpy as np
import pytest

from pbo_tf.envs.gym import cartpole_lookahead as cl

GAMMA = 0.99


def _gym_at(state):
    env = gymnasium.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    env.state = np.array(state, dtype=np.float64)
    return env


def _states():
    """Starts, states near the pole's limit and near the track's ends, and states that terminate within a
    few steps whatever the actions (the pole falling fast, the cart leaving the track)."""
    rng = np.random.default_rng(0)
    out = [cl.reset_state(s) for s in range(3)]
    out += [tuple(rng.uniform([-2.3, -2, -0.2, -2], [2.3, 2, 0.2, 2])) for _ in range(9)]
    out += [(2.2, 1.5, 0.05, 0.3), (0.0, 0.0, 0.19, 1.2)]
    return out + [
        (0.0, 0.0, 0.205, 2.0),
        (2.39, 2.5, 0.0, 0.0),
        (-2.3, -3.0, 0.1, 1.0),
        (0.5, 0.0, -0.2, -1.5),
    ]


def test_the_step_is_gymnasiums_cartpole_state_for_state():
    env = gymnasium.make("CartPole-v1").unwrapped
    env.reset(seed=5)
    state = tuple(float(v) for v in env.state)
    rng = np.random.default_rng(1)
    for t in range(300):
        action = int(rng.integers(2))
        state, terminated = cl.step(state, action)
        _, reward, gym_terminated, _, _ = env.step(action)
        np.testing.assert_allclose(state, env.state, rtol=0, atol=1e-12, err_msg=str(t))
        assert terminated == gym_terminated and reward == 1.0
        if terminated:
            env.reset(seed=t)
            state = tuple(float(v) for v in env.state)
    assert cl.reset_state(7) == tuple(float(v) for v in (lambda e: (e.reset(seed=7), e.unwrapped.state)[1])(
        gymnasium.make("CartPole-v1")))  # fmt: skip


def _brute_q(state, k):
    """T^k(0)(state, ·) by value iteration over the whole tree of action sequences, stepped by gymnasium."""

    def value(env, depth):  # max_a T^depth(0)(s, a), env at s
        if depth == 0:
            return 0.0
        best = -np.inf
        for action in (0, 1):
            child = copy.deepcopy(env)
            _, reward, terminated, _, _ = child.step(action)
            best = max(best, reward + (0.0 if terminated else GAMMA * value(child, depth - 1)))
        return best

    env = _gym_at(state)
    q = []
    for action in (0, 1):
        child = copy.deepcopy(env)
        _, reward, terminated, _, _ = child.step(action)
        q.append(reward + (0.0 if terminated else GAMMA * value(child, k - 1)) if k > 0 else 0.0)
    return np.array(q)


@pytest.mark.parametrize("k", [0, 1, 2, 5, 7])
def test_lookahead_q_is_value_iteration_over_every_action_sequence(k):
    for state in _states():
        np.testing.assert_allclose(
            cl.lookahead_q(state, k, GAMMA), _brute_q(state, k), rtol=1e-12, err_msg=state
        )


def test_survival_is_the_longest_action_sequence_before_termination():
    quick = 0  # states where every sequence of 8 steps terminates
    for state, depth in itertools.product(_states(), (1, 4, 8)):
        longest = 0
        for actions in itertools.product((0, 1), repeat=depth):
            s, steps = state, 0
            for action in actions:
                s, terminated = cl.step(s, action)
                steps += 1
                if terminated:
                    break
            longest = max(longest, steps)
        assert cl.survival(state, depth) == longest, (state, depth)
        quick += depth == 8 and longest < 8
    assert quick >= 3


def test_greedy_returns_of_the_first_iterate_push_left_throughout():
    # T^1(0) = 1 for both actions everywhere: ties, so "first" is action 0 throughout and "last" action 1.
    for tie, action in (("first", 0), ("last", 1)):
        got = cl.greedy_returns(1, [100, 101], tie=tie)
        want = []
        for seed in (100, 101):
            env = gymnasium.make("CartPole-v1")
            env.reset(seed=seed)
            total, done = 0, False
            while not done:
                _, _, terminated, truncated, _ = env.step(action)
                total, done = total + 1, terminated or truncated
            want.append(total)
        assert got == want
    with pytest.raises(ValueError, match="tie must be"):
        cl.greedy_returns(1, [0], tie="left")


def test_compare_greedy_of_the_exact_iterate_is_right_everywhere_and_of_a_constant_policy_is_caught():
    k = 6
    exact = cl.compare_greedy(lambda s: cl.lookahead_q(s, k), k, [100], max_steps=60)
    assert exact["decisive"] > 0 and exact["right"] == exact["decisive"] and exact["first_wrong"] is None
    assert exact["returns"] == cl.greedy_returns(k, [100], tie="first", max_steps=60)
    left = cl.compare_greedy(lambda s: np.array([1.0, 0.0]), k, [100])  # always action 0
    assert left["returns"] == cl.greedy_returns(1, [100], tie="first")
    assert left["decisive"] > 0 and left["right"] < left["decisive"]
    wrong = left["first_wrong"]
    assert wrong["exact"][1] > wrong["exact"][0] and wrong["learned"] == [1.0, 0.0]


def test_the_command_prints_the_table_at_toy_size(capsys):
    assert cl.main(["--ks=1,3", "--episodes=2", "--max_steps=40"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| k | T^k(0) greedy, ties to 0 |") and len(out) == 4
    first = cl.greedy_returns(1, [100, 101], tie="first", max_steps=40)
    assert out[2].startswith(f"| 1 | {np.mean(first):.1f} {first} |")


def test_the_committed_cartpole_iterates_give_the_results_table():
    """results/gym_online/cartpole_gym_defaults.md's rows for ProDQN and i-DQN seed 0 (K = 20; i-DQN with its
    learning rate annealed to 1e-5), from the summaries' iterates.npz."""
    import os

    root = os.path.join(
        os.path.dirname(__file__), "..", "..", "results", "gym_online", "cartpole_gym_defaults"
    )
    seeds = [100, 101, 102, 103, 104]
    idqn_dir = "idqn_lr_annealed"
    prodqn = cl.compare_greedy(cl.run_q_values(os.path.join(root, "prodqn", "seed_0"), 20), 20, seeds)
    assert (prodqn["returns"], prodqn["decisive"], prodqn["right"]) == ([175, 164, 167, 158, 174], 49, 43)
    assert prodqn["first_wrong"]["state"][0] == 2.377
    idqn = cl.compare_greedy(cl.run_q_values(os.path.join(root, idqn_dir, "seed_0"), 20), 20, seeds)
    assert (idqn["returns"], idqn["decisive"], idqn["right"]) == ([10, 9, 9, 10, 10], 8, 0)
    assert idqn["first_wrong"]["exact"] == [4.901, 18.209] and idqn["first_wrong"]["learned"] == [
        9.938,
        9.918,
    ]
    states = cl.start_region_states(300)
    rows = {
        name: cl.iterate_errors(os.path.join(root, folder, "seed_0"), [0, 5, 20], states)
        for name, folder in (("prodqn", "prodqn"), ("idqn", idqn_dir))
    }
    for name in rows:  # ω_0 has a zero last layer: Q ≡ 0 = T^0(0)
        assert rows[name][0] == dict(k=0, exact_mean=0.0, learned_mean=0.0, rms=0.0, decisive=0, sign_right=0)
    got = {
        name: [(round(r["rms"], 2), r["sign_right"], r["decisive"]) for r in rows[name][1:]] for name in rows
    }
    assert got == {"prodqn": [(0.26, 15, 15), (1.96, 30, 30)], "idqn": [(0.64, 10, 15), (7.79, 20, 30)]}
    assert (
        round(rows["idqn"][2]["exact_mean"], 2) == 17.2 and round(rows["idqn"][2]["learned_mean"], 2) == 10.36
    )
    with pytest.raises(ValueError, match=r"has iterates k = 0..20, not k = 21"):
        cl.run_q_values(os.path.join(root, "idqn", "seed_0"), 21)
