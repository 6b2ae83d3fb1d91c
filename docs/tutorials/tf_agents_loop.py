"""Tutorial: ProDQN and DQN in your own TF-Agents driver loop, on gymnasium's CartPole-v1.

pbo_tf's agents are plain TF-Agents agents: `ProDQNAgent` is a ``TFAgent`` whose Q network evaluates
``Q_{Λ^K(ω_0)}``, and `make_dqn_agent` builds TF-Agents' own ``DqnAgent`` on the same Q family. So the
usual pieces work unchanged: a ``TFUniformReplayBuffer``, a ``DynamicStepDriver``, ``tf_metrics`` as
observers, ``metric_utils.compute`` for a greedy evaluation and ``PolicySaver`` for export.

Run it (``--toy`` finishes in under half a minute; the default in a few minutes on 2 CPU cores)::

    python docs/tutorials/tf_agents_loop.py --work_dir=/tmp/tf_agents_loop
    python docs/tutorials/tf_agents_loop.py --work_dir=/tmp/tf_agents_loop --toy

It trains each agent, prints the average return of its greedy policy before and after, saves the policy
with ``PolicySaver`` under ``OUTPUT_DIR/<agent>/policy`` and checks that the reloaded SavedModel (TensorFlow
alone, no pbo_tf) picks the same actions as the agent's greedy policy on 256 states.
``OUTPUT_DIR/summary.json`` holds the numbers.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

import pbo_tf  # noqa: F401  (sets TF_USE_LEGACY_KERAS=1 before TensorFlow is imported)

_OUTPUT_DIR = flags.DEFINE_string(
    "work_dir", "/tmp/pbo_tf_tf_agents_loop", "Where the policies and summary.json go."
)
_TOY = flags.DEFINE_bool("toy", False, "A tiny run (a few hundred steps) that only shows the loop works.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the environment, the networks and W.")


def main(argv):
    del argv
    import numpy as np
    import tensorflow as tf
    import tf_keras
    from absl import logging
    from tf_agents.drivers import dynamic_step_driver
    from tf_agents.environments import tf_py_environment
    from tf_agents.eval import metric_utils
    from tf_agents.metrics import tf_metrics
    from tf_agents.policies import policy_saver
    from tf_agents.replay_buffers import tf_uniform_replay_buffer
    from tf_agents.trajectories import time_step as ts
    from tf_agents.utils import common

    from pbo_tf.agents import ProDQNAgent, linear_epsilon, make_dqn_agent
    from pbo_tf.configs import DQNConfig, ProDQNConfig
    from pbo_tf.envs import to_tf_agents
    from pbo_tf.operators import DeepPBO
    from pbo_tf.optimizers import AnnealedAdam
    from pbo_tf.q import FlatMLPQ

    logging.set_verbosity(logging.ERROR)  # TensorFlow's and TF-Agents' saving and retracing notes
    tf.get_logger().setLevel("ERROR")
    seed = _SEED.value
    train_steps = 300 if _TOY.value else 6_000  # one replay batch (and Adam step per W batch) each
    eval_episodes = 3 if _TOY.value else 20
    gamma, K = 0.99, 3
    tf_keras.utils.set_random_seed(seed)

    # 1. The environment: any gymnasium id as a TF-Agents environment (discount 1 between steps: the
    #    agents apply γ themselves).
    train_env = tf_py_environment.TFPyEnvironment(to_tf_agents("CartPole-v1", seed=seed))
    eval_env = tf_py_environment.TFPyEnvironment(to_tf_agents("CartPole-v1", seed=seed + 1_000))

    # 2. The Q family: Q_ω(s, a) = MLP_ω(concat(s, a)), flat parameters ω of size d; action a fed as 0 or 1.
    q_family = FlatMLPQ(4, [64], [0.0, 1.0])

    def make_agent(kind: str):
        counter = tf.Variable(0, dtype=tf.int64)
        epsilon = linear_epsilon(counter, train_steps // 2, start=1.0, end=0.05)
        # Adam annealed linearly from 3e-3 to 3e-4 over the run: the agents call it with the run's Adam steps
        optimizer = AnnealedAdam(3e-3, 3e-4)
        if kind == "dqn":
            # TF-Agents' DqnAgent on the same Q family; its target network is refreshed every 100 steps.
            config = DQNConfig(K=train_steps // 100, train_steps_per_refresh=100)
            return make_dqn_agent(
                time_step_spec=train_env.time_step_spec(), action_spec=train_env.action_spec(),
                q_family=q_family, config=config, gamma=gamma, optimizer=optimizer, epsilon=epsilon,
                seed=seed, train_step_counter=counter,
            )  # fmt: skip
        # ProDQN: an operator Λ on ω (one hidden layer of width d), trained on a set W of 8 parameter
        # vectors (W[0] = ω_0) so that Q_{Λ^k(ω)} follows k Bellman iterations, k = 1..K.
        pbo = DeepPBO(q_family.d, hidden_multiples=[1], init_std=1e-3)
        config = ProDQNConfig(
            K=K, refreshes=train_steps // 50, train_steps_per_refresh=50, w_size=8, w_batch_size=4,
            lr_schedule_counts_w_batches=True,  # Adam anneals over both W batches' steps of a training step
        )  # fmt: skip
        agent = ProDQNAgent(
            time_step_spec=train_env.time_step_spec(), action_spec=train_env.action_spec(), q_family=q_family,
            pbo=pbo, w_set=q_family.initial_params(8, seed), gamma=gamma, optimizer=optimizer, config=config,
            seed=seed, epsilon=epsilon, train_step_counter=counter,
        )  # fmt: skip
        agent.initialize()
        return agent

    summary = {"train_steps": train_steps, "eval_episodes": eval_episodes}
    for kind in ("prodqn", "dqn"):
        agent = make_agent(kind)

        # 3. Replay buffer, driver and metrics: the standard TF-Agents loop.
        buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
            agent.collect_data_spec, batch_size=train_env.batch_size, max_length=10_000
        )
        episodes = tf_metrics.NumberOfEpisodes()
        average_return = tf_metrics.AverageReturnMetric(buffer_size=20)
        driver = dynamic_step_driver.DynamicStepDriver(
            train_env,
            agent.collect_policy,
            observers=[buffer.add_batch, episodes, average_return],
            num_steps=2,  # environment steps per training step
        )
        collect = common.function(driver.run)  # the collection steps as one graph, as TF-Agents' examples do
        train = common.function(agent.train)

        def greedy_return(policy):
            metric = tf_metrics.AverageReturnMetric(buffer_size=eval_episodes)
            metric_utils.compute([metric], eval_env, policy, num_episodes=eval_episodes)
            return float(metric.result())

        before = greedy_return(agent.policy)
        initial_weights = [v.numpy() for v in agent.trainable_variables]
        time_step = train_env.reset()
        for _ in range(100):  # fill the buffer before learning
            time_step, _ = collect(time_step)
        for step in range(train_steps):
            time_step, _ = collect(time_step)
            experience, _ = buffer.get_next(sample_batch_size=64, num_steps=2)
            loss = train(experience).loss
            if (step + 1) % max(train_steps // 5, 1) == 0:
                print(
                    f"{kind}: step {step + 1}/{train_steps}, loss {float(loss):.4f}, "
                    f"{int(episodes.result())} episodes, collect return {float(average_return.result()):.1f}"
                )
        after = greedy_return(agent.policy)
        print(f"{kind}: greedy return over {eval_episodes} episodes {before:.1f} before, {after:.1f} after")
        trained = zip(initial_weights, agent.trainable_variables, strict=True)
        changed = sum(not np.array_equal(w, v.numpy()) for w, v in trained)
        print(f"{kind}: training changed {changed} of its {len(initial_weights)} trainable variables")

        # 4. Export: a TF-Agents PolicySaver SavedModel, reloaded with TensorFlow alone.
        policy_dir = os.path.join(_OUTPUT_DIR.value, kind, "policy")
        policy_saver.PolicySaver(agent.policy, batch_size=None).save(policy_dir)
        reloaded = tf.saved_model.load(policy_dir)
        # 256 states drawn over CartPole's range (cart ±2.4, pole ±0.21 rad, speeds ±2), in one batch
        rng = np.random.default_rng(seed)
        states = rng.uniform([-2.4, -2.0, -0.21, -2.0], [2.4, 2.0, 0.21, 2.0], (256, 4)).astype(np.float32)
        probe = ts.restart(tf.constant(states), batch_size=len(states))
        actions = agent.policy.action(probe).action.numpy()
        same = int(np.sum(reloaded.action(probe).action.numpy() == actions))
        print(
            f"{kind}: reloaded policy at {policy_dir} picks the agent's greedy action on {same} of "
            f"{len(states)} states (the agent's: action 1 on {int(actions.sum())})"
        )
        if same != len(states):
            raise SystemExit(f"{kind}: the reloaded policy disagrees with the agent")
        summary[kind] = {
            "greedy_return_before": before, "greedy_return_after": after, "policy": policy_dir,
            "trainable_variables_changed": changed, "trainable_variables": len(initial_weights),
            "probe_states": len(states), "probe_agreement": same, "probe_action_1": int(actions.sum()),
        }  # fmt: skip

    os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
    with open(os.path.join(_OUTPUT_DIR.value, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print(f"wrote {os.path.join(_OUTPUT_DIR.value, 'summary.json')}")


if __name__ == "__main__":
    app.run(main)
