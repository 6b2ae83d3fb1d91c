r"""Runs an exported greedy policy (``D/policy/``, a TF-Agents `PolicySaver` SavedModel) in gymnasium.

  python launch/play_policy.py --policy_dir=runs/ll/lunar_lander/prodqn/seed_0/policy \
      --env=LunarLander-v3 --episodes=5

Needs TensorFlow, TF-Agents and gymnasium only: pbo_tf is imported just to register its own environments
when ``--env`` is one of them (``pbo_tf/...``), so this is also the check that an exported policy works
without the library that trained it (its error reporting, `pbo_tf/experiments/cli.py`, is loaded by its
path and imports only absl). Prints one line per episode and the mean return as JSON. Errors are one line
on stderr, exit code 2 for a bad flag, folder or environment (``--verbose`` prints the traceback).
"""

import importlib.util
import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow is imported (TF-Agents needs tf_keras)

import numpy as np  # noqa: E402
from absl import flags  # noqa: E402


def _load_cli():
    """`pbo_tf.experiments.cli` without importing the pbo_tf package."""
    path = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pbo_tf", "experiments", "cli.py"
    )
    spec = importlib.util.spec_from_file_location("_pbo_tf_cli", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cli = _load_cli()

FLAGS = flags.FlagValues()
flags.DEFINE_string("policy_dir", None, "The exported policy folder (D/policy).", flag_values=FLAGS)
flags.DEFINE_string(
    "env", "LunarLander-v3", "gymnasium id (pbo_tf/... ids register pbo_tf's envs).", flag_values=FLAGS
)
flags.DEFINE_integer("episodes", 5, "Episodes to play.", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("max_steps", 1000, "Episode cut.", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_float("gamma", 0.99, "Discount of the reported discounted return.", flag_values=FLAGS)
flags.DEFINE_integer("seed", 0, "Seed of the first reset (episode i uses seed + i).", flag_values=FLAGS)
cli.define_common_flags(FLAGS)
flags.mark_flags_as_required(["policy_dir"], flag_values=FLAGS)


def load_policy(policy_dir: str):
    """The SavedModel policy in ``policy_dir``.

    Raises:
      FileNotFoundError: no such folder.
      ValueError: the folder is not an exported policy, or the SavedModel cannot be read.
    """
    import tensorflow as tf

    if not os.path.isdir(policy_dir):
        raise FileNotFoundError(
            f"--policy_dir {policy_dir!r} does not exist (expected a run's D/policy folder)"
        )
    if not os.path.exists(os.path.join(policy_dir, "saved_model.pb")):
        raise ValueError(
            f"--policy_dir {policy_dir!r} has no saved_model.pb (expected a run's D/policy folder)"
        )
    try:
        policy = tf.saved_model.load(policy_dir)
    except Exception as e:  # TF raises OpError, DecodeError, ... for a corrupt SavedModel
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise ValueError(
            f"--policy_dir {policy_dir!r} holds a corrupt or incomplete SavedModel: {first}"
        ) from e
    if not hasattr(policy, "action"):
        raise ValueError(f"--policy_dir {policy_dir!r} is a SavedModel but not a policy (it has no action())")
    return policy


def make_env(env_id: str, max_steps: int):
    """The gymnasium environment ``env_id`` (a `ValueError` naming it when gymnasium has no such id)."""
    import gymnasium as gym

    if env_id.startswith("pbo_tf/"):
        import pbo_tf.envs  # noqa: F401  (registers the environment id only)
    try:
        return gym.make(env_id, max_episode_steps=max_steps)
    except gym.error.Error as e:
        raise ValueError(f"--env {env_id!r}: {e}") from e


def main(argv):
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    import tensorflow as tf
    from tf_agents.trajectories import time_step as ts

    policy = load_policy(FLAGS.policy_dir)
    env = make_env(FLAGS.env, FLAGS.max_steps)
    returns, discounted = [], []
    for episode in range(FLAGS.episodes):
        obs, _ = env.reset(seed=FLAGS.seed + episode)
        total, disc, steps, done = 0.0, 0.0, 0, False
        while not done:
            step = ts.restart(tf.constant(np.asarray(obs, np.float32)[None]), batch_size=1)
            try:
                action = int(policy.action(step).action.numpy()[0])
            except (ValueError, TypeError, tf.errors.InvalidArgumentError) as e:
                raise ValueError(
                    f"the policy in {FLAGS.policy_dir!r} cannot act on {FLAGS.env} observations of shape "
                    f"{list(np.shape(obs))} (a policy of another environment? --verbose shows TensorFlow's "
                    "message)"
                ) from e
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
    return 0


if __name__ == "__main__":
    cli.run_main(main, FLAGS)
