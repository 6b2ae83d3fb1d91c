"""i-DQN on TF-Agents: the iterated loss by hand on a replay batch with boundaries, one SGD and one Adam step
by hand, the refresh schedule, the heads learning K Bellman iterations in a driver loop, PolicySaver."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from agent_test_data import pairs
from tf_agents.environments import tf_py_environment
from tf_agents.policies import policy_saver
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from pbo_tf.agents.replay import linear_epsilon
from pbo_tf.envs import chain_walk
from pbo_tf.envs.tf_agents_adapter import to_tf_agents
from pbo_tf.optimizers import AnnealedAdam, make_adam
from pbo_tf.q import FlatMLPQ, TableQ
from tests.builders import idqn_agent

FIRST, MID, LAST = (int(t) for t in (ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST))
GAMMA = 0.9
# (step_type, next_step_type, s, a, r, next discount, s'): a step, a termination, a truncation (bootstraps)
# and an episode boundary (LAST -> FIRST: not a transition).
ROWS = [
    (FIRST, MID, 0, 1, 1.0, 1.0, 1),
    (MID, LAST, 1, 0, 0.5, 0.0, 2),
    (MID, LAST, 2, 1, -0.3, 1.0, 0),
    (LAST, FIRST, 2, 1, 7.0, 1.0, 0),
]


def _specs(n_states, n_actions):
    obs = tensor_spec.BoundedTensorSpec((), tf.int32, 0, n_states - 1, name="observation")
    act = tensor_spec.BoundedTensorSpec((), tf.int32, 0, n_actions - 1, name="action")
    return ts.time_step_spec(obs), act


def _agent(heads, optimizer, **kwargs):
    tss, act = _specs(3, 2)
    return idqn_agent(
        time_step_spec=tss, action_spec=act, q_family=TableQ(3, 2), K=len(heads) - 1, gamma=GAMMA,
        optimizer=optimizer, initial_params=heads, train_step_counter=tf.Variable(0, dtype=tf.int64),
        **kwargs,
    )  # fmt: skip


def _hand_loss_and_grad(heads, target):
    """The iterated loss on ROWS by hand and its gradient in the heads: mean over k = 1..K and the three
    valid transitions of (r + γ·disc·max Q̄_{k−1}(s') − Q_k(s, a))²."""
    valid = [r for r in ROWS if r[0] != LAST]
    K = len(heads) - 1
    loss, grad = 0.0, np.zeros_like(heads)
    n = K * len(valid)
    for k in range(1, K + 1):
        for _, _, s, a, r, disc, s2 in valid:
            y = r + GAMMA * disc * target[k - 1].reshape(3, 2)[s2].max()
            residual = y - heads[k].reshape(3, 2)[s, a]
            loss += residual**2 / n
            grad[k, 2 * s + a] += -2 * residual / n
    return loss, grad


def test_the_loss_by_hand_with_a_frozen_target_and_boundaries():
    rng = np.random.default_rng(0)
    heads = rng.normal(size=(3, 6)).astype(np.float32)
    agent = _agent(heads, tf_keras.optimizers.SGD(0.0))
    agent.initialize()
    target = rng.normal(size=(3, 6)).astype(np.float32)
    agent.target_params.assign(target.reshape(1, -1))  # a target different from θ: the loss must use θ̄
    info = agent.loss(pairs(ROWS))
    hand, _ = _hand_loss_and_grad(heads.astype(np.float64), target.astype(np.float64))
    assert float(info.loss) == pytest.approx(hand, rel=1e-5)
    assert int(info.extra.valid_transitions) == 3 and not bool(info.extra.skipped)


def test_one_sgd_and_one_adam_step_by_hand_leave_head_zero_alone():
    rng = np.random.default_rng(1)
    heads = rng.normal(size=(3, 6)).astype(np.float32)
    _, grad = _hand_loss_and_grad(heads.astype(np.float64), heads.astype(np.float64))
    assert np.abs(grad[1:]).max() > 0.1
    eta = 0.05
    sgd = _agent(heads, tf_keras.optimizers.SGD(eta))
    sgd.initialize()  # θ̄ ← θ
    sgd.train(pairs(ROWS))
    np.testing.assert_allclose(sgd.heads(), heads - eta * grad, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(sgd.heads()[0], heads[0])
    # Adam's first step from zero moments (ε after the bias correction, the reference's): lr·g / (|g| + ε)
    lr, eps = 1e-2, 1e-8
    adam = _agent(heads, make_adam(lr, epsilon=eps))
    adam.initialize()
    adam.train(pairs(ROWS))
    np.testing.assert_allclose(adam.heads(), heads - lr * grad / (np.abs(grad) + eps), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(adam.heads()[0], heads[0])


def test_an_annealed_adam_takes_adam_steps_at_the_learning_rates_of_its_schedule():
    """``optimizer=AnnealedAdam(0.05, 0.01)`` with ``lr_schedule_steps=2``: two training steps are Adam by
    hand (ε = 1e-8 after the bias correction) at rates 0.05 then 0.03 on the hand gradient, θ̄ frozen."""
    heads = np.random.default_rng(3).normal(size=(3, 6))
    agent = _agent(heads, AnnealedAdam(0.05, 0.01), lr_schedule_steps=2, train_steps_per_refresh=10)
    agent.initialize()
    assert float(agent.lr_schedule(1)) == pytest.approx(0.03)
    theta, m, v = heads.copy(), np.zeros_like(heads), np.zeros_like(heads)
    for t, lr in ((1, 0.05), (2, 0.03)):
        _, g = _hand_loss_and_grad(theta, heads)
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g**2
        theta = theta - lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        agent.train(pairs(ROWS))
        np.testing.assert_allclose(agent.heads(), theta, rtol=1e-5, atol=1e-6)
    assert np.abs(theta - heads).max() > 0.07  # 0.05 then 0.03 on the trained entries


def test_the_agent_refuses_an_optimizer_of_another_kind_in_one_line():
    """A wrong kind is a one-line `TypeError` that names what was expected and what was given; an
    `AnnealedAdam` anneals over the run's steps unless given its schedule's length."""
    heads = np.zeros((3, 6), np.float32)
    for wrong, name in ((AnnealedAdam()(10), "tuple"), ("adam", "str")):
        with pytest.raises(TypeError) as error:
            _agent(heads, wrong)
        assert str(error.value).splitlines()[0] == (
            f"optimizer must be an AnnealedAdam or a tf_keras optimizer, got {name}"
        )
    # Without lr_schedule_steps: over the run's refreshes × steps between them.
    schedule = _agent(heads, AnnealedAdam(0.05, 0.01), refreshes=5, train_steps_per_refresh=3).lr_schedule
    np.testing.assert_allclose(
        [schedule(0), schedule(6), schedule(15), schedule(30)], [0.05, 0.034, 0.01, 0.01]
    )
    assert _agent(heads, tf_keras.optimizers.SGD(0.1)).lr_schedule is None


def test_the_target_is_refreshed_every_train_steps_per_refresh():
    heads = np.random.default_rng(2).normal(size=(3, 6)).astype(np.float32)
    agent = _agent(heads, tf_keras.optimizers.SGD(0.05), train_steps_per_refresh=3)
    agent.initialize()
    np.testing.assert_array_equal(agent.target_params.numpy()[0], heads.reshape(-1))
    for step in range(1, 7):
        agent.train(pairs(ROWS))
        theta = agent.q_network.omega.numpy()
        target = agent.target_params.numpy()[0]
        if step % 3 == 0:
            np.testing.assert_array_equal(target, theta)
        else:
            assert not np.array_equal(target, theta)


@pytest.mark.parametrize("K, steps, tolerance", [(3, 400, 0.2), (10, 1500, 0.05)])
def test_driver_loop_heads_learn_k_bellman_iterations_on_chain_walk(run_online, K, steps, tolerance):
    """Every head k against value iteration's k-th iterate; K = 10: each head within 5% (measured: ≤ 2.1%)."""
    tf.random.set_seed(0)
    n_states = 7
    env = chain_walk.ChainWalkEnv(n_states=n_states)
    tf_env = tf_py_environment.TFPyEnvironment(to_tf_agents(env, seed=0, max_episode_steps=20))
    q = TableQ(n_states, 2)
    heads = np.zeros((K + 1, q.d), np.float32)  # Q_0 = 0 in every head
    lr = tf_keras.optimizers.schedules.PolynomialDecay(5e-2, steps, 5e-3)
    counter = tf.Variable(0, dtype=tf.int64)
    agent = idqn_agent(
        time_step_spec=tf_env.time_step_spec(), action_spec=tf_env.action_spec(), q_family=q, K=K,
        gamma=GAMMA, optimizer=tf_keras.optimizers.Adam(lr), initial_params=heads, train_steps_per_refresh=10,
        epsilon=linear_epsilon(counter, steps // 2), train_step_counter=counter,
    )  # fmt: skip
    agent.initialize()
    losses, _ = run_online(tf_env, agent, steps)
    assert np.isfinite(losses).all()
    P, R = chain_walk.transition_model(n_states)
    exact, value = [np.zeros((n_states, 2))], np.zeros(2 * n_states)
    for _ in range(K):
        value = R + GAMMA * P @ value.reshape(n_states, 2).max(axis=1)
        exact.append(value.reshape(n_states, 2))
    learned = agent.heads().reshape(K + 1, n_states, 2)
    np.testing.assert_array_equal(learned[0], 0.0)  # head 0 is never trained
    for k in range(1, K + 1):
        rms = np.sqrt(np.mean((learned[k] - exact[k]) ** 2))
        scale = np.sqrt(np.mean(exact[k] ** 2))
        assert rms < tolerance * scale, (k, rms, scale)  # from 100% at Q = 0


def test_policy_saver_round_trip_acts_on_the_last_head(tmp_path):
    tf_env = tf_py_environment.TFPyEnvironment(to_tf_agents("CartPole-v1", seed=0))
    q = FlatMLPQ(4, [8], [0.0, 1.0])
    rng = np.random.default_rng(3)
    heads = rng.normal(scale=0.5, size=(3, q.d)).astype(np.float32)
    agent = idqn_agent(
        time_step_spec=tf_env.time_step_spec(), action_spec=tf_env.action_spec(), q_family=q, K=2,
        gamma=0.99, optimizer=make_adam(1e-3), initial_params=heads,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
    )  # fmt: skip
    policy_saver.PolicySaver(agent.policy, batch_size=None).save(str(tmp_path / "policy"))
    loaded = tf.saved_model.load(str(tmp_path / "policy"))
    obs = rng.normal(scale=2.0, size=(64, 4)).astype(np.float32)
    step = ts.restart(tf.constant(obs), batch_size=64)
    actions = loaded.action(step).action.numpy()
    last = q.q_all(heads[2:], obs)[0].numpy()
    np.testing.assert_array_equal(actions, last.argmax(axis=1))
    assert not np.array_equal(actions, q.q_all(heads[1:2], obs)[0].numpy().argmax(axis=1))
    assert len(set(actions.tolist())) == 2


def test_bad_arguments_are_one_line_errors():
    tss, act = _specs(3, 2)
    common = dict(time_step_spec=tss, action_spec=act, gamma=0.9, optimizer=make_adam(1e-3))
    with pytest.raises(ValueError, match=r"^IDQNConfig\.K must be an integer >= 1, got 0$"):
        idqn_agent(q_family=TableQ(3, 2), K=0, **common)
    with pytest.raises(ValueError, match=r"initial_params must hold K \+ 1 = 3 heads of 6 parameters"):
        idqn_agent(q_family=TableQ(3, 2), K=2, initial_params=np.zeros(12), **common)
    with pytest.raises(ValueError, match="the action spec"):
        idqn_agent(q_family=TableQ(3, 3), K=2, **common)
    with pytest.raises(
        ValueError, match=r"^IDQNConfig\.train_steps_per_refresh must be an integer >= 1, got 0$"
    ):
        idqn_agent(q_family=TableQ(3, 2), K=2, train_steps_per_refresh=0, **common)
    with pytest.raises(ValueError, match=r"^IDQNConfig\.gradient_clipping must be None or > 0, got 0$"):
        idqn_agent(q_family=TableQ(3, 2), K=2, gradient_clipping=0, **common)
