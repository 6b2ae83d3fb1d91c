"""A ProFQI run with the operator options: metrics.json and the config record them, the progress line and
TensorBoard show the operator's activity and the learning rate at the refreshes the monitor ran (the rate
checked against the linear schedule), a dead layer shows as 0 active units, and the trained operator
reloads with its standardisation and the run's ω₀."""

import glob
import os

import numpy as np
import tensorflow as tf

from pbo_tf.evaluation.operator_activity import activity_monitor
from pbo_tf.experiments.reader import load_trained_operator
from pbo_tf.operators import DeepPBO
from pbo_tf.q import FlatMLPQ

GIN = "gin_configs/car_on_hill/profqi.gin"
OPTIONS = [
    "make_pbo.residual = True",
    "make_pbo.standardise = True",
    "make_pbo.activation = 'silu'",
    "make_pbo.kernel_init = 'glorot_uniform'",
    "WSampler.last_layer_std = 0.25",
    "WSampler.omega0 = 'w0'",
    "ProFQIConfig.monitor_every = 2",
    "ProFQIConfig.progress_every_s = 0",
    "REFRESHES = 3",
]


def _scalars(folder):
    """``{tag: {step: value}}`` of the TensorBoard event files in ``folder``."""
    out = {}
    for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                number = (
                    float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                )
                out.setdefault(value.tag, {})[event.step] = number
    return out


def test_a_run_with_options_records_and_monitors_its_operator(tmp_path):
    lines = []
    root = tmp_path / "run"
    from pbo_tf.experiments.config import parse_config
    from pbo_tf.experiments.runner import Experiment
    from tests.experiments.runner_sizes import ENV_TINY, TINY

    parse_config([GIN], [*TINY, *ENV_TINY["car_on_hill"], *OPTIONS])
    metrics = Experiment(root_dir=str(root), log=lines.append).run()
    operator = metrics["operator"]
    assert operator["kind"] == "DeepPBO" and operator["residual"] and operator["standardise"]
    assert operator["activation"] == "silu" and operator["kernel_init"] == "glorot_uniform"
    assert operator["w_last_layer_std"] == 0.25 and operator["omega0"] == "w0"
    assert metrics["budget"]["refreshes_done"] == 3
    config = (root / "config.gin").read_text()
    assert "WSampler.last_layer_std = 0.25" in config and "make_pbo.residual = True" in config

    # the monitor ran at refreshes 2 and 3 (every 2, and the last): progress text and TensorBoard
    progress = [line for line in lines if line.startswith("ProFQI refresh")]
    assert [("Λ on W: active" in line) for line in progress] == [False, True, True]
    scalars = _scalars(root / "tensorboard")
    assert sorted(scalars["operator/W_active_units_layer1"]) == [2, 3]
    assert sorted(scalars["operator/fresh_relative_spread"]) == [2, 3]
    width = 2 * 151
    assert all(0 <= v <= width for v in scalars["operator/W_active_units_layer4"].values())
    # the learning rate of refresh r's last Adam step, step r × steps_per_refresh − 1 (counted from 0) of
    # the linear schedule
    steps_per_refresh = 1 * 2 * (1000 // 500)  # passes × W batches (4 / 2) × D batches (1000 / 500)
    total = 3 * 1 * (1000 // 500)  # the reference's count: refreshes × passes × D batches
    for r in (1, 2, 3):
        expected = 1e-3 + (5e-7 - 1e-3) * min(r * steps_per_refresh - 1, total) / total
        np.testing.assert_allclose(scalars["learning_rate"][r], expected, rtol=1e-5)

    # the operator reloads with its standardisation; ω₀ is W[0] as drawn ("w0")
    pbo, q, omega0 = load_trained_operator(str(root))
    assert isinstance(pbo, DeepPBO) and pbo.residual and pbo.standardise
    from pbo_tf.data.w_set import draw_w_set

    w, w0 = draw_w_set(q, 4, 0, last_layer_std=0.25, omega0="w0")
    np.testing.assert_array_equal(omega0, w0)
    np.testing.assert_allclose(pbo.input_mean.numpy(), w.mean(axis=0), rtol=1e-5, atol=1e-7)
    iterates = np.load(root / "iterates.npz")["iterates"]
    np.testing.assert_allclose(pbo.iterate(omega0[None], 2)[:, 0].numpy(), iterates[:3], rtol=1e-5, atol=1e-6)


def test_paper_config_records_the_papers_operator():
    from pbo_tf.experiments.config import parse_config
    from pbo_tf.operators.factory import WSampler, make_pbo, operator_config

    parse_config([GIN])
    q = FlatMLPQ(2, [30], [-1.0, 1.0])
    recorded = {**operator_config(make_pbo(None, q)), **WSampler().config()}
    assert recorded == {
        "kind": "DeepPBO", "d": 151, "hidden_units": [302] * 4, "init_std": 5e-7, "compute_dtype": None,
        "activation": "relu", "kernel_init": "truncated_normal", "residual": False, "standardise": False,
        "w_last_layer_std": 0.0, "omega0": "paper",
    }  # fmt: skip


def test_the_monitor_reports_a_dead_layer():
    q = FlatMLPQ(2, [4], [-1.0, 1.0])
    w, fresh = q.initial_params(6, 0), q.initial_params(5, 9)
    pbo = DeepPBO(q.d, hidden_units=[8, 8], kernel_init="glorot_uniform")
    pbo.ensure_built()
    monitor = activity_monitor(w, fresh)
    scalars, text = monitor(pbo)
    assert scalars["operator/W_active_units_layer2"] > 0 and scalars["operator/W_relative_spread"] > 0
    pbo.hidden_layers[1].bias.assign(np.full(8, -1e4, np.float32))  # layer 2 dies
    scalars, text = monitor(pbo)
    assert (
        scalars["operator/W_active_units_layer2"] == 0 and scalars["operator/fresh_active_units_layer2"] == 0
    )
    assert scalars["operator/W_relative_spread"] == 0.0
    assert "on W: active [" in text and ", 0], spread 0" in text
