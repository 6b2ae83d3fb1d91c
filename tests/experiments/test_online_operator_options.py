"""An online ProDQN run with the operator options: the progress line and TensorBoard carry the operator's
activity and learning rate, the agent acts from the chosen ω₀, and metrics.json's activity is measured on
the run's own W."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.data.w_set import draw_w_set
from pbo_tf.evaluation.operator_activity import set_activity
from pbo_tf.experiments.config import parse_config
from pbo_tf.experiments.online import OnlineExperiment
from tests.experiments.test_online import HIDDEN, TINY

GIN = "gin_configs/lunar_lander/prodqn.gin"


def test_prodqn_with_options_monitors_its_operator(tmp_path):
    options = [
        "make_pbo.residual = True",
        "make_pbo.standardise = True",
        "make_pbo.activation = 'leaky_relu'",
        "WSampler.last_layer_std = 0.1",
        "WSampler.omega0 = 'w0'",
    ]
    parse_config([GIN], TINY + [HIDDEN["lunar_lander"]] + options)
    lines = []
    experiment = OnlineExperiment(root_dir=str(tmp_path / "run"), log=lines.append)
    metrics = experiment.run()
    progress = [line for line in lines if line.startswith("training step")]
    assert progress and all("Λ on W: active [" in line and "lr " in line for line in progress)
    events = glob.glob(os.path.join(tmp_path, "run", "tensorboard", "events.out.tfevents.*"))
    tags = {
        v.tag for path in events for e in tf.compat.v1.train.summary_iterator(path) for v in e.summary.value
    }
    assert {"learning_rate", "operator/W_relative_spread", "operator/fresh_active_units_layer1"} <= tags
    # the acting chain starts at W[0] as drawn, and the activity was measured on that W
    algorithm = experiment.algorithm
    w, w0 = draw_w_set(experiment.q, 4, metrics["seed"], last_layer_std=0.1, omega0="w0")
    np.testing.assert_array_equal(algorithm.omega0, w0)
    np.testing.assert_allclose(algorithm.agent.pbo.input_mean.numpy(), w.mean(axis=0), rtol=1e-5, atol=1e-7)
    assert metrics["operator_activity"]["W"]["n"] == 4
    want = set_activity(algorithm.agent.pbo, w)  # the activity recomputed on the drawn W
    got = metrics["operator_activity"]["W"]
    assert got["active_units"] == want["active_units"] and min(want["active_units"]) > 0
    assert got["relative_spread"] == pytest.approx(want["relative_spread"], rel=1e-5)
    assert metrics["operator_activity"]["constant"] is False  # a residual operator never is


def test_prodqn_refuses_w_fqi_members_in_one_line(tmp_path):
    parse_config([GIN], TINY + [HIDDEN["lunar_lander"], "WSampler.fqi_members = 2"])
    with pytest.raises(
        ValueError, match="WSampler.fqi_members needs FQI's iterates on a dataset; online runs"
    ):
        OnlineExperiment(root_dir=str(tmp_path / "run"), log=None).build()
    assert not os.path.exists(tmp_path / "run" / "metrics.json")
