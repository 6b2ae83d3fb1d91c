"""`pbo_tf.schedule.Schedule` and the builders' schedule rules, counted by hand."""

import gin
import pytest

from pbo_tf.agents.builders import DQN, ProDQN
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


def test_dqn_refreshes_are_its_k_and_prodqn_s_default_to_k():
    dqn = DQN().schedule(8, None, 6000)
    assert (dqn.K, dqn.refreshes, dqn.steps_per_refresh, dqn.n_curve_points) == (8, 8, 6000, 9)
    with pytest.raises(ValueError, match="DQN's refreshes are its K=8 target updates"):
        DQN().schedule(8, 8, 6000)  # one quantity, one setting: even the same value is refused
    gin.clear_config()
    gin.parse_config(
        "ProDQNConfig.K = 10\nProDQNConfig.refreshes = 3000\nProDQNConfig.train_steps_per_refresh = 25\n"
        "ProDQNConfig.extra_iterations = 10"
    )
    prodqn = ProDQN().schedule(None, None, None)
    assert (prodqn.K, prodqn.refreshes, prodqn.total_steps, prodqn.n_curve_points) == (10, 3000, 75_000, 21)
    # ProDQN's schedule has one home, its config: the runner's fields are refused, naming it
    for position, key in enumerate(("K", "refreshes", "train_steps_per_refresh")):
        runner_fields = [None, None, None]
        runner_fields[position] = 4
        with pytest.raises(ValueError, match=f"ProDQN's {key} is ProDQNConfig.{key}: leave OnlineExperiment"):
            ProDQN().schedule(*runner_fields)
    gin.clear_config()
