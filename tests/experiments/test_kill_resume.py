"""Kill and resume, offline: `launch/train.py` on chain-walk ProFQI SIGKILLed at the start, the middle and
the end of its training (tests/experiments/kill_resume.py), relaunched into the same folder after each kill,
against an uninterrupted run of the same config: one seed (its refreshes XLA programs, as the gin file ships
them) and two seeds in one graph (in graph mode: the refreshes of both seeds compiled into one XLA program
cost more than all of their training). The run's ``metrics.json`` (all but its wall times) and
``iterates.npz`` equal the uninterrupted run's exactly.

The last tests interrupt `pbo_tf.io.atomic_open` writes (a SIGKILLed writer, an exception midway, a
checkpoint save cut before its index is recorded) and check that readers only ever see the previous complete
file.
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from kill_resume import (  # tests/experiments/ is on sys.path (pytest prepends it)
    ENV,
    REFRESHES,
    REPO,
    SEEDS,
    SINGLE,
    assert_ran_on,
    assert_restored_the_latest,
    assert_same_offline_results,
    baseline,
    is_temporary,
    kill_and_resume,
    read_back,
    rounds_run,
)

from pbo_tf.analysis import results
from pbo_tf.experiments import run_folder
from pbo_tf.io import atomic_open, write_json_atomic, write_text_atomic


@pytest.fixture(scope="module")
def single_seed_baseline(tmp_path_factory):
    return baseline(SINGLE, tmp_path_factory.mktemp("single_seed_baseline"))


@pytest.fixture(scope="module")
def two_seeds_baseline(tmp_path_factory):
    return baseline(SEEDS, tmp_path_factory.mktemp("two_seeds_baseline"))


def test_a_single_seed_profqi_run_killed_three_times_resumes_to_the_same_metrics(
    single_seed_baseline, tmp_path
):
    trials = kill_and_resume(SINGLE, single_seed_baseline, tmp_path)
    for run in trials:
        # Each relaunch continued from the newest checkpoint (ckpt-N: N refreshes done) with refreshes N+1..
        # only (to 50 for the last): a relaunch that retrained from scratch would reach the same metrics, as
        # runs are deterministic.
        assert_restored_the_latest(run, tmp_path)
        done = run.checkpoints_at_kill.get("checkpoints") or 0
        assert_ran_on(run, rounds_run(run.resumed, SINGLE.step), done + 1, REFRESHES)
    difference = assert_same_offline_results(tmp_path, single_seed_baseline.root, ["."])
    print("\n" + "\n".join(run.where for run in trials) + f"\nlargest metric difference {difference}")


def test_seeds_in_one_graph_killed_three_times_resume_to_the_same_metrics(two_seeds_baseline, tmp_path):
    trials = kill_and_resume(SEEDS, two_seeds_baseline, tmp_path)
    for run in trials:
        # Each seed continued from its newest checkpoint: a seed killed between the two seeds' saves catches
        # up alone (its own progress lines), then both run the remaining refreshes together, each once.
        assert_restored_the_latest(run, tmp_path)
        done = sorted(run.checkpoints_at_kill.get(f"seed_{s}/checkpoints") or 0 for s in (0, 1))
        assert rounds_run(run.resumed, SINGLE.step) == list(range(done[0] + 1, done[1] + 1)), run.where
        assert_ran_on(run, rounds_run(run.resumed, SEEDS.step), done[1] + 1, REFRESHES)
        caught_up = "ProFQI refresh" in run.resumed.text  # a seed behind the other ran alone first
        print(f"\n{run.where}; a seed caught up alone: {caught_up}")
    difference = assert_same_offline_results(tmp_path, two_seeds_baseline.root, ["seed_0", "seed_1"])
    print(f"largest metric difference {difference}")


# ------------------------------------------------------------------------------------- atomic writes
WRITER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from pbo_tf.io import atomic_open

path, text = sys.argv[2], sys.argv[3]
with atomic_open(path, "w") as f:
    f.write(text[: len(text) // 2])
    f.flush()
    print("half written", flush=True)
    time.sleep(600)  # SIGKILLed here
"""


def _metrics(seed: int, value: float) -> dict:
    return {"env": "chain_walk", "algorithm": "profqi", "K": 2, "seed": seed, "curve": [{"k": 0, "q": value}]}


def test_a_writer_killed_midway_leaves_the_previous_complete_file_and_readers_never_see_the_partial_one(
    tmp_path,
):
    old, new = tmp_path / "rewritten", tmp_path / "fresh"
    write_json_atomic(str(old / "metrics.json"), _metrics(0, 1.0))
    old_bytes = (old / "metrics.json").read_bytes()
    new.mkdir()
    (new / "config.gin").write_text("K = 2\n")
    for folder in (old, new):
        text = json.dumps(_metrics(1, 2.0) | {"padding": "x" * 100_000})
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, REPO, str(folder / "metrics.json"), text],
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        try:
            assert writer.stdout.readline().strip() == "half written"
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait()
            writer.stdout.close()
        (partial,) = [name for name in os.listdir(folder) if is_temporary(name)]
        assert partial.startswith(".metrics.json.")  # the interrupted write: half the new text
        assert (folder / partial).read_text() == text[: len(text) // 2]
    # The destination is the previous complete file, or absent; nothing reads the partial one.
    assert (old / "metrics.json").read_bytes() == old_bytes
    assert not (new / "metrics.json").exists()
    runs = results.load_runs(str(tmp_path))
    assert [(r["run_dir"], r["seed"], r["curve"]) for r in runs] == [(str(old), 0, [{"k": 0, "q": 1.0}])]
    assert run_folder.folder_state(str(old)) == "complete"
    assert run_folder.folder_state(str(new)) == "started"  # resumed by the runner, not skipped as complete


def test_an_exception_midway_through_a_write_leaves_the_previous_file_and_no_temporary_file(
    tmp_path, monkeypatch
):
    """The run folder's writers (`atomic_open`, `write_json_atomic`, `Transitions.save`) interrupted
    by an exception after half their bytes: each destination keeps its previous complete content, readers
    load it, and no temporary file is left."""
    from pbo_tf.data.transitions import Transitions
    from pbo_tf.envs import chain_walk

    class Interrupted(Exception):
        pass

    metrics, dataset, config = tmp_path / "metrics.json", tmp_path / "dataset.npz", tmp_path / "config.gin"
    write_json_atomic(str(metrics), _metrics(0, 1.0))
    data = chain_walk.collect_dataset(0)
    data.save(str(dataset), env="chain_walk")
    write_text_atomic(str(config), "K = 2\n")
    before = {path: path.read_bytes() for path in (metrics, dataset, config)}

    def dump_half(obj, f, **kwargs):
        text = json.dumps(obj, **kwargs)
        f.write(text[: len(text) // 2])
        raise Interrupted

    def savez_half(f, **arrays):
        f.write(b"PK\x03\x04" + bytes(100))
        raise Interrupted

    monkeypatch.setattr(json, "dump", dump_half)
    monkeypatch.setattr(np, "savez", savez_half)
    with pytest.raises(Interrupted):
        write_json_atomic(str(metrics), _metrics(1, 2.0))
    with pytest.raises(Interrupted):
        Transitions.from_arrays(
            data.state[:10], data.action[:10], data.reward[:10], data.next_state[:10], data.done[:10]
        ).save(str(dataset), env="chain_walk")
    with pytest.raises(Interrupted), atomic_open(str(config), "w") as f:
        f.write("K = ")
        raise Interrupted
    monkeypatch.undo()

    assert {path: path.read_bytes() for path in before} == before
    assert sorted(os.listdir(tmp_path)) == ["config.gin", "dataset.npz", "metrics.json"]  # no temporary file
    assert results.load_metrics(str(tmp_path))["curve"] == [{"k": 0, "q": 1.0}]
    assert len(Transitions.load(str(dataset), env="chain_walk")) == len(data)


def test_a_checkpoint_save_cut_before_its_index_is_recorded_resumes_from_the_previous_one(
    tmp_path, monkeypatch
):
    """A ProFQI checkpoint whose data and index files are written (one of them torn) but whose ``checkpoint``
    index file was never updated, as a kill at that moment leaves it: the next trainer restores the previous
    complete checkpoint, and its save overwrites the interrupted one."""
    from tensorflow.python.checkpoint import checkpoint_management

    from pbo_tf.configs import ProFQIConfig
    from pbo_tf.envs import chain_walk
    from pbo_tf.operators import LinearPBO
    from pbo_tf.optimizers import AnnealedAdam
    from pbo_tf.q import TableQ
    from pbo_tf.trainers.profqi import ProFQITrainer

    def trainer():
        q = TableQ(20, 2)
        data = chain_walk.collect_dataset(0)
        pbo, target = LinearPBO(40, init_std=1e-3), LinearPBO(40)
        config = ProFQIConfig(
            K=2, refreshes=3, passes_per_refresh=1, batch_size=100, w_size=10, w_batch_size=5,
            checkpoint_every_s=0,  # a checkpoint after every refresh
        )  # fmt: skip
        t = ProFQITrainer(
            config=config, pbo=pbo, target_pbo=target, q_family=q, dataset=data.to_dataset(),
            w_set=q.initial_params(10, 0), gamma=0.9, optimizer=AnnealedAdam(lr_start=1e-2, lr_end=1e-4),
            seed=3, checkpoint_dir=str(tmp_path / "checkpoints"), log=None,
        )  # fmt: skip
        return t, pbo

    class Killed(BaseException):
        pass

    first, _ = trainer()
    first.train(max_rounds=1)
    saved = [w.numpy() for w in first.pbo.weights]
    record = checkpoint_management.update_checkpoint_state_internal

    def killed_before_the_index(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(checkpoint_management, "update_checkpoint_state_internal", killed_before_the_index)
    with pytest.raises(Killed):
        first.train(max_rounds=1)
    monkeypatch.setattr(checkpoint_management, "update_checkpoint_state_internal", record)
    data_file = tmp_path / "checkpoints" / "ckpt-2.data-00000-of-00001"
    assert data_file.exists() and tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-1")
    data_file.write_bytes(data_file.read_bytes()[:7])  # torn

    resumed, pbo = trainer()
    assert resumed.rounds_done == 1
    for got, want in zip(pbo.weights, saved, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)
    resumed.train()
    assert resumed.rounds_done == 3
    assert read_back(tmp_path) == []
    reader = tf.train.load_checkpoint(str(tmp_path / "checkpoints" / "ckpt-2"))  # rewritten whole
    for key in reader.get_variable_to_shape_map():
        reader.get_tensor(key)
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-3")
