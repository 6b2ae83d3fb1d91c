"""The DQN baseline: TF-Agents' DqnAgent on FlatQNetwork — wiring, loss, target schedule, learning, export."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from agent_test_data import pairs
from tf_agents.agents.dqn import dqn_agent
from tf_agents.environments import tf_py_environment
from tf_agents.policies import policy_saver
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import common

from pbo_tf.agents.replay import linear_epsilon
from pbo_tf.envs import chain_walk
from pbo_tf.envs.tf_agents_adapter import to_tf_agents
from pbo_tf.optimizers import AnnealedAdam
from pbo_tf.q import FlatMLPQ, TableQ
from tests.builders import dqn_agent as dqn_agent_of

FIRST, MID, LAST = (int(t) for t in (ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST))
GAMMA = 0.9
# (step_type, next_step_type, s, a, r, next discount, s'): a step, a termination, a truncation, a boundary.
ROWS = [
    (FIRST, MID, 0, 1, 1.0, 1.0, 1),
    (MID, LAST, 1, 0, 0.5, 0.0, 2),
    (MID, LAST, 2, 1, -0.3, 1.0, 0),
    (LAST, FIRST, 2, 1, 7.0, 1.0, 0),
]


def _table_agent(optimizer, period, omega=None, **kwargs):
    obs = tensor_spec.BoundedTensorSpec((), tf.int32, 0, 2, name="observation")
    act = tensor_spec.BoundedTensorSpec((), tf.int32, 0, 1, name="action")
    return dqn_agent_of(
        time_step_spec=ts.time_step_spec(obs),
        action_spec=act,
        q_family=TableQ(3, 2),
        seed=0,
        gamma=GAMMA,
        optimizer=optimizer,
        train_steps_per_refresh=period,
        epsilon=0.1,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
        initial_params=omega,
        **kwargs,
    )


def test_dqn_agent_uses_flat_q_network_and_the_squared_td_loss():
    omega = np.random.default_rng(0).normal(size=6).astype(np.float32)
    agent = _table_agent(tf_keras.optimizers.SGD(0.0), period=3, omega=omega)
    assert isinstance(agent, dqn_agent.DqnAgent)
    online, target = agent._q_network, agent._target_q_network
    assert online.omega is not target.omega
    np.testing.assert_array_equal(target.omega.numpy(), omega)  # initialised as ω
    table = omega.reshape(3, 2)
    np.testing.assert_allclose(online(tf.constant([2, 0]))[0].numpy(), table[[2, 0]])
    # Squared TD error, boundary pair zeroed, mean over the whole batch (DqnAgent's aggregation).
    td = [
        (r + GAMMA * d * table[s2].max() - table[s, a]) ** 2 if st != LAST else 0.0
        for st, _, s, a, r, d, s2 in ROWS
    ]
    # (`train` passes the agent's gamma; DqnAgent.loss() alone defaults to gamma=1.0 unless given gamma=.)
    np.testing.assert_allclose(agent.train(pairs(ROWS)).loss.numpy(), np.mean(td), rtol=1e-5)
    np.testing.assert_allclose(agent.loss(pairs(ROWS), gamma=GAMMA).loss.numpy(), np.mean(td), rtol=1e-5)
    # Seeded default initialisation: ω = W[0] of the seed.
    seeded = _table_agent(tf_keras.optimizers.SGD(0.0), period=3)
    np.testing.assert_array_equal(seeded._q_network.omega.numpy(), TableQ(3, 2).initial_params(5, 0)[0])


def test_td_loss_huber_is_quadratic_within_one_and_linear_beyond():
    # ω = 0 except Q(1, 0) = 4 and Q(0, 1) = 0.5, γ = 0.9 (table ``[s, a]`` = omega[2 s + a]):
    # row 0: target 1 + 0.9 · max Q(1, ·) = 4.6, Q(0, 1) = 0.5, error 4.1 -> 0.5 + 3.1 = 3.6 (squared 16.81)
    # row 1 (termination): target 0.5, Q(1, 0) = 4, error -3.5 -> 0.5 + (3.5 - 1) = 3.0 (squared 12.25)
    # row 2 (truncation, bootstraps): target -0.3 + 0.9 · max Q(0, ·) = 0.15, Q(2, 1) = 0
    #   -> 0.5 · 0.15² = 0.01125 (squared 0.0225)
    # row 3 (boundary): 0. DqnAgent's mean over the 4 rows.
    omega = np.zeros(6, np.float32)
    omega[2] = 4.0  # Q(1, 0)
    omega[1] = 0.5  # Q(0, 1)
    huber = _table_agent(tf_keras.optimizers.SGD(0.0), period=3, omega=omega, td_loss="huber")
    np.testing.assert_allclose(
        huber.loss(pairs(ROWS), gamma=GAMMA).loss.numpy(), (3.6 + 3.0 + 0.01125) / 4, rtol=1e-5
    )
    squared = _table_agent(tf_keras.optimizers.SGD(0.0), period=3, omega=omega)  # the default
    np.testing.assert_allclose(
        squared.loss(pairs(ROWS), gamma=GAMMA).loss.numpy(), (16.81 + 12.25 + 0.0225) / 4, rtol=1e-5
    )
    with pytest.raises(
        ValueError, match=r"DQNConfig.td_loss must be one of \['squared', 'huber'\], got 'l1'"
    ):
        _table_agent(tf_keras.optimizers.SGD(0.0), period=3, td_loss="l1")


def test_an_annealed_adam_takes_adam_steps_at_the_learning_rates_of_its_schedule():
    """``optimizer=AnnealedAdam(0.05, 0.01)`` with ``lr_schedule_steps=2``: two train steps are Adam
    written out by hand (ε = 1e-8 after the bias correction) at rates 0.05 then 0.03, on the gradient of
    the mean squared TD error (boundary pair zeroed) with the target fixed at ω_0."""
    omega0 = np.random.default_rng(3).normal(size=6)
    agent = _table_agent(AnnealedAdam(0.05, 0.01), period=10, omega=omega0, lr_schedule_steps=2)
    target = omega0.reshape(3, 2)
    omega, m, v = omega0.copy(), np.zeros(6), np.zeros(6)
    for t, lr in ((1, 0.05), (2, 0.03)):
        table, grad = omega.reshape(3, 2), np.zeros((3, 2))
        for st, _, s, a, r, d, s2 in ROWS:
            if st != LAST:
                grad[s, a] -= 2 * (r + GAMMA * d * target[s2].max() - table[s, a]) / len(ROWS)
        g = grad.ravel()
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g**2
        omega = omega - lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        agent.train(pairs(ROWS))
        np.testing.assert_allclose(agent._q_network.omega.numpy(), omega, rtol=1e-5, atol=1e-6)
    assert np.abs(omega - omega0).max() > 0.07  # 0.05 then 0.03 on the visited entries


def test_the_agent_refuses_an_optimizer_of_another_kind_in_one_line_and_anneals_over_the_run():
    """A wrong kind is a one-line `TypeError` that names what was expected and what was given; an
    `AnnealedAdam` anneals over the run's steps unless given its schedule's length."""
    for wrong, name in ((AnnealedAdam()(10), "tuple"), ("adam", "str")):
        with pytest.raises(TypeError) as error:
            _table_agent(wrong, period=3)
        assert str(error.value).splitlines()[0] == (
            f"optimizer must be an AnnealedAdam or a tf_keras optimizer, got {name}"
        )
    # Without lr_schedule_steps an AnnealedAdam anneals over the run: K target updates × the steps between.
    schedule = _table_agent(AnnealedAdam(0.05, 0.01), period=3, K=5)._optimizer._learning_rate
    np.testing.assert_allclose(
        [schedule(0), schedule(6), schedule(15), schedule(30)], [0.05, 0.034, 0.01, 0.01]
    )


def test_target_network_updated_every_period():
    omega = np.random.default_rng(1).normal(size=6).astype(np.float32)
    agent = _table_agent(tf_keras.optimizers.SGD(0.1), period=3, omega=omega)
    train = common.function(agent.train)
    synced = omega
    for step in range(1, 8):
        train(pairs(ROWS))
        online = agent._q_network.omega.numpy()
        assert not np.allclose(online, synced)
        if step % 3 == 0:
            synced = online.copy()
        np.testing.assert_array_equal(agent._target_q_network.omega.numpy(), synced)


def test_driver_loop_learns_the_chain_walk(run_online):
    tf.random.set_seed(0)
    n_states, steps = 7, 200
    tf_env = tf_py_environment.TFPyEnvironment(
        to_tf_agents(chain_walk.ChainWalkEnv(n_states=n_states), seed=0, max_episode_steps=20)
    )
    counter = tf.Variable(0, dtype=tf.int64)
    lr = tf_keras.optimizers.schedules.PolynomialDecay(0.1, steps, 0.01)
    agent = dqn_agent_of(
        time_step_spec=tf_env.time_step_spec(),
        action_spec=tf_env.action_spec(),
        q_family=TableQ(n_states, 2),
        seed=0,
        gamma=GAMMA,
        optimizer=tf_keras.optimizers.Adam(lr),
        train_steps_per_refresh=10,
        epsilon=linear_epsilon(counter, steps // 2),
        train_step_counter=counter,
    )
    q_star = chain_walk.optimal_q(n_states, gamma=GAMMA)
    states = tf.range(n_states, dtype=tf.int32)
    before = agent._q_network(states)[0].numpy()
    losses, _ = run_online(tf_env, agent, steps)
    assert np.isfinite(losses).all()
    after = agent._q_network(states)[0].numpy()
    error_before = np.sqrt(np.mean((before - q_star) ** 2))
    error_after = np.sqrt(np.mean((after - q_star) ** 2))
    # 20 target updates from ω_0 = 0 (RMS error ≈ 8.3): exact value iteration would be at γ^20·8.3 ≈ 1.
    assert error_after < 0.5 * error_before, (before, after)
    np.testing.assert_array_equal(after[[1, n_states - 2]].argmax(axis=1), [0, 1])


def test_policy_saver_round_trip_with_an_mlp(tmp_path):
    tf_env = tf_py_environment.TFPyEnvironment(to_tf_agents("CartPole-v1", seed=0))
    q = FlatMLPQ(4, [16, 16], [0.0, 1.0])
    rng = np.random.default_rng(2)
    omega = rng.normal(scale=0.5, size=q.d).astype(np.float32)  # not the zero-last-layer start: Q ≠ 0
    agent = dqn_agent_of(
        time_step_spec=tf_env.time_step_spec(),
        action_spec=tf_env.action_spec(),
        q_family=q,
        seed=0,
        gamma=0.99,
        optimizer=tf_keras.optimizers.Adam(1e-3),
        train_steps_per_refresh=100,
        epsilon=0.1,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
        initial_params=omega,
    )
    policy_saver.PolicySaver(agent.policy, batch_size=None).save(str(tmp_path / "policy"))
    loaded = tf.saved_model.load(str(tmp_path / "policy"))
    obs = rng.normal(size=(64, 4)).astype(np.float32)
    step = ts.restart(tf.constant(obs), batch_size=64)
    live = agent.policy.action(step).action.numpy()
    np.testing.assert_array_equal(loaded.action(step).action.numpy(), live)
    np.testing.assert_array_equal(live, q.q_all(omega[None], obs)[0].numpy().argmax(axis=1))
    assert len(set(live.tolist())) == 2
