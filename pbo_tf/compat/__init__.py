"""Compatibility with earlier run folders, fenced here: nothing else in pbo_tf knows an old name.

* `pbo_tf.compat.gin_names`: the gin names of earlier ``config.gin`` and ``fingerprint.json`` files, read as
  today's bindings (`pbo_tf.experiments.config.parse_config` and `pbo_tf.experiments.run_folder` call it);
* `pbo_tf.compat.checkpoint_names`: the names under which earlier checkpoints hold the online operator's
  variables, which `pbo_tf.agents.ProDQNAgent` keeps tracked.

This package imports nothing of pbo_tf, so every layer may use it.
"""
