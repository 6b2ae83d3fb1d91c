"""W's FQI members (``WSampler.fqi_members``): the runner runs FQI on the seed's dataset first, and W's last
members are exactly that seed's FQI iterates (an FQI run of the same seed and bindings gives the same ω_k),
the operator is trained (and standardised) on that W, metrics.json records the option, a resumed run reads
the saved iterates, and missing or mismatched inputs are one-line errors."""

import numpy as np
import pytest

from pbo_tf.data.w_set import draw_w_set
from pbo_tf.experiments.config import parse_config
from pbo_tf.experiments.runner import Experiment
from pbo_tf.trainers.builders import W_FQI_ITERATES_FILE
from tests.experiments.runner_sizes import run_tiny

GIN = "gin_configs/car_on_hill/operator_study/study_fixed_point_fqi_w.gin"
FQI_GIN = "gin_configs/car_on_hill/fqi.gin"
NO_NOISE = [
    "WSampler.fqi_members = 2",
    "WSampler.fqi_noise = 0.0",
    "ProFQIConfig.fixed_point_iterations = 2",
]
# the option is about W: a small operator in graph mode trains on it as the paper's size under XLA would
SMALL = ["make_pbo.hidden_multiples = [1, 1]", "ProFQIConfig.jit_compile = False"]


def test_w_holds_the_seeds_fqi_iterates_and_the_operator_trains_on_it(tmp_path):
    fqi = run_tiny(FQI_GIN, tmp_path / "fqi")
    assert fqi["algorithm"] == "fqi"
    fqi_iterates = np.load(tmp_path / "fqi" / "iterates.npz")["iterates"]  # ω_0 .. ω_K, K = 2

    from tests.experiments.runner_sizes import ENV_TINY, TINY

    parse_config([GIN], [*TINY, *ENV_TINY["car_on_hill"], *NO_NOISE, *SMALL])
    experiment = Experiment(root_dir=str(tmp_path / "pbo"), log=None)
    metrics = experiment.run()
    saved = np.load(tmp_path / "pbo" / W_FQI_ITERATES_FILE)["iterates"]
    np.testing.assert_array_equal(saved, fqi_iterates[1:])  # the FQI run's ω_1, ω_2 of the same seed
    assert metrics["operator"]["w_fqi_members"] == 2 and metrics["operator"]["w_fqi_noise"] == 0.0

    run = experiment.runs[0]
    drawn, _ = draw_w_set(run["q"], 4, 0, last_layer_std=0.25)
    w = run["trainer"].w_set.numpy()
    np.testing.assert_array_equal(w[:2], drawn[:2])  # W[0] and W[1] as drawn
    np.testing.assert_array_equal(w[2:], fqi_iterates[1:])  # members 2, 3: ω_1, ω_2 (no noise)
    # the operator's standardisation is that W's, and its activity is measured on it
    np.testing.assert_allclose(run["pbo"].input_mean.numpy(), w.mean(axis=0), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(experiment.algorithm.activity_sets(run["q"], 0)[0], w)
    np.testing.assert_array_equal(run["omega0"], fqi_iterates[0])  # the curve starts at the paper's ω₀


def test_a_resumed_run_reads_the_saved_iterates_and_bad_ones_are_refused(tmp_path):
    from tests.experiments.runner_sizes import ENV_TINY, TINY

    parse_config([GIN], [*TINY, *ENV_TINY["car_on_hill"], *NO_NOISE])
    folder = tmp_path / "pbo"
    Experiment(root_dir=str(folder), log=None).build_seed(0)  # runs FQI and saves its iterates
    planted = np.full((2, 151), 0.5, np.float32)  # not what FQI gives: read, not recomputed
    np.savez(folder / W_FQI_ITERATES_FILE, iterates=planted)
    run = Experiment(root_dir=str(folder), log=None).build_seed(0)
    np.testing.assert_array_equal(run["trainer"].w_set.numpy()[2:], planted)

    np.savez(folder / W_FQI_ITERATES_FILE, iterates=planted[:1])
    with pytest.raises(ValueError, match=r"holds iterates of shape \[1, 151\], not \[2, 151\] \(K, d\)"):
        Experiment(root_dir=str(folder), log=None).build_seed(0)


def test_without_fqi_bindings_the_option_is_a_one_line_error(tmp_path):
    from tests.experiments.runner_sizes import ENV_TINY, TINY

    parse_config(
        ["gin_configs/car_on_hill/profqi_fixed_point.gin"],
        [*TINY, *ENV_TINY["car_on_hill"], *NO_NOISE],
    )
    with pytest.raises(
        ValueError, match="WSampler.fqi_members runs FQI first and needs the FQIConfig bindings"
    ):
        Experiment(root_dir=str(tmp_path / "pbo"), log=None).build_seed(0)
