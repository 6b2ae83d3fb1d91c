"""Online seeds in one process (``NUM_SEEDS``, `pbo_tf.experiments.online_seeds`): seeds 3 and 4 of a batched
run give the metrics, iterates and evaluations during training of their single-seed runs (deterministic ops
in both, online_seeds_worker.py), in the batched folder layout that the reader and `load_runs` read; a
batched run stopped and resumed equals its seeds' single-seed runs stopped and resumed at the same training
steps, a seed that a kill left behind catching up alone; a seed that diverges stops alone while the others
train on; and a bad ``NUM_SEEDS`` is one line."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from runner_sizes import ONLINE_TINY  # tests/experiments/ is on sys.path (pytest prepends it)

from pbo_tf.experiments.config import GIN_CONFIGS_DIR

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

CARTPOLE = [
    "K=3",
    "DQN_TRAIN_STEPS_PER_REFRESH=4",
    "INITIAL_COLLECT_STEPS=20",
    "BATCH_SIZE=8",
    "GymOnlineEnv.hidden=[8]",
    "OnlineExperiment.n_eval_episodes=3",
    "EVAL_INTERVAL=5",
    "OnlineExperiment.eval_episodes=2",
]  # fmt: skip  (12 training steps; DQNConfig.jit_compile stays True: one XLA program for both seeds)
BICYCLE = [
    *ONLINE_TINY,
    "BicycleOnlineEnv.hidden=[8]",
    "BicycleOnlineEnv.eval_jit_compile=False",
    "EVAL_INTERVAL=4",
    "OnlineExperiment.eval_episodes=2",
]  # fmt: skip  (6 training steps of 2 Adam steps; ProDQNConfig.jit_compile stays True)
SIZES = {"gym/dqn.gin": CARTPOLE, "bicycle_online/prodqn.gin": BICYCLE}
#: what a seed's entry and its single-seed run's metrics.json must hold alike (times and rates differ)
SAME = ("curve", "env_steps", "train_steps", "adam_steps", "skipped_replay_batches", "budget", "loss_terms")


def _work(tmp_path, plan) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "online_seeds_worker.py"), str(path)],
        capture_output=True, text=True, cwd=REPO, env=env, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]


def _metrics(folder) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def _rows(folder) -> list[dict]:
    with open(folder / "progress.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in csv.DictReader(f)]


def _assert_same_seed(entry: dict, single: dict, batched_dir, single_dir) -> None:
    for key in SAME:
        assert (key in entry) == (key in single), key
        if key == "loss_terms" and key in single:
            assert entry[key] == pytest.approx(single[key], rel=1e-6, abs=1e-7)
        elif key in single:
            assert entry[key] == single[key], (key, entry[key], single[key])
    got = np.load(batched_dir / "iterates.npz")["iterates"]
    want = np.load(single_dir / "iterates.npz")["iterates"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("gin_file", sorted(SIZES))
def test_seeds_of_a_batched_online_run_equal_their_single_seed_runs(tmp_path, gin_file):
    sizes = SIZES[gin_file]
    path = os.path.join(GIN_CONFIGS_DIR, gin_file)
    plan = [{"run": [str(tmp_path / "batched"), path, [*sizes, "SEED=3", "NUM_SEEDS=2"]]}]
    plan += [{"run": [str(tmp_path / f"single_{s}"), path, [*sizes, f"SEED={s}"]]} for s in (3, 4)]
    _work(tmp_path, plan)

    batched = _metrics(tmp_path / "batched")
    assert batched["seeds"] == [3, 4] and batched["seed"] == 3 and batched["setting"] == "online"
    assert [e["seed"] for e in batched["per_seed"]] == [3, 4]
    for entry in batched["per_seed"]:
        s = entry["seed"]
        single_dir, seed_dir = tmp_path / f"single_{s}", tmp_path / "batched" / f"seed_{s}"
        _assert_same_seed(entry, _metrics(single_dir), seed_dir, single_dir)
        assert _rows(seed_dir) == _rows(single_dir)  # the evaluations during training
        for name in ("checkpoints", "tensorboard", "policy", "iterates.npz", "progress.csv"):
            assert os.path.exists(seed_dir / name), name
        assert not os.path.exists(seed_dir / "metrics.json")
        assert not os.path.exists(seed_dir / "fingerprint.json")
    for name in ("fingerprint.json", "config.gin", "metrics.json"):
        assert os.path.exists(tmp_path / "batched" / name), name
    assert not os.path.exists(tmp_path / "batched" / "checkpoints")

    # the top level is the mean over seeds; the reader and load_runs give one record per seed
    from pbo_tf.analysis.results import load_runs
    from pbo_tf.experiments.reader import RunReader

    main = batched["main_metric"]
    values = [e["curve"][1][main] for e in batched["per_seed"]]
    assert batched["curve"][1][main] == pytest.approx(np.mean(values), rel=1e-9)
    assert "curve_ci95" in batched and batched["wall_time_s_per_seed"] > 0
    records = load_runs(str(tmp_path / "batched"))
    assert [(r["seed"], r["env"], r["setting"]) for r in records] == [
        (3, batched["env"], "online"),
        (4, batched["env"], "online"),
    ]
    assert records[1]["seed_dir"] == str(tmp_path / "batched" / "seed_4")
    reader = RunReader(str(tmp_path / "batched"))
    assert reader.setting == "online" and reader.seeds == [3, 4]
    if "prodqn" in gin_file:  # seed 4's trained operator from its own checkpoint
        pbo, _, omega0 = reader.operator(seed=4)
        saved = np.load(tmp_path / "batched" / "seed_4" / "iterates.npz")["iterates"]
        np.testing.assert_allclose(pbo.iterate(omega0[None], 1)[:, 0].numpy(), saved[:2], rtol=1e-5)


def test_a_resumed_batched_run_equals_its_seeds_resumed_alone(tmp_path):
    """CartPole DQN, 12 training steps in calls of 4: the batched run stops at 4 and 8; then seed 4's
    checkpoint is put back to step 4 (a kill between the two seeds' saves), so the last call trains seed 4
    alone from 4 to 8 before both seeds go on together. Each seed equals its single-seed run stopped where
    its own checkpoint stopped it (a resumed run starts new episodes and random streams, batched or not)."""
    path = os.path.join(GIN_CONFIGS_DIR, "gym/dqn.gin")
    sizes = [*CARTPOLE, "DQNConfig.jit_compile=False", "OnlineExperiment.checkpoint_interval=100"]
    stop = ["OnlineExperiment.max_train_steps_this_call=4"]
    batched, kept = str(tmp_path / "batched"), str(tmp_path / "seed_4_at_4")
    both = [*sizes, "SEED=3", "NUM_SEEDS=2"]
    plan = [
        {"run": [batched, path, both + stop]},
        {"copy": [os.path.join(batched, "seed_4", "checkpoints"), kept]},
        {"run": [batched, path, both + stop]},
        {"copy": [kept, os.path.join(batched, "seed_4", "checkpoints")]},  # seed 4 back at step 4
        {"run": [batched, path, both]},
    ]
    calls = {3: [stop, stop, []], 4: [stop, []]}  # seed 3 stopped at 4 and 8; seed 4 at 4 only
    for s, limits in calls.items():
        plan += [
            {"run": [str(tmp_path / f"single_{s}"), path, [*sizes, f"SEED={s}", *lim]]} for lim in limits
        ]
    _work(tmp_path, plan)

    metrics = _metrics(tmp_path / "batched")
    for entry in metrics["per_seed"]:
        s = entry["seed"]
        single_dir = tmp_path / f"single_{s}"
        _assert_same_seed(entry, _metrics(single_dir), tmp_path / "batched" / f"seed_{s}", single_dir)
        assert entry["train_steps"] == 12 and entry["env_steps"] == 20 + 2 * 12
        assert _rows(tmp_path / "batched" / f"seed_{s}") == _rows(single_dir)


def test_a_diverged_seed_stops_alone_and_the_others_equal_their_single_seed_runs(tmp_path):
    """CartPole DQN, seeds 3 and 4, seed 4's training step 5 leaving NaN parameters (its check after step 5
    finds them), the run stopped at step 8 and resumed: seed 4's failure.json in its folder says what its
    single-seed run's says, seed 3 trains on and equals its single-seed run stopped and resumed at the same
    steps, the run's metrics hold seed 3 with seed 4 as failed, the resumed call leaves seed 4 out, and
    `load_failures` lists it; when both seeds diverge, the run fails as a single-seed run does."""
    from pbo_tf.analysis.results import load_failures
    from pbo_tf.experiments.reader import RunError, RunReader

    path = os.path.join(GIN_CONFIGS_DIR, "gym/dqn.gin")
    sizes = [*CARTPOLE, "DQNConfig.jit_compile=False", "OnlineExperiment.checkpoint_interval=4"]
    stop = ["OnlineExperiment.max_train_steps_this_call=8"]
    batched, both = str(tmp_path / "batched"), [*sizes, "SEED=3", "NUM_SEEDS=2"]
    plan = [
        {"poison": {"4": 5}},
        {"run": [batched, path, both + stop]},
        {"copy": [os.path.join(batched, "seed_4"), str(tmp_path / "seed_4_after_the_first_call")]},
        {"run": [batched, path, both]},
        {"run": [str(tmp_path / "single_4"), path, [*sizes, "SEED=4"]], "diverges": True},
        {"run": [str(tmp_path / "single_3"), path, [*sizes, "SEED=3", *stop]]},
        {"run": [str(tmp_path / "single_3"), path, [*sizes, "SEED=3"]]},
        {"poison": {"3": 5, "4": 5}},
        {"run": [str(tmp_path / "all"), path, both], "diverges": True},
    ]
    _work(tmp_path, plan)

    metrics = _metrics(tmp_path / "batched")
    assert (metrics["seeds"], metrics["failed_seeds"], [e["seed"] for e in metrics["per_seed"]]) == (
        [3], [4], [3]
    )  # fmt: skip
    entry, single_dir = metrics["per_seed"][0], tmp_path / "single_3"
    _assert_same_seed(entry, _metrics(single_dir), tmp_path / "batched" / "seed_3", single_dir)
    assert entry["train_steps"] == 12 and _rows(tmp_path / "batched" / "seed_3") == _rows(single_dir)
    assert metrics["curve"] == entry["curve"]  # the mean over the one seed left
    failed = json.loads((tmp_path / "batched" / "seed_4" / "failure.json").read_text())
    alone = json.loads((tmp_path / "single_4" / "failure.json").read_text())
    same = (
        "status",
        "error",
        "message",
        "where",
        "train_step",
        "last_checkpoint_step",
        "env",
        "algorithm",
        "K",
    )
    assert {k: failed[k] for k in same} == {k: alone[k] for k in same}
    assert failed["train_step"] == 5 and failed["seeds"] == [4] and failed["last_checkpoint_step"] == 4
    assert "seed 4" in failed["message"]
    assert not (tmp_path / "batched" / "failure.json").exists()
    assert not (tmp_path / "batched" / "seed_4" / "iterates.npz").exists()
    first, last = tmp_path / "seed_4_after_the_first_call", tmp_path / "batched" / "seed_4"
    assert (first / "failure.json").read_text() == (last / "failure.json").read_text()
    assert sorted(os.listdir(first / "tensorboard")) == sorted(
        os.listdir(last / "tensorboard")
    )  # not rebuilt
    assert RunReader(batched).seeds == [3] and RunReader(os.path.join(batched, "seed_3")).seed() == 3
    with pytest.raises(
        RunError, match=r"seed_4' has no metrics.json: the seed diverged \(see its failure.json\)$"
    ):
        RunReader(os.path.join(batched, "seed_4"))
    listed = [(f["seeds"], f["run_dir"]) for f in load_failures(batched)]
    assert listed == [([4], os.path.join(batched, "seed_4"))]
    everything = json.loads((tmp_path / "all" / "failure.json").read_text())
    assert everything["train_step"] == 5 and not (tmp_path / "all" / "metrics.json").exists()


@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_bad_num_seeds_is_one_line(tmp_path, value):
    from pbo_tf.experiments.config import parse_config
    from pbo_tf.experiments.run import make_experiment

    parse_config(["gym/dqn.gin"], [f"NUM_SEEDS={value}"])
    with pytest.raises(ValueError, match=rf"^num_seeds \(NUM_SEEDS\) must be an integer >= 1, got {value}\n"):
        make_experiment(str(tmp_path / "run"), log=None)
    assert not os.path.exists(tmp_path / "run")


def test_a_bad_num_seeds_stops_pbo_train_in_one_line(tmp_path):
    args = [sys.executable, os.path.join(REPO, "launch", "train.py"), "--gin_file=gym/dqn.gin",
            f"--root_dir={tmp_path / 'run'}", "--gin_bindings=NUM_SEEDS=0"]  # fmt: skip
    out = subprocess.run(args, capture_output=True, text=True, cwd=REPO, check=False)
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "num_seeds (NUM_SEEDS) must be an integer >= 1, got 0" in errors[0], (
        out.stderr
    )
    assert not os.path.exists(tmp_path / "run")


def test_an_online_folder_fingerprinted_before_num_seeds_resumes(tmp_path):
    """A run folder that an online run started before the gin files bound ``OnlineExperiment.num_seeds``
    resumes (`pbo_tf.compat.gin_names.ADDED`: it ran one seed); the same folder refuses NUM_SEEDS=2."""
    from pbo_tf.experiments import run_folder
    from pbo_tf.experiments.config import parse_config

    parse_config(["gym/dqn.gin"], ["K=3"])
    current = run_folder.fingerprint()
    assert current["bindings"]["OnlineExperiment.num_seeds"] == 1
    before = {k: v for k, v in current["bindings"].items() if k != "OnlineExperiment.num_seeds"}
    (tmp_path / run_folder.FINGERPRINT_FILE).write_text(json.dumps(run_folder.fingerprint(before)))
    (tmp_path / "config.gin").write_text("")  # a run in progress
    assert run_folder.check(str(tmp_path), current) == "resume"
    parse_config(["gym/dqn.gin"], ["K=3", "NUM_SEEDS=2"])
    with pytest.raises(run_folder.RunFolderConflict, match="num_seeds: 1 in the folder, 2 now"):
        run_folder.check(str(tmp_path), run_folder.fingerprint())
