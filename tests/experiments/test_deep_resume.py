"""The recommended deep configuration (`profqi_fixed_point.gin`: standardised input, SiLU, Glorot kernels, W
with drawn last layers and the deep fixed-point term) resumes exactly: two seeds trained in one graph and
stopped after refresh 2, rebuilt from their checkpoints by a new experiment, end with the same operator
weights and Adam state, bit for bit, as the same two seeds trained without a stop. (The kill-and-resume
tests kill real processes on chain-walk's linear operator; the whole-budget runs of this configuration are
resumed between sessions.)"""

import numpy as np

from pbo_tf.experiments.config import parse_config
from pbo_tf.experiments.runner import Experiment
from pbo_tf.trainers import train_seeds
from tests.experiments.runner_sizes import ENV_TINY

GIN = "gin_configs/car_on_hill/profqi_fixed_point.gin"
SIZES = ["K=2", "REFRESHES=3", "PASSES_PER_REFRESH=1", "EXTRA_ITERATIONS=1", "NUM_SEEDS=2"]
# two hidden layers of width d instead of four of 2d, and graph mode instead of one XLA program per refresh:
# the same options and checkpointed state at a third of the time (XLA's compile dominates at this size)
SMALL = ["make_pbo.hidden_multiples = [1, 1]", "ProFQIConfig.jit_compile = False"]


def _train(root, slices):
    """Trains the two seeds in slices of refreshes (None: to the end), a new experiment for each slice;
    returns each seed's operator weights and Adam variables, the refreshes done, and the refreshes each
    slice's rebuilt trainers started from (what they restored)."""
    starts = []
    for rounds in slices:
        experiment = Experiment(root_dir=str(root), log=None)
        runs = [experiment.build_seed(seed) for seed in experiment.seeds]
        trainers = [r["trainer"] for r in runs]
        starts.append([t.rounds_done for t in trainers])
        train_seeds(trainers, log=None, max_rounds=rounds)
    state = [[v.numpy() for v in t.pbo.trainable_variables + t.optimizer.variables] for t in trainers]
    return state, [t.rounds_done for t in trainers], starts


def test_the_recommended_deep_configuration_resumes_bit_for_bit(tmp_path):
    parse_config([GIN], [*SIZES, *SMALL, *ENV_TINY["car_on_hill"]])
    straight, done, _ = _train(tmp_path / "straight", [None])
    resumed, done_resumed, starts = _train(tmp_path / "resumed", [2, None])
    assert done == done_resumed == [3, 3]
    # the second slice's trainers were rebuilt at refresh 2 from the checkpoints and trained the third
    # only (a deterministic rerun from scratch would end with the same weights: the start tells them apart)
    assert starts == [[0, 0], [2, 2]]
    for seed_straight, seed_resumed in zip(straight, resumed, strict=True):
        assert len(seed_straight) == len(seed_resumed) > 6  # 3 layers' kernels and biases, Adam's moments
        for a, b in zip(seed_straight, seed_resumed, strict=True):
            np.testing.assert_array_equal(a, b)
    # the two seeds trained differently (the comparison is not between two copies of one state)
    assert not np.array_equal(straight[0][0], straight[1][0])
