"""Shared by the runner tests: bindings that shrink every offline gin file to test size."""

import os

from pbo_tf.experiments.config import parse_config
from pbo_tf.experiments.runner import Experiment

# |W| = 30 or 50 costs one Keras model build per member; 4 exercise the same code.
SMALL_W = ["Experiment.w_size = 4", "ProFQITrainer.w_batch_size = 2"]
# Per-env bindings that shrink datasets and evaluations to test size.
ENV_TINY = {
    "car_on_hill": ["CarOnHillProblem.n_random = 900", "CarOnHillProblem.n_oriented = 100", *SMALL_W],
    "bicycle_offline": ["BicycleProblem.n_transitions = 2000", "N_ROLLOUTS = 3", "MAX_STEPS = 300", *SMALL_W],
}
TINY = ["K=2", "REFRESHES=1", "PASSES_PER_REFRESH=1", "MAX_EPOCHS=2", "PATIENCE=1", "EXTRA_ITERATIONS=3"]


def run_tiny(gin_file, root, bindings=()):
    """Runs ``gin_file`` at test size (plus ``bindings``) into ``root``; returns its metrics."""
    env_tiny = ENV_TINY.get(os.path.basename(os.path.dirname(gin_file)), [])
    parse_config([gin_file], list(TINY) + env_tiny + list(bindings))
    return Experiment(root_dir=str(root), log=None).run()
