"""Gin names of earlier run folders: committed ``config.gin`` files load, and a fingerprint recorded under
the old names resumes (`pbo_tf.experiments.migration`)."""

import glob
import json
import os
import shutil

import pytest

import pbo_tf.experiments.online  # noqa: F401  (the online configurables)
import pbo_tf.experiments.runner  # noqa: F401  (the offline configurables)
from pbo_tf.experiments import run_folder
from pbo_tf.experiments.config import GinConfigError, parse_config, resolved_bindings
from pbo_tf.experiments.migration import BY_ALGORITHM, RENAMED, RETIRED, migrate_text

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED = sorted(glob.glob(os.path.join(REPO, "results", "**", "config.gin"), recursive=True))
OLD = set(RENAMED) | set(RETIRED)
#: The fingerprint.json that ``chain_walk/profqi.gin`` with K=5 and REFRESHES=30 wrote under the old names.
OLD_FINGERPRINT = os.path.join(os.path.dirname(__file__), "data", "old_names_fingerprint.json")


def test_every_committed_config_gin_loads_under_todays_names():
    assert len(COMMITTED) > 100
    for path in COMMITTED:
        parse_config([path])
        bindings = resolved_bindings()
        algorithm = bindings.get("Experiment.algorithm") or bindings.get("OnlineExperiment.agent")
        moved = set(BY_ALGORITHM.get(str(algorithm).lstrip("@"), {}))
        left = {key for key in bindings if key.rsplit("/", 1)[-1] in OLD | moved}
        assert not left, f"{path}: {sorted(left)}"


def test_old_names_read_as_the_config_fields():
    parse_config([os.path.join(REPO, "results", "car_on_hill", "k9_5pct", "profqi", "config.gin")])
    bindings = resolved_bindings()
    assert bindings["ProFQIConfig.K"] == 9 and bindings["ProFQIConfig.refreshes"] == 50
    assert bindings["ProFQIConfig.w_size"] == 30 and bindings["ProFQIConfig.jit_compile"] == "round"
    assert "Experiment.K" not in bindings and "ProFQITrainer.optimizer" not in bindings
    # the same old name on the command line, and on another algorithm (FQI keeps Experiment.K)
    parse_config(["chain_walk/profqi.gin"], ["ProFQITrainer.refreshes = 7", "OnlineExperiment.K = 3"])
    assert resolved_bindings()["ProFQIConfig.refreshes"] == 7
    parse_config(["chain_walk/fqi.gin"], ["K = 4"])
    assert resolved_bindings()["Experiment.K"] == 4


def test_a_retired_binding_with_a_value_the_runs_never_had_is_refused_in_one_line():
    with pytest.raises(
        GinConfigError, match=r"^gin binding .*ProFQITrainer.optimizer = @make_adam\(\) is not a"
    ):
        parse_config(["chain_walk/profqi.gin"], ["ProFQITrainer.optimizer = @make_adam()"])
    text, notes = migrate_text("ProDQNAgent.name = None\nProDQN.w_size = 4\n", "ProDQN")
    assert text == "\nProDQNConfig.w_size = 4\n" and notes == [
        "ProDQNAgent.name (dropped)",
        "ProDQN.w_size -> ProDQNConfig.w_size",
    ]


def test_a_folder_fingerprinted_under_the_old_names_resumes(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(OLD_FINGERPRINT, folder / run_folder.FINGERPRINT_FILE)
    (folder / "config.gin").write_text("")  # a folder with a run in progress
    parse_config(["chain_walk/profqi.gin"], ["K=5", "REFRESHES=30"])
    current = run_folder.fingerprint()
    assert current["hash"] != json.loads((folder / run_folder.FINGERPRINT_FILE).read_text())["hash"]
    assert run_folder.check(str(folder), current) == "resume"
    # another experiment is still refused, naming today's binding
    parse_config(["chain_walk/profqi.gin"], ["K=5", "REFRESHES=31"])
    with pytest.raises(
        run_folder.RunFolderConflict, match="ProFQIConfig.refreshes: 30 in the folder, 31 now"
    ):
        run_folder.check(str(folder), run_folder.fingerprint())
