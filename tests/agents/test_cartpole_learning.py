"""ProDQN learns on gymnasium CartPole-v1 in a TF-Agents driver loop of a few hundred steps.

The measure is the greedy policy's mean episode length on fixed evaluation episodes (TF-Agents'
`AverageEpisodeLengthMetric` through `metric_utils.eager_compute`) against the initial greedy policy's: its
Q is almost flat (zero last layer, tiny PBO), ties go to the first action, so it always pushes left and the
pole falls in about 9 steps (a uniformly random policy, also measured, lasts about 22).

In the sweep that chose these settings (seeds 0-2) the learned greedy policy lasted 45, 32 and 81 steps; the
return after a few hundred DQN-style steps on CartPole is noisy, so the bound is a factor 2 on the initial
policy, not a tuned number. (Q itself is not yet accurate at this budget: on the buffer's terminal
transitions, whose exact value is 1, it read 1-2.5; the value-accuracy tests use the chain walk and exact VI.)
"""

import numpy as np
import tensorflow as tf
import tf_keras
from tf_agents.environments import tf_py_environment
from tf_agents.eval import metric_utils
from tf_agents.metrics import tf_metrics
from tf_agents.policies import random_tf_policy

from pbo_tf.agents import ProDQNAgent
from pbo_tf.agents.prodqn import linear_epsilon
from pbo_tf.envs.tf_agents_adapter import to_tf_agents
from pbo_tf.operators import DeepPBO
from pbo_tf.q import FlatMLPQ

TRAIN_STEPS = 400  # one train step per 2 environment steps, after 100 collection-only iterations


def _mean_episode_length(policy, episodes=10):
    env = tf_py_environment.TFPyEnvironment(to_tf_agents("CartPole-v1", seed=1234))
    metric = tf_metrics.AverageEpisodeLengthMetric()
    metric_utils.eager_compute([metric], env, policy, num_episodes=episodes, use_function=True)
    return float(metric.result())


def test_prodqn_driver_loop_on_cartpole_learns_to_balance(run_online):
    tf.random.set_seed(0)  # the ε-greedy and random policies draw from TensorFlow's global generator
    tf_env = tf_py_environment.TFPyEnvironment(to_tf_agents("CartPole-v1", seed=0))
    q = FlatMLPQ(4, [64], [0.0, 1.0])
    counter = tf.Variable(0, dtype=tf.int64)
    agent = ProDQNAgent(
        tf_env.time_step_spec(), tf_env.action_spec(), q, DeepPBO(q.d, hidden_multiples=[1], init_std=1e-3),
        q.initial_params(8, 0), K=3, gamma=0.95, optimizer=tf_keras.optimizers.Adam(3e-3), w_batch_size=4,
        seed=0, target_update_period=50, epsilon_greedy=linear_epsilon(counter, TRAIN_STEPS // 2, 1.0, 0.05),
        train_step_counter=counter,
    )  # fmt: skip
    agent.initialize()
    random = random_tf_policy.RandomTFPolicy(tf_env.time_step_spec(), tf_env.action_spec())
    initial, random_length = _mean_episode_length(agent.policy), _mean_episode_length(random)
    assert initial < 12 < 15 < random_length < 35  # the two reference policies behave as stated above

    losses, buffer = run_online(tf_env, agent, TRAIN_STEPS)
    assert np.isfinite(losses).all()

    learned = _mean_episode_length(agent.policy)
    assert learned > 2 * initial, (initial, random_length, learned)
