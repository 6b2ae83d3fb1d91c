r"""Runs an exported greedy policy (``D/policy/``, a TF-Agents `PolicySaver` SavedModel) in gymnasium.

  pbo-play --policy_dir=runs/ll/lunar_lander/prodqn/seed_0/policy --env=LunarLander-v3 --episodes=5

(or ``python launch/play_policy.py ...`` in a checkout). Needs TensorFlow, TF-Agents and gymnasium only: of
pbo_tf it loads the package (which registers its ``pbo_tf/...`` gymnasium ids), this program and its error
reporting (`pbo_tf.cli.common`, with TensorFlow's start-up line filter `pbo_tf.tf_startup`), the environment's
module for a ``pbo_tf/...`` id, and for an id gymnasium does not know, the registry (`pbo_tf.envs.registry`,
with `pbo_tf.entry_points`), whose entry points register the ids of other packages' environments
(``--import=module`` imports a registering module of a package without one), so this is also the check that
an exported policy works without the library code that trained it (the summary's ``pbo_tf_modules`` lists
any other pbo_tf module loaded). Prints one line per episode and the mean return as JSON. Errors are one line
on stderr, exit code 2 for a bad flag, folder or environment (``--verbose`` prints the traceback).
"""

import json
import os
import sys

import numpy as np
from absl import flags

# (`import pbo_tf` sets TF_USE_LEGACY_KERAS before TensorFlow is imported: TF-Agents needs tf_keras.)
from pbo_tf.cli import common as cli

#: The pbo_tf modules that playing a policy loads by itself (see the module docstring).
_OWN_MODULES = (
    "pbo_tf",
    "pbo_tf.cli",
    "pbo_tf.envs",
    "pbo_tf.deps",
    "pbo_tf.tf_startup",
    "pbo_tf.entry_points",
)

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


def observation_dtype(policy) -> np.dtype:
    """The dtype of the observations the SavedModel ``policy`` acts on (its ``action`` signature's): an
    integer one for environments with discrete observations (chain-walk), float32 otherwise."""
    signature = getattr(policy, "signatures", {}).get("action")
    specs = signature.structured_input_signature[1] if signature is not None else {}
    for name, spec in specs.items():
        if name.endswith("observation"):
            return np.dtype(spec.dtype.as_numpy_dtype)
    return np.dtype(np.float32)


def make_env(env_id: str, max_steps: int):
    """The gymnasium environment ``env_id`` (a `ValueError` naming it when gymnasium has no such id). An id
    gymnasium does not know yet may be another package's: `pbo_tf.envs.registry` loads the packages' entry
    points, which register their ids, first."""
    import gymnasium as gym

    if env_id not in gym.registry:
        from pbo_tf.envs import registry

        registry.load_entry_points()
    try:
        return gym.make(env_id, max_episode_steps=max_steps)
    except gym.error.Error as e:
        raise ValueError(f"--env {env_id!r}: {e}") from e


def library_modules() -> list[str]:
    """The pbo_tf modules loaded besides the package, `pbo_tf.cli`, `pbo_tf.deps`, `pbo_tf.tf_startup` (the
    start-up line filter, standard library only), `pbo_tf.envs` with its environment modules and
    `pbo_tf.entry_points` (the registry's entry-point loading, standard library only)."""
    return sorted(
        name
        for name in sys.modules
        if name.split(".")[0] == "pbo_tf"
        and not (name in _OWN_MODULES or name.startswith(("pbo_tf.cli.", "pbo_tf.envs.")))
    )


def run(argv: list[str]) -> int:
    """Plays the episodes the flags describe and prints the summary."""
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    import tensorflow as tf

    try:
        from tf_agents.trajectories import time_step as ts
    except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
        from pbo_tf.deps import raise_missing_tf_agents

        raise_missing_tf_agents(error)

    policy = load_policy(FLAGS.policy_dir)
    dtype = observation_dtype(policy)
    env = make_env(FLAGS.env, FLAGS.max_steps)
    returns, discounted = [], []
    for episode in range(FLAGS.episodes):
        obs, _ = env.reset(seed=FLAGS.seed + episode)
        total, disc, steps, done = 0.0, 0.0, 0, False
        while not done:
            step = ts.restart(tf.constant(np.asarray(obs).astype(dtype)[None]), batch_size=1)
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
        "pbo_tf_modules": library_modules(),
    }
    print(json.dumps(summary))
    return 0


def main(argv: list[str] | None = None) -> None:
    """The ``pbo-play`` console script: parses ``argv`` (default ``sys.argv``), runs, exits."""
    cli.run_main(run, FLAGS, argv)


if __name__ == "__main__":
    main()
