"""Lunar lander (paper Sec. 6.2), online only: gymnasium's own ``LunarLander-v3`` (Box2D).

* `evaluation`: batched greedy episodes of many parameter vectors and their returns (imports TensorFlow);
* `online`: `LunarLanderEnv`, the online experiment's view (Q family, episode cuts, evaluation), imported by
  the online runner through `pbo_tf.envs.registry`.
"""
