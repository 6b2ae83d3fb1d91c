r"""Runs an exported greedy policy (``D/policy/``, a TF-Agents `PolicySaver` SavedModel) in gymnasium.

  python launch/play_policy.py --policy_dir=runs/ll/lunar_lander/prodqn/seed_0/policy \
      --env=LunarLander-v3 --episodes=5

Needs TensorFlow, TF-Agents and gymnasium only: pbo_tf is imported just to register its own environments
when ``--env`` is one of them (``pbo_tf/...``), so this is also the check that an exported policy works
without the library that trained it. Prints one line per episode and the mean return as JSON.
"""

import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow is imported (TF-Agents needs tf_keras)

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("policy_dir", None, "The exported policy folder (D/policy).")
flags.DEFINE_string("env", "LunarLander-v3", "gymnasium id (pbo_tf/... ids register pbo_tf's envs).")
flags.DEFINE_integer("episodes", 5, "Episodes to play.")
flags.DEFINE_integer("max_steps", 1000, "Episode cut.")
flags.DEFINE_float("gamma", 0.99, "Discount of the reported discounted return.")
flags.DEFINE_integer("seed", 0, "Seed of the first reset (episode i uses seed + i).")
flags.mark_flags_as_required(["policy_dir"])


def main(argv):
    del argv
    import sys

    import tensorflow as tf
    from tf_agents.trajectories import time_step as ts

    if FLAGS.env.startswith("pbo_tf/"):
        import pbo_tf.envs  # noqa: F401  (registers the environment id only)
    if not os.path.exists(os.path.join(FLAGS.policy_dir, "saved_model.pb")):
        raise app.UsageError(f"{FLAGS.policy_dir!r} has no saved_model.pb (expected a run's D/policy folder)")
    policy = tf.saved_model.load(FLAGS.policy_dir)
    env = gym.make(FLAGS.env, max_episode_steps=FLAGS.max_steps)
    returns, discounted = [], []
    for episode in range(FLAGS.episodes):
        obs, _ = env.reset(seed=FLAGS.seed + episode)
        total, disc, steps, done = 0.0, 0.0, 0, False
        while not done:
            step = ts.restart(tf.constant(np.asarray(obs, np.float32)[None]), batch_size=1)
            action = int(policy.action(step).action.numpy()[0])
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            disc += FLAGS.gamma**steps * float(reward)
            steps += 1
            done = terminated or truncated
        returns.append(total)
        discounted.append(disc)
        print(f"episode {episode}: return {total:.1f}, discounted {disc:.2f}, {steps} steps", flush=True)
    summary = {
        "env": FLAGS.env,
        "episodes": FLAGS.episodes,
        "mean_return": float(np.mean(returns)),
        "mean_discounted_return": float(np.mean(discounted)),
        "pbo_tf_imported": "pbo_tf" in sys.modules,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    app.run(main)
