"""The experiments' gin configs, ``<env>/<algorithm>.gin``: installed as the package data
``pbo_tf.gin_configs`` (see setup.py), found through `pbo_tf.experiments.config.GIN_CONFIGS_DIR`."""
