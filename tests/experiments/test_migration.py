"""Gin names of earlier run folders: committed ``config.gin`` files load, and a fingerprint recorded under
the old names resumes (`pbo_tf.compat.gin_names`)."""

import glob
import json
import os
import shutil

import pytest

import pbo_tf.experiments.online  # noqa: F401  (the online configurables)
import pbo_tf.experiments.runner  # noqa: F401  (the offline configurables)
from pbo_tf.compat.gin_names import BY_ALGORITHM, LOSS_OPTIONS, RENAMED, RETIRED, migrate_text
from pbo_tf.experiments import run_folder
from pbo_tf.experiments.config import GinConfigError, parse_config, resolved_bindings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED = sorted(glob.glob(os.path.join(REPO, "results", "**", "config.gin"), recursive=True))
OLD = set(RENAMED) | set(RETIRED) | set(LOSS_OPTIONS)
#: The fingerprint.json that ``chain_walk/profqi.gin`` with K=5 and REFRESHES=30 wrote under the old names.
OLD_FINGERPRINT = os.path.join(os.path.dirname(__file__), "data", "old_names_fingerprint.json")
#: ``{name: {gin_file, bindings_given, fingerprint}}``: the fingerprints that the code before the baselines'
#: configs wrote for FQI, i-FQI, the oracle, DQN and i-DQN (K on the runners, the trainers' own bindings).
OLD_BASELINES = os.path.join(os.path.dirname(__file__), "data", "old_names_fingerprints_baselines.json")


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
    # the same old name on the command line
    parse_config(["chain_walk/profqi.gin"], ["ProFQITrainer.refreshes = 7"])
    assert resolved_bindings()["ProFQIConfig.refreshes"] == 7


@pytest.mark.parametrize(
    "folder, config, want",
    [
        ("lqr/k4/fqi", "FQIConfig", {"K": 4, "extra_iterations": 10, "max_epochs": 800, "batch_size": 121}),
        ("car_on_hill/k9/ifqi/seeds_0-9", "IFQIConfig", {"K": 9, "jit_compile": "round"}),
        ("lqr/k4/oracle", "OracleConfig", {"K": 4, "extra_iterations": 10}),
    ],
)
def test_old_baseline_names_read_as_their_config_fields(folder, config, want):
    """``Experiment.K`` is the config's K of whichever algorithm the run had; FQI's and i-FQI's trainer
    bindings are their configs' fields; ``Experiment.w_size = 1`` and the trainers' ``@AnnealedAdam()``
    drop."""
    parse_config([os.path.join(REPO, "results", folder, "config.gin")])
    bindings = resolved_bindings()
    for field, value in want.items():
        assert bindings[f"{config}.{field}"] == value, field
    assert not [key for key in bindings if key.split(".")[0] in ("FQITrainer", "IFQITrainer")]
    assert "Experiment.K" not in bindings and "Experiment.w_size" not in bindings


def test_old_online_baseline_names_read_as_their_config_fields():
    parse_config(["lunar_lander/dqn.gin"], ["OnlineExperiment.K = 4", "OnlineExperiment.refreshes = None"])
    bindings = resolved_bindings()
    assert bindings["DQNConfig.K"] == 4 and bindings["DQNConfig.train_steps_per_refresh"] == 6000
    assert not [key for key in bindings if key.startswith("OnlineExperiment.") and "refreshes" in key]
    parse_config(["acrobot/idqn.gin"], ["OnlineExperiment.refreshes = 7", "make_dqn_agent.name = None"])
    assert resolved_bindings()["IDQNConfig.refreshes"] == 7
    # the one old value a DQN run never had: refreshes other than its K target updates
    with pytest.raises(GinConfigError, match=r"OnlineExperiment.refreshes = 7 is not a binding; DQN's"):
        parse_config(["lunar_lander/dqn.gin"], ["OnlineExperiment.refreshes = 7"])
    with pytest.raises(GinConfigError, match=r"Experiment.w_size = 30 is not a binding; only ProFQI"):
        parse_config(["chain_walk/fqi.gin"], ["Experiment.w_size = 30"])


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


@pytest.mark.parametrize("name", ["fqi", "ifqi", "oracle", "dqn", "idqn"])
def test_a_baseline_folder_fingerprinted_under_the_old_names_resumes(tmp_path, name):
    with open(OLD_BASELINES, encoding="utf-8") as f:
        old = json.load(f)[name]
    (tmp_path / run_folder.FINGERPRINT_FILE).write_text(json.dumps(old["fingerprint"]))
    (tmp_path / "config.gin").write_text("")  # a folder with a run in progress
    parse_config([old["gin_file"]], old["bindings_given"])
    current = run_folder.fingerprint()
    assert current["hash"] != old["fingerprint"]["hash"]  # recorded under other names
    assert run_folder.check(str(tmp_path), current) == "resume"
    parse_config([old["gin_file"]], ["K = 7"])  # another K is another experiment
    with pytest.raises(run_folder.RunFolderConflict, match=r"Config\.K: \d in the folder, 7 now"):
        run_folder.check(str(tmp_path), run_folder.fingerprint())


def test_the_loss_options_of_old_configs_read_as_the_loss_terms():
    """``fixed_point_term = True`` (any of the four old owners) lists Eq. (4)'s term on the algorithm's
    config, each option becomes its term's parameter, and an option that held its default is dropped: the
    operative configs of committed runs (which list every option) load with exactly the terms they ran."""
    from pbo_tf.compat.gin_names import LOSS_OPTIONS, migrate_bindings

    run = os.path.join(REPO, "results", "gym_online", "runs", "acrobot")
    parse_config([os.path.join(run, "prodqn_fixed_point", "seed_0", "config.gin")])
    bindings = resolved_bindings()
    assert bindings["ProDQNConfig.loss_terms"] == ["@BellmanTerm()", "@FixedPointTerm()"]
    assert bindings["FixedPointTerm.iterations"] == 30
    assert not [key for key in bindings if key in LOSS_OPTIONS or key.startswith("BellmanTerm.")]
    assert "FixedPointTerm.radius" not in bindings  # it held None, the default
    parse_config([os.path.join(run, "prodqn", "seed_0", "config.gin")])
    bindings = resolved_bindings()
    assert bindings["ProDQNConfig.loss_terms"] == ["@BellmanTerm()"]
    assert not [key for key in bindings if "FixedPointTerm" in key or key in LOSS_OPTIONS]
    parse_config([os.path.join(REPO, "results", "chain_walk", "k5", "profqi_inf", "config.gin")])
    assert resolved_bindings()["ProFQIConfig.loss_terms"] == ["@BellmanTerm()", "@FixedPointTerm()"]
    # a fingerprint recorded under the old names is today's parse of the same choices
    old = {
        "ProFQITrainer.fixed_point_term": True,
        "ProFQIConfig.fixed_point_iterations": 30,
        "ProFQIConfig.fixed_point_radius": None,
        "ProFQIConfig.normalisation": "mean",
        "ProFQIConfig.fixed_point_from": "w",
    }
    parse_config(
        ["chain_walk/profqi.gin"],
        [
            "ProFQIConfig.loss_terms = [@BellmanTerm(), @FixedPointTerm()]",
            "FixedPointTerm.iterations = 30",
            "FixedPointTerm.start = 'w'",
        ],
    )
    today = resolved_bindings()
    migrated = migrate_bindings(old)
    assert migrated == {key: today[key] for key in migrated}
    assert sorted(migrated) == [
        "FixedPointTerm.iterations",
        "FixedPointTerm.start",
        "ProFQIConfig.loss_terms",
    ]
    with pytest.raises(GinConfigError, match="fixed_point_term = 1 is not a binding; list the terms in"):
        parse_config(["chain_walk/profqi.gin"], ["ProFQIConfig.fixed_point_term = 1"])
