"""Kill and resume: `launch/train.py` SIGKILLed at a seeded random moment of its training, then relaunched
into the same folder to the end, against an uninterrupted run of the same config.

* Offline ProFQI (chain-walk), one seed (its refreshes XLA programs, as the gin file ships them) and two
  seeds in one graph (in graph mode: the refreshes of both seeds compiled into one XLA program cost more
  than all of their training): the resumed run's ``metrics.json`` (all but its wall times) and
  ``iterates.npz`` equal the uninterrupted run's exactly.
* Online ProDQN (bicycle): a continuation, not a replay. The run finishes; its training step, environment
  step and Adam step counters and the transitions in its replay buffer equal the uninterrupted run's; the
  buffer holds what the killed run had checkpointed, then what the relaunch added, and the same initial
  collect; ε and the learning rate end where the uninterrupted run's end.

Checkpoints are written after every refresh / training step, so kills land between and during saves. After
every kill each file of the folder that a reader opens (JSON, NPZ, the latest TensorFlow checkpoint) must
read back whole. The last tests interrupt `pbo_tf.io.atomic_open` writes (a SIGKILLed writer, an exception
midway, a checkpoint save cut before its index is recorded) and check that readers only ever see the
previous complete file.

Each kill is drawn from ``random.Random("<config>/<trial>")``: a marker line of the run's output (0: the line
before training starts, then one per refresh / training step, the last excluded; trial i draws from the
i-th third of them, so the trials cover the start, the middle and the end of training) and a fraction of
the time to the next marker (the launch's last refresh / training step; the uninterrupted run's time after
markers 0 and 1) after which the kill comes. The trials print where their kill landed (``pytest -s``).
"""

import dataclasses
import json
import os
import pathlib
import random
import re
import select
import signal
import subprocess
import sys
import time

import gin
import numpy as np
import pytest
import tensorflow as tf
from runner_sizes import TINY  # tests/experiments/ is on sys.path (pytest prepends it)
from test_online import HIDDEN
from test_online import TINY as ONLINE_TINY
from tf_agents.trajectories import time_step as ts

from pbo_tf.analysis import results
from pbo_tf.experiments import run_folder
from pbo_tf.experiments.config import GIN_CONFIGS_DIR, parse_config
from pbo_tf.experiments.online import OnlineExperiment
from pbo_tf.io import atomic_open, write_json_atomic, write_text_atomic

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRIALS = 3
LAUNCH_TIMEOUT_S = 300.0
ENV = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")

REFRESHES = 50  # 50 checkpoints for the kills to land between, a few seconds of training
OFFLINE_GIN = os.path.join(GIN_CONFIGS_DIR, "chain_walk", "profqi.gin")
OFFLINE = [b for b in TINY if not b.startswith("REFRESHES=")] + [
    f"REFRESHES={REFRESHES}",
    "ProFQIConfig.checkpoint_every_s=0",  # a checkpoint after every refresh ...
    "ProFQIConfig.progress_every_s=0",  # ... and a progress line after it: the markers
]
TRAIN_STEPS = 20
ONLINE_GIN = os.path.join(GIN_CONFIGS_DIR, "bicycle_online", "prodqn.gin")
ONLINE = [
    *[
        b
        for b in ONLINE_TINY
        if not b.startswith(
            ("REFRESHES=", "TRAIN_STEPS_PER_REFRESH=", "OnlineExperiment.", "BicycleOnlineEnv.")
        )
    ],
    "REFRESHES=5",
    "TRAIN_STEPS_PER_REFRESH=4",  # 20 training steps of 2 Adam steps (2 W batches)
    HIDDEN["bicycle_online"],
    "OnlineExperiment.log_interval=1",
    "OnlineExperiment.checkpoint_interval=1",  # a progress line, then a checkpoint, every training step
    "BicycleOnlineEnv.eval_jit_compile=False",
    "OnlineExperiment.jit_compile=False",
]


def _profqi(**kwargs):
    """A `ProFQITrainer` from its keyword arguments and its config's (`ProFQIConfig`, |W| from ``w_set``)."""
    from pbo_tf.configs import ProFQIConfig
    from pbo_tf.trainers.profqi import ProFQITrainer

    fields = {f.name for f in dataclasses.fields(ProFQIConfig)}
    config = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
    config.setdefault("w_size", len(kwargs["w_set"]))
    return ProFQITrainer(config=ProFQIConfig(**config), **kwargs)


@dataclasses.dataclass(frozen=True)
class Config:
    """One experiment the trials kill: its gin file and bindings, and how to read its progress."""

    name: str
    gin_file: str
    bindings: tuple[str, ...]
    #: marker 0 (the start of training), markers 1..n (one per refresh / training step), n + 1 (done)
    first: str
    step: str
    done: str
    n: int

    def marker(self, line: str) -> int | None:
        """The marker a line of the run's output is, or None."""
        if re.search(self.first, line):
            return 0
        step = re.search(self.step, line)
        if step:
            return int(step.group(1))
        return self.n + 1 if re.search(self.done, line) else None


SINGLE = Config(
    "single_seed",
    OFFLINE_GIN,
    tuple(OFFLINE),
    first=r"^chain_walk / profqi: .*seed=0,.* transitions ->",
    step=r"^ProFQI refresh (\d+)/",
    done=r"^done in ",
    n=REFRESHES,
)
SEEDS = Config(
    "two_seeds",
    OFFLINE_GIN,
    (*OFFLINE, "NUM_SEEDS=2", "ProFQIConfig.jit_compile=False"),
    first=r"^chain_walk / profqi: .*seed=0,.* transitions ->",
    step=r"^ProFQI × 2 seeds: refresh (\d+)/",
    done=r"^done in ",
    n=REFRESHES,
)
ONLINE_CONFIG = Config(
    "online_prodqn",
    ONLINE_GIN,
    tuple(ONLINE),
    first=r"^initial collect: ",
    step=r"^training step (\d+)/",
    done=r"^done: ",
    n=TRAIN_STEPS,
)


@dataclasses.dataclass
class Launch:
    """One `launch/train.py` process: its output lines with their times, and how it ended."""

    lines: list[tuple[float, str]]
    returncode: int
    killed_after: str | None = None  # the last line it printed before it was killed
    kill_delay: float | None = None  # seconds from the marker to the kill

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def marker_times(self, config: Config) -> dict[int, float]:
        times = {}
        for t, line in self.lines:
            m = config.marker(line)
            if m is not None:
                times.setdefault(m, t)
        return times


def launch(config: Config, root, kill_at: tuple[int, float, float] | None = None) -> Launch:
    """Runs ``launch/train.py`` on ``config`` into ``root``.

    ``kill_at = (marker, fraction, seconds)``: SIGKILLs it after it printed that marker (if it gets there),
    ``fraction`` of its last refresh / training step later (the time from the marker before), or ``seconds``
    later after markers 0 and 1 (this launch's pace is not known yet; the baseline's pace stands in for it,
    and should this launch print the next marker first, it is killed then, before training can end).
    """
    cmd = [
        sys.executable,
        os.path.join(REPO, "launch", "train.py"),
        f"--gin_file={config.gin_file}",
        f"--root_dir={root}",
        "--intra_op_threads=1",
        *(f"--gin_bindings={b}" for b in config.bindings),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, env=ENV)
    fd = proc.stdout.fileno()
    start = time.perf_counter()
    lines, pending, deadline, killed_after, seen, delay = [], b"", None, None, {}, None
    hurry = None  # with the baseline's pace: the marker at which a faster launch is killed at once
    try:
        while True:
            now = time.perf_counter()
            if now - start > LAUNCH_TIMEOUT_S:
                raise AssertionError(f"{config.name}: train.py ran over {LAUNCH_TIMEOUT_S} s")
            if deadline is not None and now >= deadline:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    killed_after = lines[-1][1]
                deadline = None
            wait = LAUNCH_TIMEOUT_S if deadline is None else deadline - now
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            *complete, pending = (pending + chunk).split(b"\n")
            for raw in complete:
                line = raw.decode("utf-8", "replace")
                lines.append((time.perf_counter() - start, line))
                m = config.marker(line)
                if m is not None:
                    seen.setdefault(m, lines[-1][0])
                if hurry is not None and m is not None and m >= hurry and deadline is not None:
                    delay -= deadline - time.perf_counter()  # this launch outran the baseline's pace:
                    deadline, hurry = time.perf_counter(), None  # kill it now, still inside training
                if kill_at is not None and m is not None and m >= kill_at[0]:
                    _, fraction, seconds = kill_at
                    if m >= 2 and m - 1 in seen:
                        delay = fraction * (seen[m] - seen[m - 1])
                    else:
                        delay, hurry = seconds, m + 1
                    deadline = time.perf_counter() + delay
                    kill_at = None
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if pending:
        lines.append((time.perf_counter() - start, pending.decode("utf-8", "replace")))
    if killed_after is not None and proc.returncode != -signal.SIGKILL:
        killed_after = None  # it ended by itself just before the kill
    return Launch(lines, proc.returncode, killed_after, delay if killed_after is not None else None)


# --------------------------------------------------------------------------------- reading a folder back
def is_temporary(relpath: str) -> bool:
    """A file written on its way to its final name: `atomic_open`'s ``.<name>.<random>.tmp``, TensorFlow's
    ``*.tempstate<n>`` files and ``<prefix>_temp/`` folders."""
    name = os.path.basename(relpath)
    return (
        (name.startswith(".") and name.endswith(".tmp"))
        or "tempstate" in name
        or any(part.endswith("_temp") or "_temp_" in part for part in relpath.split(os.sep)[:-1])
    )


def read_back(root) -> list[str]:
    """Reads every file of the run folder that the runner or a reader opens (each JSON and NPZ whole, the
    latest checkpoint of each ``checkpoints/`` folder tensor by tensor) and fails on any partial one;
    returns the temporary files left behind (sorted)."""
    temporary = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if is_temporary(rel):
                temporary.append(rel)
            elif name.endswith(".json"):
                with open(path, encoding="utf-8") as f:
                    json.load(f)
            elif name.endswith(".npz"):
                with np.load(path, allow_pickle=False) as arrays:
                    for key in arrays.files:
                        arrays[key]
        if os.path.basename(folder) == "checkpoints" and os.path.exists(os.path.join(folder, "checkpoint")):
            latest = tf.train.latest_checkpoint(folder)
            assert latest is not None, f"{folder}: the checkpoint index names no checkpoint"
            reader = tf.train.load_checkpoint(latest)
            for key in reader.get_variable_to_shape_map():
                reader.get_tensor(key)
    return sorted(temporary)


def latest_checkpoints(root) -> dict[str, int | None]:
    """``{checkpoints folder (relative): number of its latest complete checkpoint, or None}``."""
    out = {}
    for folder, dirs, _ in os.walk(root):
        if "checkpoints" in dirs:
            latest = tf.train.latest_checkpoint(os.path.join(folder, "checkpoints"))
            rel = os.path.relpath(os.path.join(folder, "checkpoints"), root)
            out[rel] = None if latest is None else int(latest.rsplit("-", 1)[1])
    return dict(sorted(out.items()))


def without_wall_times(value):
    """``value`` without its ``wall_time*`` entries (the only ones a resumed run may change)."""
    if isinstance(value, dict):
        return {k: without_wall_times(v) for k, v in value.items() if not k.startswith("wall_time")}
    if isinstance(value, list):
        return [without_wall_times(v) for v in value]
    return value


def numbers(value) -> list[float]:
    """Every number in ``value`` (nested dicts and lists), in order."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in numbers(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


# --------------------------------------------------------------------------------------------- trials
@dataclasses.dataclass
class Baseline:
    """The uninterrupted run of a config and how long it took from each marker to the next."""

    root: pathlib.Path
    run: Launch
    durations: dict[int, float]  # marker -> seconds to the next marker


def baseline(config: Config, root) -> Baseline:
    run = launch(config, root)
    assert run.returncode == 0, run.text[-3000:]
    times = run.marker_times(config)
    assert sorted(times) == list(range(config.n + 2)), f"markers {sorted(times)}:\n{run.text[-3000:]}"
    return Baseline(root, run, {m: times[m + 1] - times[m] for m in range(config.n + 1)})


@dataclasses.dataclass
class Trial:
    """A killed then resumed run."""

    where: str  # where the kill landed, for the report
    killed: Launch
    resumed: Launch
    at_kill: object = None  # what ``after_kill`` read from the killed run's folder
    #: the latest complete checkpoint of each checkpoints folder at the kill (`latest_checkpoints`)
    checkpoints_at_kill: dict = dataclasses.field(default_factory=dict)


def kill_and_resume(config: Config, base: Baseline, root, trial: int, after_kill=None) -> Trial:
    """Launches ``config``, SIGKILLs it at the trial's random moment during training, checks that the folder
    reads back whole (and calls ``after_kill(root)``), then relaunches it to the end."""
    rng = random.Random(f"{config.name}/{trial}")
    marker = rng.randint(trial * config.n // TRIALS, (trial + 1) * config.n // TRIALS - 1)  # 0..n - 1
    fraction = rng.random()
    killed = launch(config, root, kill_at=(marker, fraction, fraction * base.durations[marker]))
    assert killed.returncode == -signal.SIGKILL, (
        f"not killed (rc {killed.returncode}):\n{killed.text[-3000:]}"
    )
    assert not os.path.exists(os.path.join(root, "metrics.json")), "the kill landed after training"
    temporary = read_back(root)  # no partial file is read back
    checkpoints_at_kill = latest_checkpoints(root)
    where = (
        f"{config.name} trial {trial}: killed {killed.kill_delay * 1e3:.0f} ms after marker {marker} of "
        f"0..{config.n} (last line: {killed.killed_after[:60]!r}); latest checkpoints "
        f"{checkpoints_at_kill}; temporary files left {temporary}"
    )
    at_kill = None if after_kill is None else after_kill(root)
    resumed = launch(config, root)
    assert resumed.returncode == 0, f"{where}:\n{resumed.text[-3000:]}"
    assert os.path.exists(os.path.join(root, "metrics.json"))
    restored = re.findall(r"restored checkpoint \S*ckpt-(\d+)", resumed.text)
    if restored:
        where += f"; the relaunch restored checkpoints {restored}"
    return Trial(where, killed, resumed, at_kill, checkpoints_at_kill)


def assert_restored_the_latest(run: Trial, root) -> None:
    """The relaunch restored, in each checkpoints folder, the newest checkpoint at the kill, and nothing else
    (a folder with none at the kill restores nothing)."""
    restored = sorted(
        os.path.realpath(path) for path in re.findall(r"^restored checkpoint (\S+)", run.resumed.text, re.M)
    )
    want = sorted(
        os.path.realpath(os.path.join(root, folder, f"ckpt-{n}"))
        for folder, n in run.checkpoints_at_kill.items()
        if n is not None
    )
    assert restored == want, f"{run.where}: the relaunch restored {restored}, not {want}"


def rounds_run(launched: Launch, pattern: str) -> list[int]:
    """The refresh / training step numbers of the progress lines of ``launched`` that match ``pattern``."""
    return [int(m.group(1)) for _, line in launched.lines if (m := re.search(pattern, line))]


def assert_same_offline_results(root, base_root, seed_dirs) -> float:
    """The resumed run's metrics (less wall times) and iterates equal the uninterrupted run's; returns the
    largest difference between their metric values."""
    got, want = (without_wall_times(json.loads((r / "metrics.json").read_text())) for r in (root, base_root))
    x, y = numbers(got), numbers(want)
    difference = float(np.max(np.abs(np.subtract(x, y)))) if len(x) == len(y) else float("nan")
    assert got == want, f"the metrics differ (largest difference {difference})"
    for seed_dir in seed_dirs:
        with (
            np.load(root / seed_dir / "iterates.npz") as a,
            np.load(base_root / seed_dir / "iterates.npz") as b,
        ):
            assert sorted(a.files) == sorted(b.files)
            for key in a.files:
                np.testing.assert_array_equal(a[key], b[key])
    return difference


@pytest.fixture(scope="module")
def single_seed_baseline(tmp_path_factory):
    return baseline(SINGLE, tmp_path_factory.mktemp("single_seed_baseline"))


@pytest.fixture(scope="module")
def two_seeds_baseline(tmp_path_factory):
    return baseline(SEEDS, tmp_path_factory.mktemp("two_seeds_baseline"))


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_killed_single_seed_profqi_run_resumes_to_the_same_metrics(single_seed_baseline, tmp_path, trial):
    run = kill_and_resume(SINGLE, single_seed_baseline, tmp_path, trial)
    # The relaunch continued from the newest checkpoint (ckpt-N: N refreshes done) with refreshes N+1..50
    # only: a relaunch that retrained from scratch would reach the same metrics, as runs are deterministic.
    assert_restored_the_latest(run, tmp_path)
    done = run.checkpoints_at_kill.get("checkpoints") or 0
    assert rounds_run(run.resumed, SINGLE.step) == list(range(done + 1, REFRESHES + 1)), run.where
    difference = assert_same_offline_results(tmp_path, single_seed_baseline.root, ["."])
    print(f"\n{run.where}; largest metric difference {difference}")


@pytest.mark.parametrize("trial", range(TRIALS))
def test_killed_seeds_in_one_graph_resume_to_the_same_metrics(two_seeds_baseline, tmp_path, trial):
    run = kill_and_resume(SEEDS, two_seeds_baseline, tmp_path, trial)
    # Each seed continued from its newest checkpoint: a seed killed between the two seeds' saves catches up
    # alone (its own progress lines), then both run the remaining refreshes together, each once.
    assert_restored_the_latest(run, tmp_path)
    done = sorted(run.checkpoints_at_kill.get(f"seed_{s}/checkpoints") or 0 for s in (0, 1))
    assert rounds_run(run.resumed, SINGLE.step) == list(range(done[0] + 1, done[1] + 1)), run.where
    assert rounds_run(run.resumed, SEEDS.step) == list(range(done[1] + 1, REFRESHES + 1)), run.where
    difference = assert_same_offline_results(tmp_path, two_seeds_baseline.root, ["seed_0", "seed_1"])
    caught_up = "ProFQI refresh" in run.resumed.text  # a seed behind the other ran alone first
    print(f"\n{run.where}; a seed caught up alone: {caught_up}; largest metric difference {difference}")


# --------------------------------------------------------------------------------------------- online
def online_state(root) -> dict | None:
    """What a relaunch restores from the online run folder's latest checkpoint (None without one): the
    counters, ε and the learning rate, and the replay buffer's frames (``[frames]`` step types,
    ``[frames, ...]`` observations and actions, in the order added)."""
    if tf.train.latest_checkpoint(os.path.join(root, "checkpoints")) is None:
        return None
    parse_config([ONLINE_GIN], ONLINE)
    try:
        e = OnlineExperiment(root_dir=str(root), log=None)
        e.build()  # restores the latest checkpoint
        stored = e.replay_buffer.gather_all()
        state = {
            "train_step": int(e.train_step.numpy()),
            "env_steps": int(e.env_steps.result().numpy()),
            "adam_steps": int(e.optimizer.iterations.numpy()),
            "epsilon": float(e.epsilon_fn().numpy()),
            "learning_rate": float(e.lr_schedule(e.optimizer.iterations).numpy()),
            "frames": int(e.replay_buffer.num_frames().numpy()),
            "step_type": stored.step_type[0].numpy(),
            "observation": stored.observation[0].numpy(),
            "action": stored.action[0].numpy(),
            "initial_collect_steps": e.collector.initial_collect_steps,
        }
    finally:
        gin.clear_config()
    assert len(state["step_type"]) == state["frames"]
    state["transitions"] = int(np.sum(~np.equal(state["step_type"], ts.StepType.LAST)))
    return state


@pytest.fixture(scope="module")
def online_baseline(tmp_path_factory):
    base = baseline(ONLINE_CONFIG, tmp_path_factory.mktemp("online_baseline"))
    return base, online_state(base.root)


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_killed_online_run_continues_to_the_same_counters_buffer_and_schedules(
    online_baseline, tmp_path, trial
):
    base, want = online_baseline
    run = kill_and_resume(ONLINE_CONFIG, base, tmp_path, trial, after_kill=online_state)
    # The relaunch restored the newest checkpoint (ckpt-N after training step N; ckpt-0 after the initial
    # collect) and ran training steps N+1..20 only, without a second initial collect; with no checkpoint at
    # the kill it starts over: the initial collect, then every training step.
    assert_restored_the_latest(run, tmp_path)
    saved = run.checkpoints_at_kill.get("checkpoints")
    assert run.resumed.text.count("initial collect: ") == (saved is None), run.where
    first = 1 if saved is None else saved + 1
    assert rounds_run(run.resumed, ONLINE_CONFIG.step) == list(range(first, TRAIN_STEPS + 1)), run.where
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    base_metrics = json.loads((base.root / "metrics.json").read_text())
    for key in ("env_steps", "train_steps", "adam_steps"):
        assert metrics[key] == base_metrics[key], key
    assert [c["k"] for c in metrics["curve"]] == [c["k"] for c in base_metrics["curve"]]
    got = online_state(tmp_path)
    assert (got["train_step"], got["adam_steps"], got["env_steps"]) == (TRAIN_STEPS, 2 * TRAIN_STEPS, 80)
    # The counters, the schedules and the transitions collected end where the uninterrupted run's do.
    for key in ("train_step", "env_steps", "adam_steps", "epsilon", "learning_rate", "transitions"):
        assert got[key] == want[key], key
    assert got["transitions"] == got["env_steps"]
    # The buffer is intact: what the killed run had checkpointed, then what the relaunch added. The relaunch
    # starts a new episode, so its episode ends fall elsewhere and the buffer's boundary frames (LAST ->
    # FIRST) may number one fewer or more than the uninterrupted run's: its transitions are compared.
    at_kill = run.at_kill
    kept = 0 if at_kill is None else at_kill["frames"]
    if at_kill is not None:
        assert at_kill["transitions"] == at_kill["env_steps"]
        for key in ("step_type", "observation", "action"):
            np.testing.assert_array_equal(got[key][:kept], at_kill[key], err_msg=key)
    # The initial collect (restored, or collected again from the same seed) is the uninterrupted run's.
    n = want["initial_collect_steps"]
    for key in ("step_type", "observation", "action"):
        np.testing.assert_array_equal(got[key][:n], want[key][:n], err_msg=key)
    print(
        f"\n{run.where}; checkpoint at the kill: train step "
        f"{None if at_kill is None else at_kill['train_step']}, {kept} frames; ends at train step "
        f"{got['train_step']}, env steps {got['env_steps']}, {got['transitions']} transitions in "
        f"{got['frames']} frames (uninterrupted: {want['frames']}), ε {got['epsilon']:.4g}, "
        f"learning rate {got['learning_rate']:.4g}"
    )


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

    from pbo_tf.envs import chain_walk
    from pbo_tf.operators import LinearPBO
    from pbo_tf.optimizers import AnnealedAdam
    from pbo_tf.q import TableQ

    def trainer():
        q = TableQ(20, 2)
        data = chain_walk.collect_dataset(0)
        pbo, target = LinearPBO(40, init_std=1e-3), LinearPBO(40)
        kwargs = dict(refreshes=3, passes_per_refresh=1, batch_size=100, w_batch_size=5)
        kwargs.update(optimizer=AnnealedAdam(lr_start=1e-2, lr_end=1e-4))
        kwargs.update(checkpoint_every_s=0)  # a checkpoint after every refresh
        t = _profqi(
            pbo=pbo, target_pbo=target, q_family=q, dataset=data.to_dataset(), w_set=q.initial_params(10, 0),
            K=2, gamma=0.9, seed=3, checkpoint_dir=str(tmp_path / "checkpoints"), log=None, **kwargs,
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
