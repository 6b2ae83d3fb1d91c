"""`pbo_tf.schedule.Schedule` and the algorithms' configs that derive it, counted by hand."""

import gin
import pytest

from pbo_tf.agents.builders import DQN, ProDQN
from pbo_tf.configs import DQNConfig, FQIConfig, IDQNConfig, IFQIConfig, OracleConfig
from pbo_tf.schedule import Schedule


def test_a_schedule_counts_the_curve_and_the_training_steps():
    s = Schedule(K=9, extra_iterations=10, refreshes=3000, steps_per_refresh=25)
    assert s.n_curve_points == 20  # k = 0..19
    assert s.total_steps == 75_000
    offline = Schedule(K=2)
    assert offline.n_curve_points == 3
    with pytest.raises(ValueError, match="no refreshes and steps per refresh"):
        offline.total_steps  # noqa: B018


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(K=0), "K must be an integer >= 1, got 0"),
        (dict(K=2, extra_iterations=-1), "extra_iterations must be an integer >= 0, got -1"),
        (dict(K=2, refreshes=0), "refreshes must be an integer >= 1, got 0"),
        (dict(K=2, steps_per_refresh=2.5), "steps_per_refresh must be an integer >= 1, got 2.5"),
        (dict(K=True), "K must be an integer >= 1, got True"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Schedule(**kwargs)


def test_each_algorithm_s_schedule_is_its_config_s():
    """K, the refreshes and the curve's length come from the algorithm's config alone (counted by hand)."""
    dqn = DQNConfig(K=8, train_steps_per_refresh=6000).schedule()
    assert (dqn.K, dqn.refreshes, dqn.steps_per_refresh, dqn.n_curve_points) == (8, 8, 6000, 9)
    assert DQNConfig(K=8, train_steps_per_refresh=6000).refreshes == 8  # its K target updates
    idqn = IDQNConfig(K=3, refreshes=5000, train_steps_per_refresh=80).schedule()
    assert (idqn.K, idqn.total_steps, idqn.n_curve_points) == (3, 400_000, 4)
    fqi = FQIConfig(K=9, max_epochs=1200, patience=30, batch_size=500).schedule()
    assert (fqi.K, fqi.n_curve_points, fqi.refreshes) == (9, 20, None)  # k = 0..19, null past K
    ifqi = IFQIConfig(K=9, refreshes=1000, passes_per_refresh=40, batch_size=500, extra_iterations=0)
    assert ifqi.schedule().n_curve_points == 10
    assert OracleConfig(K=4, extra_iterations=3).schedule().n_curve_points == 8
    gin.clear_config()
    gin.parse_config(
        "ProDQNConfig.K = 10\nProDQNConfig.refreshes = 3000\nProDQNConfig.train_steps_per_refresh = 25\n"
        "ProDQNConfig.extra_iterations = 10\nDQNConfig.K = 8\nDQNConfig.train_steps_per_refresh = 6000"
    )
    prodqn = ProDQN().schedule
    assert (prodqn.K, prodqn.refreshes, prodqn.total_steps, prodqn.n_curve_points) == (10, 3000, 75_000, 21)
    assert DQN().schedule == dqn
    gin.clear_config()


FQI = dict(K=1, max_epochs=1, patience=1, batch_size=1)
DQN_ = dict(K=2, train_steps_per_refresh=1)


@pytest.mark.parametrize(
    "config, kwargs, message",
    [
        (FQIConfig, {**FQI, "K": 0}, "FQIConfig.K must be an integer >= 1, got 0"),
        (FQIConfig, {**FQI, "patience": 0}, "FQIConfig.patience must be an integer >= 1"),
        (
            FQIConfig,
            {**FQI, "jit_compile": "rond"},
            r"FQIConfig.jit_compile must be one of \(False, True, 'round",
        ),
        (IFQIConfig, dict(K=1, refreshes=1, passes_per_refresh=1.5, batch_size=1), "IFQIConfig.passes_per_"),
        (
            OracleConfig,
            dict(K=2, extra_iterations=-1),
            "OracleConfig.extra_iterations must be an integer >= 0",
        ),
        (DQNConfig, {**DQN_, "train_steps_per_refresh": 0}, "DQNConfig.train_steps_per_refresh must be"),
        (
            DQNConfig,
            {**DQN_, "jit_compile": "round"},
            r"DQNConfig.jit_compile must be one of \(False, True\)",
        ),
        (DQNConfig, {**DQN_, "target_update_tau": 0}, r"DQNConfig.target_update_tau must lie in \(0, 1\]"),
        (DQNConfig, {**DQN_, "gradient_clipping": -1}, "DQNConfig.gradient_clipping must be None or > 0"),
        (IDQNConfig, {**DQN_, "refreshes": True}, "IDQNConfig.refreshes must be an integer >= 1, got True"),
    ],
)
def test_a_bad_config_field_is_refused_in_one_line_naming_it(config, kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}") as error:
        config(**kwargs)
    assert "\n" not in str(error.value)
