"""Tests of the car-on-hill dynamics, gymnasium env, dataset, evaluation grid and exact BFS optimum."""

import itertools
import os
import re

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from scipy.integrate import solve_ivp

from pbo_tf.envs import car_on_hill as coh

ENV_ID = "pbo_tf/CarOnHill-v0"
GAMMA = coh.GAMMA


# ------------------------------------------------------------------------------------------ dynamics
def test_hill_and_its_derivatives_match_the_formulas_and_finite_differences():
    p = np.array([-0.8, -0.5, -0.1, 0.0, 0.2, 0.7])
    expected = np.where(p < 0, p * p + p, p / np.sqrt(1 + 5 * p * p))
    np.testing.assert_allclose(coh.hill(p), expected, rtol=0, atol=1e-15)
    d1, d2 = coh.hill_derivatives(p)
    eps = 1e-6
    # One-sided differences stay on the branch of p (p = 0 belongs to the p >= 0 branch).
    fd1 = (coh.hill(p + eps) - coh.hill(p - eps)) / (2 * eps)
    fd1[p == 0] = (coh.hill(np.array([eps])) - coh.hill(np.array([0.0])))[0] / eps
    np.testing.assert_allclose(d1, fd1, atol=1e-5)
    fd2 = (coh.hill_derivatives(p + eps)[0] - coh.hill_derivatives(p - eps)[0]) / (2 * eps)
    fd2[p == 0] = (coh.hill_derivatives(np.array([eps]))[0][0] - 1.0) / eps
    np.testing.assert_allclose(d2, fd2, atol=1e-4)
    # H and H' are continuous at the junction, H'' jumps from 2 to 0.
    left, right = np.array([-1e-12]), np.array([0.0])
    assert abs(coh.hill(left)[0] - coh.hill(right)[0]) < 1e-11
    assert coh.hill_derivatives(left)[0][0] == pytest.approx(1.0) and coh.hill_derivatives(right)[0][0] == 1.0
    assert coh.hill_derivatives(left)[1][0] == 2.0 and coh.hill_derivatives(right)[1][0] == 0.0


def test_acceleration_at_hand_computed_points():
    # Bottom of the valley: H'(-0.5) = 0, so p'' = u / m.
    assert coh.acceleration(np.array(-0.5), np.array(0.0), 4.0) == pytest.approx(4.0)
    # p = 0 at rest: H' = 1, H'' = 0 -> (u - g) / 2.
    assert coh.acceleration(np.array(0.0), np.array(0.0), 4.0) == pytest.approx((4.0 - 9.81) / 2)
    # p = -1, v = 2, u = -4: H' = -1, H'' = 2 -> (-4 + 9.81 + 8) / 2.
    assert coh.acceleration(np.array(-1.0), np.array(2.0), -4.0) == pytest.approx((-4 + 9.81 + 8) / 2)
    # p = 0.5, v = 1, u = 4: H' = 1.5^-1.5 / ... computed from the formula by hand.
    s = 1 + 5 * 0.25
    d1, d2 = s**-1.5, -15 * 0.5 * s**-2.5
    expected = (4 - 9.81 * d1 - 1.0 * d1 * d2) / (1 + d1 * d1)
    assert coh.acceleration(np.array(0.5), np.array(1.0), 4.0) == pytest.approx(expected, rel=1e-14)


def _solve_ivp_trajectory(state, actions):
    """High-accuracy reference: adaptive DOP853 (rtol 1e-10) over each 0.1 s step."""

    def rhs(_, y, u):
        return [y[1], coh.acceleration(y[0], y[1], u, coh.SCALAR)]

    y, out = np.asarray(state, dtype=np.float64), []
    for a in actions:
        sol = solve_ivp(
            rhs, (0.0, coh.DT), y, args=(coh.ACTION_FORCES[a],), method="DOP853", rtol=1e-10, atol=1e-12
        )
        y = sol.y[:, -1]
        out.append(y)
    return np.array(out)


def test_rk4_trajectories_match_solve_ivp_to_1e6_including_crossings_of_the_junction():
    rng = np.random.default_rng(0)
    starts = np.stack([rng.uniform(-0.8, 0.8, 10), rng.uniform(-2.0, 2.0, 10)], axis=1)
    starts[0] = coh.RESET_STATE
    starts[1] = (-0.05, 1.5)  # crosses p = 0 in the first step
    actions = rng.integers(0, 2, (10, 8))
    states, trajectory = starts, []
    for k in range(actions.shape[1]):
        states = coh.step_states(states, actions[:, k])
        trajectory.append(states)
    trajectory = np.stack(trajectory, axis=1)
    crossings = 0
    for i in range(len(starts)):
        reference = _solve_ivp_trajectory(starts[i], actions[i])
        # Compare while the reference is inside the state space (the episode would have ended after).
        inside = np.cumprod(np.all(np.abs(reference) <= [1.0, 3.0], axis=1)).astype(bool)
        inside[0] = True
        np.testing.assert_allclose(
            trajectory[i][inside], reference[inside], rtol=0, atol=1e-6, err_msg=str(i)
        )
        crossings += np.count_nonzero(
            np.diff(np.sign(np.concatenate([[starts[i, 0]], reference[inside, 0]])))
        )
    assert crossings >= 5  # the junction p = 0 is crossed many times: the split sub-steps are exercised


def test_naive_rk4_without_crossing_handling_would_be_far_less_accurate():
    # Ground truth for why sub-steps are split at p = 0: the same RK4 that evaluates the hill by the sign of p
    # at each stage errs by > 1e-4 on a single crossing step, ours by ~1.5e-7 (the RK4 truncation error, as
    # far from the junction).
    def naive(p, v, u, n=coh.N_SUBSTEPS):
        h = coh.DT / n
        for _ in range(n):
            k1p, k1v = v, coh.acceleration(p, v, u)
            k2p = v + 0.5 * h * k1v
            k2v = coh.acceleration(p + 0.5 * h * k1p, k2p, u)
            k3p = v + 0.5 * h * k2v
            k3v = coh.acceleration(p + 0.5 * h * k2p, k3p, u)
            k4p = v + h * k3v
            k4v = coh.acceleration(p + h * k3p, k4p, u)
            p, v = p + h / 6 * (k1p + 2 * k2p + 2 * k3p + k4p), v + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
        return np.array([p, v])

    start = np.array([-0.0123, 2.5])
    reference = _solve_ivp_trajectory(start, [1])[0]
    ours = coh.step_states(start[None], np.array([1]))[0]
    assert np.max(np.abs(ours - reference)) < 3e-7
    assert np.max(np.abs(naive(np.array(start[0]), np.array(start[1]), 4.0) - reference)) > 1e-4


def test_scalar_numpy_and_batched_paths_agree_bitwise():
    rng = np.random.default_rng(1)
    states = np.stack([rng.uniform(-1, 1, 50), rng.uniform(-3, 3, 50)], axis=1)
    actions = rng.integers(0, 2, 50)
    batched = coh.step_states(states, actions)
    scalar = np.array(
        [coh.step_pv(p, v, int(a), coh.SCALAR) for (p, v), a in zip(states, actions, strict=True)]
    )
    np.testing.assert_array_equal(batched, scalar)
    # Any batch shape.
    np.testing.assert_array_equal(
        coh.step_states(states.reshape(5, 10, 2), actions.reshape(5, 10)), batched.reshape(5, 10, 2)
    )


def test_transition_outcome_rules():
    next_states = np.array(
        [
            [0.0, 0.0],  # inside: 0, not terminal
            [-1.01, 0.0],  # left of the hill: -1
            [0.5, 3.01],  # too fast: -1
            [0.5, -3.01],  # too fast backwards: -1
            [1.01, 2.9],  # top at admissible speed: +1
            [1.01, 3.2],  # top too fast: -1
            [1.0, 3.0],  # on the boundary, still inside: 0
            [-1.0, -3.0],  # idem
        ]
    )
    reward, terminated = coh.transition_outcome(next_states)
    np.testing.assert_array_equal(reward, [0, -1, -1, -1, 1, -1, 0, 0])
    np.testing.assert_array_equal(terminated, [False, True, True, True, True, True, False, False])


# ------------------------------------------------------------------------------------------ environment
def test_check_env_passes_and_the_registered_id_has_a_100_step_limit():
    check_env(coh.CarOnHillEnv(), skip_render_check=True)
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(
            id=ENV_ID, entry_point="pbo_tf.envs.car_on_hill:CarOnHillEnv", max_episode_steps=100
        )
    env = gymnasium.make(ENV_ID)
    assert isinstance(env.unwrapped, coh.CarOnHillEnv)
    assert env.spec.max_episode_steps == 100
    check_env(env.unwrapped, skip_render_check=True)


def test_reset_step_and_validation():
    env = coh.CarOnHillEnv()
    with pytest.raises(RuntimeError):
        env.step(0)
    obs, info = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs.tolist() == [-0.5, 0.0] and info == {}
    obs, reward, terminated, truncated, info = env.step(1)
    expected = coh.step_states(np.array([coh.RESET_STATE]), np.array([1]))[0]
    np.testing.assert_array_equal(obs, expected.astype(np.float32))
    np.testing.assert_array_equal(env.state, expected)
    assert (reward, terminated, truncated, info) == (0.0, False, False, {})
    with pytest.raises(ValueError, match="2"):
        env.step(2)
    obs, _ = env.reset(options={"state": (0.95, 2.5)})
    np.testing.assert_array_equal(obs, np.float32([0.95, 2.5]))
    obs, reward, terminated, truncated, _ = env.step(1)
    assert reward == 1.0 and terminated and not truncated and obs[0] > 1.0
    assert env.observation_space.contains(obs)
    with pytest.raises(RuntimeError, match="terminal"):
        env.step(0)
    for bad in ((1.5, 0.0), (0.0, -3.5), (np.nan, 0.0), (0.1,), "x"):
        with pytest.raises(ValueError, match=re.escape("options['state']")):
            env.reset(options={"state": bad})


def test_observations_after_terminal_steps_stay_inside_the_observation_box():
    # The worst cases start on the border of the state space; a dense border + interior sample, both actions.
    line = np.linspace(-1, 1, 81)
    vel = np.linspace(-3, 3, 121)
    border = np.concatenate(
        [
            np.stack([line, np.full_like(line, 3.0)], 1),
            np.stack([line, np.full_like(line, -3.0)], 1),
            np.stack([np.full_like(vel, 1.0), vel], 1),
            np.stack([np.full_like(vel, -1.0), vel], 1),
        ]
    )
    states = np.concatenate([border, coh.grid_centres()])
    for a in (0, 1):
        nxt = coh.step_states(states, np.full(len(states), a))
        assert np.all(nxt >= coh.OBS_LOW) and np.all(nxt <= coh.OBS_HIGH)
        # ... and the Box is not absurdly loose: terminal states leave the state space by < 1 in p, < 3 in v.
        assert np.all(np.abs(nxt[:, 0]) < 1.6) and np.all(np.abs(nxt[:, 1]) < 6.0)


# ------------------------------------------------------------------------------------------ dataset
@pytest.fixture(scope="module")
def dataset():
    return coh.collect_dataset(seed=0)


def test_dataset_layout_dtypes_and_dynamics_consistency(dataset):
    assert len(dataset) == 5500
    assert dataset.state.shape == (5500, 2) and dataset.state.dtype == np.float32
    assert dataset.next_state.shape == (5500, 2) and dataset.next_state.dtype == np.float32
    assert dataset.action.dtype == np.int32 and set(np.unique(dataset.action)) == {0, 1}
    assert 0.45 < dataset.action.mean() < 0.55
    np.testing.assert_array_equal(dataset.state[0], np.float32(coh.RESET_STATE))
    np.testing.assert_array_equal(dataset.state[4500], np.float32(coh.ORIENTED_START))
    # Rewards and done flags are those of the next states; positive rewards exist (paper's requirement).
    reward, terminated = coh.transition_outcome(dataset.next_state.astype(np.float64))
    np.testing.assert_array_equal(dataset.reward, reward)
    np.testing.assert_array_equal(dataset.done, terminated.astype(np.float32))
    assert np.sum(dataset.reward == 1) > 0 and np.sum(dataset.reward == -1) > 0
    # Next states follow the dynamics (the float32 rounding of the stored state moves them by < 1e-5).
    recomputed = coh.step_states(dataset.state.astype(np.float64), dataset.action)
    np.testing.assert_allclose(dataset.next_state, recomputed, atol=1e-5)
    # All stored states are non-terminal states of the state space.
    assert np.all(np.abs(dataset.state) <= [1.0, 3.0])


def test_dataset_episodes_chain_and_reset_per_the_protocol(dataset):
    chained = np.all(dataset.state[1:] == dataset.next_state[:-1], axis=1)
    starts = np.flatnonzero(~chained) + 1  # indices where a new episode begins (besides 0 and 4500)
    ends = np.flatnonzero(dataset.done == 1)
    # Every termination is followed by a reset; a non-terminal break only happens after 100 steps or at 4500.
    assert set(ends[ends < 5499] + 1) <= set(starts) | {4500}
    boundaries = np.concatenate([[0], starts, [5500]])
    lengths = np.diff(boundaries)
    assert lengths.max() <= 100
    for lo, hi in zip(boundaries[:-1], boundaries[1:], strict=True):
        if dataset.done[hi - 1] == 0 and hi not in (4500, 5500):
            assert hi - lo == 100
    random_starts = dataset.state[boundaries[:-1][boundaries[:-1] < 4500]]
    np.testing.assert_array_equal(
        random_starts, np.tile(np.float32(coh.RESET_STATE), (len(random_starts), 1))
    )
    # Oriented episodes start on the segment between (0.1, 1.3) and (0.5, 0.8), spread along it.
    oriented = dataset.state[boundaries[:-1][boundaries[:-1] >= 4500]].astype(np.float64)
    a, b = np.array(coh.ORIENTED_START), np.array(coh.ORIENTED_END)
    alpha = (oriented - a) @ (b - a) / np.sum((b - a) ** 2)
    np.testing.assert_allclose(a + alpha[:, None] * (b - a), oriented, atol=1e-6)
    assert len(oriented) >= 10 and alpha.min() >= 0 and alpha.max() <= 1 and np.ptp(alpha[1:]) > 0.5


def test_dataset_is_reproducible_from_the_seed(dataset):
    small_a = coh.collect_dataset(seed=0, n_random=200, n_oriented=50)
    small_b = coh.collect_dataset(seed=1, n_random=200, n_oriented=0)
    # Each phase has its own generator: prefixes of a phase do not depend on the other sizes.
    for name in ("state", "action", "reward", "next_state", "done"):
        np.testing.assert_array_equal(getattr(small_a, name)[:200], getattr(dataset, name)[:200])
        np.testing.assert_array_equal(getattr(small_a, name)[200:], getattr(dataset, name)[4500:4550])
    assert not np.array_equal(small_a.action[:200], small_b.action)


def test_dataset_matches_stepping_the_env():
    # The vectorised collection equals a plain loop over the gymnasium env with the same actions: exactly in
    # the random phase (its episodes start at (-0.5, 0), exact in float32), to float32 rounding afterwards
    # (oriented starts are restarted from their float32 copy).
    data = coh.collect_dataset(seed=5, n_random=100, n_oriented=40)
    env = coh.CarOnHillEnv()
    for i in range(len(data)):
        if i in (0, 100) or data.done[i - 1] or not np.array_equal(data.state[i], data.next_state[i - 1]):
            env.reset(options={"state": data.state[i].astype(np.float64)})
        obs, reward, terminated, truncated, _ = env.step(int(data.action[i]))
        if i < 100:
            np.testing.assert_array_equal(obs, data.next_state[i])
        else:
            np.testing.assert_allclose(obs, data.next_state[i], atol=1e-5)
        assert reward == data.reward[i] and terminated == bool(data.done[i]) and not truncated


# ------------------------------------------------------------------------------------------ grid
@pytest.mark.parametrize("layout", coh.LAYOUTS)
def test_grid_centres_order_and_own_cells(layout):
    centres = coh.grid_centres(layout)
    assert centres.shape == (289, 2)
    positions, velocities = coh.grid_axes(layout)
    np.testing.assert_array_equal(centres[18], [positions[1], velocities[1]])
    np.testing.assert_array_equal(centres[1], [positions[0], velocities[1]])  # velocity varies fastest
    np.testing.assert_array_equal(coh.cell_indices(centres, layout), np.arange(289))
    if layout == "reference":
        np.testing.assert_allclose(positions, np.linspace(-1, 1, 17))
        np.testing.assert_allclose(velocities, np.linspace(-3, 3, 17))
    else:
        np.testing.assert_allclose(positions[[0, -1]], [-1 + 1 / 17, 1 - 1 / 17])
        np.testing.assert_allclose(velocities[[0, 8]], [-3 + 3 / 17, 0.0], atol=1e-15)


@pytest.mark.parametrize("layout", coh.LAYOUTS)
def test_state_counts_match_a_2d_histogram(layout, dataset):
    edges_p, edges_v = coh.grid_edges(layout)
    rng = np.random.default_rng(3)
    states = np.concatenate([dataset.state, rng.uniform([-1.3, -4], [1.3, 4], (2000, 2))])
    hist, _, _ = np.histogram2d(states[:, 0], states[:, 1], bins=[edges_p, edges_v])
    counts = coh.state_counts(states, layout)
    np.testing.assert_array_equal(counts, hist.reshape(-1).astype(np.int64))
    cells = coh.cell_indices(states, layout)
    outside = (
        (states[:, 0] < edges_p[0]) | (states[:, 0] > edges_p[-1]) | (np.abs(states[:, 1]) > edges_v[-1])
    )
    np.testing.assert_array_equal(cells == -1, outside)
    clipped = coh.cell_indices(states, layout, outside="clip")
    np.testing.assert_array_equal(clipped[~outside], cells[~outside])
    far = np.array([[5.0, 10.0], [-5.0, -10.0]])
    np.testing.assert_array_equal(coh.cell_indices(far, layout, outside="clip"), [288, 0])
    assert coh.state_counts(dataset.state, layout).sum() == 5500  # every dataset state lies in a cell


# ------------------------------------------------------------------------------------------ exact optimum
def brute_force_values(states, depth, first_action=None, horizon=coh.HORIZON):
    """Independent exhaustive search: all 2^depth sequences simulated to their end, from every state.

    Returns V* (or Q*(s, first_action)) per state over ``horizon`` steps; NaN where the answer is not
    resolved within ``depth < horizon`` steps.
    """
    seqs = np.array(list(itertools.product((0, 1), repeat=depth)))
    if first_action is not None:
        seqs = seqs[seqs[:, 0] == first_action]
    states = np.asarray(states, dtype=np.float64)
    n, m = len(states), len(seqs)
    s = np.repeat(states, m, axis=0)  # row i * m + j: state i, sequence j
    actions = np.tile(seqs, (n, 1))
    end_depth = np.zeros(n * m, dtype=int)
    end_reward = np.zeros(n * m)
    for k in range(depth):
        nxt = coh.step_states(s, actions[:, k])
        reward, terminated = coh.transition_outcome(nxt)
        new = terminated & (end_depth == 0)
        end_depth[new], end_reward[new] = k + 1, reward[new]
        s = np.where((end_depth == 0)[:, None], nxt, s)
    end_depth, end_reward = end_depth.reshape(n, m), end_reward.reshape(n, m)
    values = np.full(n, np.nan)
    for i in range(n):
        if np.any(end_reward[i] == 1):
            values[i] = GAMMA ** (end_depth[i][end_reward[i] == 1].min() - 1)
        elif np.all(end_depth[i] > 0):
            values[i] = -(GAMMA ** (end_depth[i].max() - 1))
        elif depth == horizon:
            values[i] = 0.0
    return values


def test_brute_force_helper_on_obvious_states():
    v = brute_force_values([[0.95, 2.5], [-0.99, -2.9], [-0.5, 0.0]], 3)
    assert v[0] == 1.0 and v[1] == -1.0 and np.isnan(v[2])


# States whose exact answer is found within 10 steps: successes and failures at several depths.
SMALL_DEPTH_STATES = np.array(
    [
        [0.95, 2.5],  # top in 1 step
        [0.5, 2.0],  # 3
        [0.0, 2.25],  # 4
        [0.25, 1.0],  # 7
        [0.75, -0.75],  # 9
        [-0.875, -2.25],  # crashes at once
        [0.5, -2.25],  # cannot avoid crashing, lasts 4 steps at best
        [0.875, -3.0],  # 5
        [1.0, -3.0],  # 6
    ]
)


def test_breadth_first_search_agrees_with_brute_force_on_small_depth_states():
    outcome, depth = coh.first_passage(SMALL_DEPTH_STATES, horizon=coh.HORIZON)
    assert np.all(depth <= 10), depth
    assert set(outcome.tolist()) == {1, -1} and len(set(depth.tolist())) >= 6  # varied, non-trivial cases
    values = coh.values_from_first_passage(outcome, depth)
    np.testing.assert_allclose(values, brute_force_values(SMALL_DEPTH_STATES, 10), rtol=0, atol=1e-15)


def test_lattice_merging_does_not_change_the_optimum():
    cells = np.arange(0, 289, 11)  # a spread sample of 27 cells; the depth is capped to keep the test fast
    states = coh.grid_centres()[cells]
    base = coh.first_passage(states, horizon=12, prune=False)
    for other in (
        coh.first_passage(states, horizon=12, prune=False, lattice=coh.BFS_LATTICE / 10),
        coh.first_passage(states, horizon=12, prune=False, lattice=None),
    ):
        np.testing.assert_array_equal(base[0], other[0])
        np.testing.assert_array_equal(base[1], other[1])
    assert np.sum(base[0] != 0) >= 12  # about half the sampled cells are resolved within 12 steps
    # A much coarser lattice does merge states (the merging is active, not a no-op).
    stats = {}
    coh.first_passage(np.array([coh.RESET_STATE]), horizon=10, lattice=0.05, stats=stats)
    assert stats["merged"] > 0 and len(stats["frontier_sizes"]) == 10


def test_branch_and_bound_pruning_is_exact_and_active():
    states = coh.grid_centres()[np.arange(3, 289, 12)]
    stats = {}
    pruned = coh.first_passage(states, horizon=13, stats=stats)
    exhaustive = coh.first_passage(states, horizon=13, prune=False)
    np.testing.assert_array_equal(pruned[0], exhaustive[0])
    np.testing.assert_array_equal(pruned[1], exhaustive[1])
    assert stats["pruned"] > 0 and np.any((pruned[0] == 1) & (pruned[1] >= 11))


def test_can_reach_top_is_a_sound_necessary_condition():
    # Ground truth by enumeration: whenever some sequence reaches p > 1 within k steps, the bound says so.
    rng = np.random.default_rng(7)
    starts = np.stack([rng.uniform(-1, 1, 300), rng.uniform(-3, 3, 300)], axis=1)
    seqs = np.array(list(itertools.product((0, 1), repeat=6)))
    s = np.repeat(starts, len(seqs), axis=0)
    actions = np.tile(seqs, (len(starts), 1))
    first_top = np.full(len(s), 99)
    alive = np.ones(len(s), dtype=bool)
    for k in range(6):
        s = coh.step_states(s, actions[:, k])
        reward, terminated = coh.transition_outcome(s)
        first_top[alive & (reward == 1)] = np.minimum(first_top[alive & (reward == 1)], k + 1)
        alive &= ~terminated
    best = first_top.reshape(len(starts), len(seqs)).min(axis=1)
    reachable = best <= 6
    assert reachable.sum() > 30
    for k in range(1, 7):
        hit = best <= k
        assert np.all(coh.can_reach_top(starts[hit, 0], starts[hit, 1], k)), k
    # ... and it is informative: it rules out most states for one step, many for three.
    assert np.mean(~coh.can_reach_top(starts[:, 0], starts[:, 1], 1)) > 0.7
    assert np.mean(~coh.can_reach_top(starts[:, 0], starts[:, 1], 3)) > 0.3


def test_q_star_consistency_on_a_subset_of_states():
    states = SMALL_DEPTH_STATES
    q = coh.optimal_q_values(states)
    v = coh.optimal_state_values(states)  # searched independently, from the states themselves
    np.testing.assert_allclose(v, q.max(axis=1), rtol=0, atol=1e-15)
    assert np.all(np.abs(q) <= 1.0)
    compared = 0
    for a in (0, 1):
        brute = brute_force_values(states, 10, first_action=a)
        resolved = ~np.isnan(brute)
        np.testing.assert_allclose(q[resolved, a], brute[resolved], rtol=0, atol=1e-15)
        compared += resolved.sum()
    assert compared >= 14
    # One step reaches the top from (0.95, 2.5), with either action: Q* = V* = 1.
    np.testing.assert_array_equal(q[0], [1.0, 1.0])
    # Bellman: for a non-terminal best first action, V*(s) = gamma V*(s').
    nxt = coh.step_states(states, q.argmax(axis=1))
    live = ~coh.transition_outcome(nxt)[1]
    assert live.sum() >= 4
    np.testing.assert_allclose(
        v[live], GAMMA * coh.optimal_state_values(nxt[live], coh.HORIZON - 1), rtol=0, atol=1e-15
    )


def test_optimal_values_on_a_short_horizon_match_brute_force_and_are_cached(tmp_path, monkeypatch):
    horizon = 4
    v_star, q_star = coh.optimal_values(horizon=horizon, cache_dir=str(tmp_path), backend="numpy")
    centres = coh.grid_centres()
    assert v_star.shape == (289,) and q_star.shape == (289, 2)
    np.testing.assert_allclose(
        v_star, brute_force_values(centres, horizon, None, horizon), rtol=0, atol=1e-15
    )
    np.testing.assert_allclose(
        q_star[:, 0], brute_force_values(centres, horizon, 0, horizon), rtol=0, atol=1e-15
    )
    np.testing.assert_array_equal(v_star, q_star.max(axis=1))
    assert np.all(np.abs(v_star) <= 1) and np.any(v_star == 0) and np.any(v_star > 0) and np.any(v_star < 0)
    path = coh.optimal_values_cache_path(str(tmp_path), horizon=horizon)
    assert os.path.exists(path)
    with np.load(path, allow_pickle=False) as data:
        assert int(data["horizon"]) == horizon and str(data["layout"]) == coh.DEFAULT_LAYOUT

    def fail(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(coh.optimum, "optimal_q_values", fail)  # the name `optimal_values` looks up
    v2, q2 = coh.optimal_values(horizon=horizon, cache_dir=str(tmp_path))
    np.testing.assert_array_equal(v2, v_star)
    np.testing.assert_array_equal(q2, q_star)
    monkeypatch.undo()
    with open(path, "wb") as f:
        f.write(b"not an npz")
    with pytest.warns(UserWarning, match="unreadable cache"):
        v3, _ = coh.optimal_values(horizon=horizon, cache_dir=str(tmp_path), backend="numpy")
    np.testing.assert_array_equal(v3, v_star)
    monkeypatch.setenv("PBO_TF_CACHE", str(tmp_path / "env"))
    assert coh.default_cache_dir() == str(tmp_path / "env")


def test_the_shipped_optimum_matches_brute_force_on_the_cells_it_resolves(monkeypatch):
    """The packaged V*/Q* file (the problem's `optimal_J` comes from it) against the exhaustive search over
    every action sequence of 8 steps, on every other grid cell: where the search resolves a cell (some
    sequence reaches the top, or every sequence has crashed, within 8 steps) the file holds that value."""

    def fail(*args, **kwargs):
        raise AssertionError("the shipped file should have been read, not recomputed")

    monkeypatch.setattr(coh.optimum, "optimal_q_values", fail)
    path = coh.optimal_values_cache_path(coh.PACKAGED_DATA_DIR)
    assert os.path.exists(path)
    v_star, q_star = coh.optimal_values(cache_dir=coh.PACKAGED_DATA_DIR)
    cells = np.arange(0, 289, 2)
    states = coh.grid_centres()[cells]
    brute = brute_force_values(states, 8)
    resolved = ~np.isnan(brute)
    # Enough cells of both kinds resolve that a wrong file (or a wrong V* there) is caught.
    assert np.sum(brute[resolved] > 0) >= 20 and np.sum(brute[resolved] < 0) >= 20, brute
    np.testing.assert_allclose(v_star[cells][resolved], brute[resolved], rtol=0, atol=1e-12)
    compared = 0
    for a in (0, 1):
        brute_q = brute_force_values(states, 8, first_action=a)
        known = ~np.isnan(brute_q)
        np.testing.assert_allclose(q_star[cells][known, a], brute_q[known], rtol=0, atol=1e-12)
        compared += known.sum()
    assert compared >= resolved.sum()  # the best first action of each resolved cell, at least
    np.testing.assert_array_equal(v_star, q_star.max(axis=1))


def test_first_passage_refuses_to_exceed_max_frontier():
    with pytest.raises(RuntimeError, match="max_frontier"):
        coh.first_passage(np.array([coh.RESET_STATE]), horizon=20, max_frontier=100)
