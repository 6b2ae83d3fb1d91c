"""Tests of the compiled bicycle rollouts against the NumPy dynamics and hand-computed returns."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow.experimental.numpy as tnp

from pbo_tf.envs import bicycle as bk
from pbo_tf.envs.bicycle import evaluation as ev

N_POLICIES, N_ROLLOUTS = 3, 5
SHAPE = (N_POLICIES, N_ROLLOUTS)
TILTED = (math.radians(1.0), 0.0, 0.0, 0.0)


def mixed_policy(states):
    """Row 0: the lean controller; row 1: always (0, 0); row 2: rollout j always plays action j."""
    lean = ev.lean_controller(states[:1])
    nothing = tf.ones_like(lean)
    each_action = tf.range(N_ROLLOUTS, dtype=lean.dtype)[None, :]
    return tf.concat([lean, nothing, each_action], axis=0)


@pytest.fixture(scope="module")
def rollout_fn():
    """One XLA-compiled rollout function, shared by the tests (compiling is the slow part)."""
    return ev.make_rollout_fn(mixed_policy, N_POLICIES, N_ROLLOUTS)


def reference_rollout(seed, start, noise, gamma, max_steps):
    """The same episodes stepped one by one with the NumPy dynamics, the eager policy and the same noise."""
    state = np.broadcast_to(np.asarray(start, np.float64), SHAPE + (4,)).copy()
    alive = np.ones(SHAPE, bool)
    steps = np.zeros(SHAPE, np.int64)
    returns = np.zeros(SHAPE)
    for t in range(max_steps):
        if not alive.any():
            break
        action = mixed_policy(tf.constant(state.astype(np.float32))).numpy()
        eps = ev.rollout_noise(seed, t, SHAPE, noise).numpy()
        next_state, reward, fell = bk.bicycle_step(state, action, eps)
        returns += np.where(alive, gamma**t * reward, 0.0)
        steps += alive
        state = np.where(alive[..., None], next_state, state)
        alive &= ~fell
    return steps, returns, state


def test_rollout_noise_is_uniform_deterministic_and_fresh_each_step():
    a = np.stack([ev.rollout_noise(3, t, SHAPE, 0.002).numpy() for t in range(100)])
    assert a.dtype == np.float64 and a.shape == (100,) + SHAPE
    np.testing.assert_array_equal(a[10], ev.rollout_noise(3, 10, SHAPE, 0.002).numpy())
    assert len(np.unique(a)) == a.size  # fresh numbers for every step and rollout
    assert not np.array_equal(a[10], ev.rollout_noise(4, 10, SHAPE, 0.002).numpy())
    np.testing.assert_array_equal(ev.rollout_noise(3, 10, SHAPE, 0.001).numpy(), a[10] / 2)
    np.testing.assert_array_equal(ev.rollout_noise(3, 10, SHAPE, 1.0).numpy() * 0.002, a[10])
    assert np.all(np.abs(a) <= 0.002) and a.min() < -0.0019 and a.max() > 0.0019
    assert abs(a.mean()) < 0.0002 and a.std() == pytest.approx(0.002 / math.sqrt(3), rel=0.05)


def test_eager_tnp_step_matches_numpy_and_has_finite_gradients_at_theta_zero():
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, size=(64, 4)) * np.array([0.2, 2.0, 1.3, 6.0])
    states[:8, 2] = 0.0
    actions = rng.integers(5, size=64)
    eps = rng.uniform(-0.002, 0.002, size=64)
    ref = bk.bicycle_step(states, actions, eps)
    out = bk.bicycle_step(tf.constant(states), tf.constant(actions, tf.int32), tf.constant(eps), xp=tnp)
    np.testing.assert_allclose(out[0].numpy(), ref[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out[1].numpy(), ref[1], rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(out[2].numpy(), ref[2])
    upright = tf.Variable(np.zeros((5, 4)))
    with tf.GradientTape() as tape:
        next_state, reward, _ = bk.bicycle_step(upright, tf.range(5), tf.zeros(5, tf.float64), xp=tnp)
        total = tf.reduce_sum(next_state) + tf.reduce_sum(reward)
    gradient = tape.gradient(total, upright).numpy()
    assert np.all(np.isfinite(gradient)) and np.any(gradient != 0.0)


@pytest.mark.parametrize(
    "start",
    [
        (0.0, 0.0, 0.0, 0.0),
        (0.05, -0.3, 0.4, 2.0),
        (-0.1, 0.2, math.radians(79.9), 1.0),  # the handlebar hits its clip
        (math.radians(11.9), 1.0, -0.2, -1.0),  # falls in this step
    ],
)
def test_one_compiled_step_matches_the_numpy_step(rollout_fn, start):
    out = rollout_fn(5, start, 0.002, 0.99, 1)
    state = np.broadcast_to(np.asarray(start), SHAPE + (4,))
    action = mixed_policy(tf.constant(state.astype(np.float32))).numpy()
    next_state, reward, fell = bk.bicycle_step(state, action, ev.rollout_noise(5, 0, SHAPE, 0.002).numpy())
    np.testing.assert_allclose(out["final_state"].numpy(), next_state, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["discounted_return"].numpy(), reward, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(out["steps"].numpy(), 1)
    assert np.all(fell) == (start[0] > math.radians(11))


def test_rollout_matches_the_numpy_reference_loop(rollout_fn):
    start = (0.02, -0.05, 0.01, 0.0)
    out = rollout_fn(11, start, 0.002, 0.99, 200)
    steps, returns, state = reference_rollout(11, start, 0.002, 0.99, 200)
    np.testing.assert_array_equal(out["steps"].numpy(), steps)
    np.testing.assert_allclose(out["discounted_return"].numpy(), returns, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(out["final_state"].numpy(), state, rtol=1e-8, atol=1e-10)
    # Both outcomes occur: the controller lasts the 200 steps, the constant lean actions fall earlier.
    assert np.all(steps[0] == 200) and np.all(steps[2, [0, 2]] < 200)


def test_doing_nothing_falls_in_a_fixed_number_of_steps_with_the_hand_computed_return(rollout_fn):
    # The numpy env, noise-free, from a 1° tilt with action 1 = (0, 0): the trajectory of ω.
    env = bk.BicycleEnv(noise=0.0)
    env.reset(options={"state": TILTED})
    omegas, terminated = [TILTED[0]], False
    while not terminated:
        _, _, terminated, _, _ = env.step(1)
        omegas.append(env.state[0])
    n = len(omegas) - 1
    gamma = 0.99
    expected = sum(gamma**t * 1e4 * (abs(omegas[t]) - abs(omegas[t + 1])) for t in range(n - 1))
    expected -= gamma ** (n - 1)
    out = rollout_fn(0, TILTED, 0.0, gamma, 1000)
    np.testing.assert_array_equal(out["steps"].numpy()[1], n)
    np.testing.assert_allclose(out["discounted_return"].numpy()[1], expected, rtol=1e-9)
    assert abs(out["final_state"].numpy()[1, 0, 0]) > bk.OMEGA_BOUND
    # Noise-free rollouts are identical, whatever the seed; the lean controller keeps the bicycle up.
    again = rollout_fn(123, TILTED, 0.0, gamma, 1000)
    np.testing.assert_array_equal(again["steps"].numpy(), out["steps"].numpy())
    np.testing.assert_array_equal(out["steps"].numpy()[0], 1000)


def test_lean_controller_balances_under_noise_and_seeds_change_the_falls(rollout_fn):
    a = rollout_fn(1, (0, 0, 0, 0), 0.002, 0.99, 1500)
    b = rollout_fn(1, (0, 0, 0, 0), 0.002, 0.99, 1500)
    c = rollout_fn(2, (0, 0, 0, 0), 0.002, 0.99, 1500)
    for key in ("steps", "discounted_return", "final_state"):
        np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())
    np.testing.assert_array_equal(a["steps"].numpy()[0], 1500)
    assert np.all(np.abs(a["final_state"].numpy()[0, :, 0]) < bk.OMEGA_BOUND)
    # Shifting the weight to one side topples the bicycle quickly, towards that side.
    assert np.all(a["steps"].numpy()[2, [0, 2]] < 300)
    assert (
        a["final_state"].numpy()[2, 0, 0]
        < -bk.OMEGA_BOUND
        < bk.OMEGA_BOUND
        < a["final_state"].numpy()[2, 2, 0]
    )
    # Doing nothing from upright: only the noise topples it, at seed-dependent times.
    assert not np.array_equal(a["steps"].numpy()[1], c["steps"].numpy()[1])


def test_bicycle_rollouts_means_and_the_non_xla_path_agree_with_the_compiled_run(rollout_fn):
    start = (0.03, 0.0, -0.02, 0.1)
    compiled = rollout_fn(7, start, 0.002, 0.99, 250)
    result = ev.bicycle_rollouts(
        mixed_policy,
        N_POLICIES,
        N_ROLLOUTS,
        max_steps=250,
        seed=7,
        start=start,
        jit_compile=False,
        return_per_rollout=True,
    )
    steps = compiled["steps"].numpy()
    np.testing.assert_array_equal(result["steps"], steps)
    np.testing.assert_allclose(
        result["rollout_discounted_return"], compiled["discounted_return"].numpy(), rtol=1e-9
    )
    np.testing.assert_allclose(result["balancing_time_s"], steps.mean(axis=1) * 0.01, rtol=1e-12)
    np.testing.assert_allclose(
        result["discounted_return"], compiled["discounted_return"].numpy().mean(axis=1), rtol=1e-9
    )
    assert result["balancing_time_s"].shape == (N_POLICIES,) and result["balancing_time_s"][0] == 2.5


def test_bicycle_rollouts_validates_its_arguments():
    with pytest.raises(ValueError, match="start"):
        ev.bicycle_rollouts(mixed_policy, 3, 5, start=(0, 0, math.radians(85), 0))
    with pytest.raises(ValueError, match="start"):
        ev.bicycle_rollouts(mixed_policy, 3, 5, start=(0, 0, 0))
    with pytest.raises(ValueError, match="n_rollouts"):
        ev.bicycle_rollouts(mixed_policy, 3, 0)


def test_the_online_env_s_evaluations_compile_once_per_shape_and_equal_a_fresh_evaluation():
    """`BicycleOnlineEnv.evaluate` keeps its compiled rollouts: new parameters of the same shape are
    evaluated without tracing the greedy policy again, with the numbers of a fresh `evaluate_params`."""
    from pbo_tf.envs.bicycle.online import BicycleOnlineEnv

    env = BicycleOnlineEnv(eval_max_steps=300, eval_jit_compile=False)
    q = env.q_family()
    traces = []
    real = q.greedy_actions_paired

    def counted(params, states):
        traces.append(params.shape)
        return real(params, states)

    q.greedy_actions_paired = counted
    rng = np.random.default_rng(3)
    seen = []
    for _ in range(3):
        params = rng.normal(size=(2, q.d)).astype(np.float32)  # policies that fall at different times
        got = env.evaluate(q, params, 4)
        fresh = ev.evaluate_params(q, params, 4, max_steps=300, gamma=env.gamma, jit_compile=False)
        assert got == fresh
        seen.append(got)
    assert seen[0] != seen[1] != seen[2]  # each call evaluated its own parameters
    # one trace for the env's three calls (the family's [2, d] shape), one per fresh evaluation
    assert len(traces) == 1 + 3
    env.evaluate(q, params[:1], 4)  # another number of policies: its own function
    assert len(traces) == 5 and len(env._rollouts) == 2
