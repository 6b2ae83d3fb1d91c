"""Registers ``toy_walk`` with pbo_tf (the module the ``pbo_tf.envs`` entry point names)."""

from pbo_tf.envs import registry

registry.register(
    "toy_walk",
    problem="toy_walk_env.problem:ToyWalkProblem",
    online="toy_walk_env.online:ToyWalkOnline",
    gym_id="toy_walk_env/ToyWalk-v0",
    entry_point="toy_walk_env.mdp:ToyWalkEnv",
    max_episode_steps=10,
)
