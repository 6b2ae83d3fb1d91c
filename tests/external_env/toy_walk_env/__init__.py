"""A five-state walk, an environment package outside pbo_tf: dynamics, gymnasium env, dataset and exact
solution (`toy_walk_env.mdp`), the offline problem (`toy_walk_env.problem`), the online spec
(`toy_walk_env.online`) and the module its ``pbo_tf.envs`` entry point names (`toy_walk_env.registration`).
This module imports nothing, so that the entry point loads only the registration."""
