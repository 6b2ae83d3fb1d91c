"""`pbo_tf.analysis.results.mixed_settings`: runs that share a label are grouped as seeds of one
configuration; where their ``config.gin`` files disagree on a setting other than the seed's, grouping
them warns in one line naming the setting, its values and their seeds."""

import json
import logging

from pbo_tf.analysis import results

CONFIG = """import pbo_tf.experiments.online

# Macros:
# ==============================================================================
K = 2
SEED = {seed}

# Parameters for EquivariantPBO:
# ==============================================================================
EquivariantPBO.centre_hidden = {centre}
EquivariantPBO.channels = \\
    [8,
     8]
{extra}
# Parameters for OnlineExperiment:
# ==============================================================================
OnlineExperiment.root_dir = '/tmp/run_{seed}'
OnlineExperiment.seed = %SEED
"""


def write_run(folder, seed, centre, extra=""):
    folder.mkdir(parents=True)
    curve = [{"k": k, "return": float(seed + k)} for k in range(3)]
    metrics = {
        "env": "gym_CartPole-v1",
        "algorithm": "prodqn_equivariant",
        "K": 2,
        "seed": seed,
        "curve": curve,
    }
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "config.gin").write_text(CONFIG.format(seed=seed, centre=centre, extra=extra))


def test_config_settings_reads_macros_bindings_and_values_over_several_lines(tmp_path):
    write_run(tmp_path / "run", 3, "True", extra="New.option = {'a': 1,\n              'b': 2}\n")
    assert results.config_settings(str(tmp_path / "run")) == {
        "K": "2",
        "SEED": "3",
        "EquivariantPBO.centre_hidden": "True",
        "EquivariantPBO.channels": "[8, 8]",
        "New.option": "{'a': 1, 'b': 2}",
        "OnlineExperiment.root_dir": "'/tmp/run_3'",
        "OnlineExperiment.seed": "%SEED",
    }
    assert results.config_settings(str(tmp_path)) is None  # no config.gin


def test_runs_of_one_label_with_other_settings_are_named_in_one_warning(tmp_path, caplog):
    # seed 0 ran before the option New.option existed: a setting not every run holds is no difference
    write_run(tmp_path / "a" / "seed_0", 0, "False")
    write_run(tmp_path / "a" / "seed_1", 1, "False", extra="New.option = 1\n")
    write_run(tmp_path / "b" / "seed_2", 2, "True", extra="New.option = 1\n")
    runs = results.load_runs(str(tmp_path))
    assert results.mixed_settings(runs) == {"EquivariantPBO.centre_hidden": {"False": [0, 1], "True": [2]}}
    with caplog.at_level(logging.WARNING, logger="pbo_tf.analysis.results"):
        groups = results.group_curves(runs, "return")
    assert list(groups) == [("gym_CartPole-v1", "prodqn_equivariant", 2)]
    warned = [record.getMessage() for record in caplog.records]
    assert warned == [
        "The runs of gym_CartPole-v1, prodqn_equivariant, K = 2 share a label, so they are grouped as "
        "seeds of one configuration, but differ in their settings: EquivariantPBO.centre_hidden = False "
        "(seeds 0, 1) / True (seed 2). Bind the label (Experiment.label, OnlineExperiment.label) to tell "
        "them apart."
    ]


def test_seeds_of_one_configuration_group_without_a_warning(tmp_path, caplog):
    for seed in range(3):
        write_run(tmp_path / f"seed_{seed}", seed, "True")
    (tmp_path / "seed_1" / "config.gin").unlink()  # a run without its config is left out
    runs = results.load_runs(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="pbo_tf.analysis.results"):
        groups = results.group_curves(runs, "return")
    assert groups[("gym_CartPole-v1", "prodqn_equivariant", 2)]["seeds"] == [0, 1, 2]
    assert results.mixed_settings(runs) == {} and not caplog.records
