"""ProDQN learns on gymnasium CartPole-v1 in a TF-Agents driver loop of a few hundred steps.

What it must learn has an exact answer. ``ω_0`` is the zero-last-layer network, so ``Q_{ω_0} ≡ 0``, and
ProDQN trains ``Λ`` so that ``Q_{Λ^k(ω_0)} ≈ T^k Q_{ω_0}``. CartPole pays 1 per step until the pole falls,
and from a start state (every coordinate within ±0.05) no sequence of fewer than 3 actions can make it fall
(the angle moves by less than 0.03 rad in 2 steps, the limit is 0.21). So for k = 1, 2, 3 and both actions,
``T^k Q_0(s, a) = 1 + γ + … + γ^(k−1)`` exactly at every start state. The test compares the greedy network at
k = 1, 2, 3 (`PBOQNetwork.set_apply_k`) with that value on the start states in the replay buffer, before
training (Q ≈ 0: an error of 100%) and after.

The greedy policy's return is not asserted. With K = 3 its Q is a 3-step lookahead that ties almost
everywhere away from the borders, and after 400 steps its mean episode length varied from 21 to 81 over
seeds and reruns (the always-left initial policy lasts 9, a random one about 22).
"""

import numpy as np
import tensorflow as tf
import tf_keras
from tf_agents.environments import tf_py_environment
from tf_agents.trajectories import time_step as ts

from pbo_tf.agents.replay import linear_epsilon
from pbo_tf.envs.tf_agents_adapter import to_tf_agents
from pbo_tf.operators import DeepPBO
from pbo_tf.q import FlatMLPQ
from tests.builders import prodqn_agent as _prodqn

TRAIN_STEPS = 800  # one training step per 2 environment steps, after 100 collection-only iterations
GAMMA = 0.95


def _relative_errors(agent, starts):
    """Per k = 1, 2, 3: RMS over the start states and both actions of ``Q_k − T^k Q_0``, ÷ ``T^k Q_0``."""
    errors = []
    for k in (1, 2, 3):
        agent.q_network.set_apply_k(k)
        q, _ = agent.q_network(starts)
        exact = sum(GAMMA**t for t in range(k))
        errors.append(float(np.sqrt(np.mean((q.numpy() - exact) ** 2))) / exact)
    agent.q_network.set_apply_k(3)
    return np.array(errors)


def _agent(tf_env, q, **kwargs):
    return _prodqn(
        tf_env.time_step_spec(), tf_env.action_spec(), q, DeepPBO(q.d, hidden_multiples=[1], init_std=1e-3),
        q.initial_params(8, 0), K=3, gamma=GAMMA, optimizer=tf_keras.optimizers.Adam(3e-3), w_batch_size=4,
        seed=0, train_steps_per_refresh=50, **kwargs,
    )  # fmt: skip


def test_prodqn_driver_loop_on_cartpole_learns_the_bellman_iterates(run_online):
    # Every source of randomness seeded here (Python's, NumPy's, TensorFlow's): the operator's unseeded
    # initialisers draw from Python's `random`, so without it the start depended on the tests run before
    # this one in the same process.
    tf_keras.utils.set_random_seed(0)
    tf_env = tf_py_environment.TFPyEnvironment(to_tf_agents("CartPole-v1", seed=0))
    q = FlatMLPQ(4, [64], [0.0, 1.0])
    counter = tf.Variable(0, dtype=tf.int64)
    agent = _agent(
        tf_env,
        q,
        epsilon_greedy=linear_epsilon(counter, TRAIN_STEPS // 2, 1.0, 0.05),
        train_step_counter=counter,
    )
    agent.initialize()
    np.testing.assert_array_equal(q.q_all(q.initial_params(1, 0), np.zeros((1, 4), np.float32)), 0.0)

    losses, buffer = run_online(tf_env, agent, TRAIN_STEPS)
    assert np.isfinite(losses).all()

    items = buffer.gather_all()
    starts = items.observation[items.step_type == ts.StepType.FIRST]
    assert starts.shape[0] >= 20 and np.abs(starts.numpy()).max() <= 0.05  # ~40 episodes, reset states
    before = _relative_errors(_agent(tf_env, q), starts)  # same configuration, untrained PBO
    after = _relative_errors(agent, starts)
    assert np.all(before > 0.9), before
    # Below 10% at k = 1, 2, 3 from each of the initialisations of seeds 0-5 (2 Adam steps per training
    # step: W batches of 4 of 8); at 400 training steps one of the six was still at 12-23%.
    assert np.all(after < 0.1), (before, after)
