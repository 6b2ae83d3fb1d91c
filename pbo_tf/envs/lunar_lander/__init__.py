"""Lunar lander (paper Sec. 6.2), online only: gymnasium's own ``LunarLander-v3`` (Box2D).

* `evaluation`: `evaluate_lunar_lander`, the generic greedy evaluation (`pbo_tf.envs.gym.evaluation`) with
  lunar lander's defaults;
* `online`: `LunarLanderEnv`, the online experiment's view (Q family, episode cuts, evaluation), imported by
  the online runner through `pbo_tf.envs.registry`.
"""
