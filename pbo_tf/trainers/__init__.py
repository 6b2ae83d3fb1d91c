"""Offline trainers: FQI (the baseline) and ProFQI (Algorithm 1), one seed or S seeds in one graph."""

from pbo_tf.trainers.base import OfflineTrainer, train_seeds
from pbo_tf.trainers.fqi import FQITrainer
from pbo_tf.trainers.profqi import ProFQITrainer
from pbo_tf.trainers.seed_batch import seed_axis_rounds

__all__ = ["FQITrainer", "OfflineTrainer", "ProFQITrainer", "seed_axis_rounds", "train_seeds"]
