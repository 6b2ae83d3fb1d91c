"""A run folder belongs to one experiment: the config fingerprint (operative bindings, macros resolved,
cosmetic bindings left out), the check on relaunch, moving a folder aside, the refusal of folders without a
fingerprint, and failure records."""

import json
import os

import pytest

from pbo_tf.experiments import run_folder
from pbo_tf.experiments.config import GIN_CONFIGS_DIR, parse_config
from pbo_tf.utils import DivergenceError

PROFQI = os.path.join(GIN_CONFIGS_DIR, "chain_walk", "profqi.gin")


def _fingerprint(*bindings):
    parse_config([PROFQI], list(bindings))
    return run_folder.fingerprint()


def test_the_fingerprint_covers_what_changes_results_and_only_that():
    base = _fingerprint()
    assert base["bindings"]["ProFQIConfig.K"] == 5 and base["bindings"]["ProFQIConfig.refreshes"] == 1000
    assert not any(key.startswith("gin.macro") or "." not in key for key in base["bindings"])
    # A macro and the binding it sets are the same experiment; an unused macro changes nothing.
    assert _fingerprint("ProFQIConfig.K = 5")["hash"] == base["hash"]
    assert _fingerprint("Experiment.K = 5")["hash"] == base["hash"]  # the old name, migrated
    assert _fingerprint("MAX_EPOCHS = 3")["hash"] == base["hash"]  # (an FQI macro, unused by ProFQI)
    # Cosmetic bindings are recorded apart and do not count.
    cosmetic = _fingerprint(
        "ProFQIConfig.checkpoint_every_s = 1.0", "ProFQIConfig.progress_every_s = 2.0", "EVAL_EVERY = 7"
    )
    assert cosmetic["hash"] == base["hash"]
    assert cosmetic["cosmetic"] == {
        "ProFQIConfig.checkpoint_every_s": 1.0,
        "ProFQIConfig.progress_every_s": 2.0,
        "Experiment.eval_every": 7,  # the evaluation during training (chain_walk/common.gin's EVAL_EVERY)
    }
    for binding in ("K = 3", "SEED = 1", "AnnealedAdam.lr_start = 0.02", "ChainWalkProblem.repetitions = 5"):
        assert _fingerprint(binding)["hash"] != base["hash"], binding
    # Lists and tuples are the same value.
    assert run_folder.fingerprint({"A.x": (1, 2)})["hash"] == run_folder.fingerprint({"A.x": [1, 2]})["hash"]


def test_a_folder_is_claimed_resumed_skipped_or_refused_by_its_fingerprint(tmp_path):
    root = str(tmp_path / "run")
    k5, k3 = _fingerprint(), _fingerprint("K = 3")
    assert run_folder.claim(root, k5) == "new"
    assert json.loads((tmp_path / "run" / "fingerprint.json").read_text())["hash"] == k5["hash"]
    (tmp_path / "run" / "config.gin").write_text("")
    assert run_folder.claim(root, k5) == "resume"
    with pytest.raises(
        run_folder.RunFolderConflict, match=r"ProFQIConfig.K: 5 in the folder, 3 now.*--overwrite"
    ):
        run_folder.claim(root, k3)
    (tmp_path / "run" / "metrics.json").write_text("{}")
    assert run_folder.check(root, k5) == "complete"
    with pytest.raises(run_folder.RunFolderConflict, match="holds another experiment"):  # complete or not
        run_folder.check(root, k3)
    # --overwrite moves the folder aside (never deletes it) and starts afresh.
    messages = []
    assert run_folder.claim(root, k3, overwrite=True, log=messages.append) == "new"
    (old,) = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert (old / "metrics.json").exists() and "moved it to" in messages[0]
    assert json.loads((tmp_path / "run" / "fingerprint.json").read_text())["hash"] == k3["hash"]
    assert run_folder.move_aside(root) != str(old)  # a second move in the same second gets its own name


def test_a_sweep_log_alone_is_an_empty_folder_and_a_file_or_stray_folder_is_refused(tmp_path):
    fp = _fingerprint()
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "log.txt").write_text("started\n")
    assert run_folder.claim(str(tmp_path / "sweep"), fp) == "new"
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "notes.txt").write_text("mine")
    with pytest.raises(run_folder.RunFolderConflict, match="not empty and has no fingerprint.json"):
        run_folder.claim(str(tmp_path / "stray"), fp)
    (tmp_path / "file").write_text("x")
    with pytest.raises(run_folder.RunFolderError, match="is a file"):
        run_folder.claim(str(tmp_path / "file"), fp)
    with pytest.raises(run_folder.RunFolderError, match="cannot write the run folder"):
        run_folder.claim(str(tmp_path / "file" / "below"), fp)
    (tmp_path / "sweep" / "fingerprint.json").write_text("{not json")
    with pytest.raises(run_folder.RunFolderError, match="fingerprint.json is corrupt"):
        run_folder.claim(str(tmp_path / "sweep"), fp)


def test_a_folder_without_a_fingerprint_is_refused_even_when_its_config_agrees(tmp_path):
    """A folder with a run's files but no fingerprint.json (the start config, a finished run's metrics) gets
    the one-line refusal of any foreign folder: nothing is adopted, nothing written into it."""
    import gin

    parse_config([PROFQI], ["K = 3"])
    current = run_folder.fingerprint()
    folder = tmp_path / "unfingerprinted"
    folder.mkdir()
    (folder / "config.gin").write_text(gin.config_str())  # the very config being launched
    (folder / "metrics.json").write_text("{}")
    expected = (
        f"run folder {folder} is not empty and has no fingerprint.json (not a run folder of this "
        "experiment); pass --overwrite to move it aside and start afresh"
    )
    for call in (run_folder.check, run_folder.claim):
        with pytest.raises(run_folder.RunFolderConflict) as refusal:
            call(str(folder), current)
        assert str(refusal.value) == expected and "\n" not in str(refusal.value)
    assert sorted(os.listdir(folder)) == ["config.gin", "metrics.json"]  # no fingerprint written
    # The same words as a stray folder's.
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "notes.txt").write_text("mine")
    with pytest.raises(run_folder.RunFolderConflict) as stray:
        run_folder.claim(str(tmp_path / "stray"), current)
    assert str(stray.value) == expected.replace(str(folder), str(tmp_path / "stray"))
    # --overwrite moves it aside whole and starts afresh.
    assert run_folder.claim(str(folder), current, overwrite=True) == "new"
    (old,) = [p for p in tmp_path.iterdir() if p.name.startswith("unfingerprinted.old-")]
    assert sorted(os.listdir(old)) == ["config.gin", "metrics.json"]
    assert json.loads((folder / "fingerprint.json").read_text())["hash"] == current["hash"]


def test_failures_are_recorded_and_cleared(tmp_path):
    error = DivergenceError("training diverged: the loss became nan", where="refresh 2 (seed 0)", step=7)
    path = run_folder.write_failure(str(tmp_path), error, where=error.where, step=error.step)
    with open(path) as f:
        record = json.load(f)
    assert (record["status"], record["where"], record["step"]) == ("diverged", "refresh 2 (seed 0)", 7)
    run_folder.clear_failure(str(tmp_path))
    assert not os.path.exists(path)


def test_the_run_folder_object_claims_once_writes_the_configs_and_finishes_last(tmp_path):
    parse_config([PROFQI])
    folder = run_folder.RunFolder(str(tmp_path / "run"))
    assert folder.claim() == "new" and not folder.complete
    assert folder.claim() == "new"  # once per object: the fingerprint just written does not make it "resume"
    assert run_folder.RunFolder(folder.root).claim() == "resume"
    folder.write_config()
    assert "ProFQIConfig.K = %K" in (tmp_path / "run" / "config.gin").read_text()  # the config as parsed
    path = folder.record_failure(DivergenceError("boom", where="x", step=3), train_step=3)
    with open(path) as f:
        assert json.load(f)["train_step"] == 3
    metrics = {"env": "chain_walk", "algorithm": "profqi", "K": 5, "seed": 0, "curve": [{"k": 0, "q": 1.0}]}
    folder.finish(metrics)
    assert folder.complete and not os.path.exists(folder.path(run_folder.FAILURE_FILE))
    assert folder.load_metrics()["curve"] == metrics["curve"]
    assert run_folder.RunFolder(folder.root).claim() == "complete"


def test_a_claim_that_never_trained_is_released_and_anything_else_keeps_the_folder(tmp_path):
    def claimed(name, *extra):
        """A folder claimed for chain-walk ProFQI, its config written, ``extra`` files (path, text) in it."""
        root = tmp_path / name
        assert run_folder.claim(str(root), _fingerprint()) == "new"
        (root / "config.gin").write_text("# the parsed config\n")
        for path, text in extra:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        (root / "checkpoints" / "empty").mkdir(parents=True, exist_ok=True)  # empty folders count as nothing
        return root

    bare = claimed("bare", ("log.txt", "the sweep's log\n"), ("dataset.npz", ""))
    assert run_folder.release_claim(str(bare))
    assert sorted(p.name for p in bare.rglob("*")) == ["log.txt"]
    assert run_folder.folder_state(str(bare)) == "new"  # the corrected run claims it afresh
    assert run_folder.claim(str(bare), _fingerprint("K = 3")) == "new"

    for name, extra in (
        ("progress", ("progress.csv", "refresh\n")),
        ("checkpoint", ("checkpoints/ckpt-1.index", "")),
        ("user_file", ("notes.txt", "mine\n")),
    ):
        root = claimed(name, extra)
        before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        assert not run_folder.release_claim(str(root)), name
        assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before, name
    assert not run_folder.release_claim(str(tmp_path / "missing"))
