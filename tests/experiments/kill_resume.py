"""Shared by the kill-and-resume tests (test_kill_resume.py, test_kill_resume_online.py): the configs they
kill, `launch/train.py` run and SIGKILLed at a seeded random moment of its training, the run folder read back
after a kill, and the uninterrupted baseline.

Each run is killed ``TRIALS`` times: launched and killed at trial 0's moment, relaunched into the same folder
and killed at trial 1's, and so on, then relaunched to the end. Each kill is drawn from
``random.Random("<config>/<trial>")``: a marker line of the run's output (0: the line before training starts,
then one per refresh / training step, the last excluded; trial i draws from the i-th third of them, so the
kills land at the start, the middle and the end of training) and a fraction of the time to the next marker
(the launch's last refresh / training step; the uninterrupted run's time after markers 0 and 1, or when the
relaunch has not yet printed two consecutive markers) after which the kill comes. The tests print where
each kill landed (``pytest -s``).

Checkpoints are written after every refresh / training step, so kills land between and during saves. After
every kill each file of the folder that a reader opens (JSON, NPZ, the latest TensorFlow checkpoint) must
read back whole.
"""

import dataclasses
import itertools
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

import numpy as np
import tensorflow as tf
from runner_sizes import TINY  # tests/experiments/ is on sys.path (pytest prepends it)
from test_online import HIDDEN
from test_online import TINY as ONLINE_TINY

from pbo_tf.experiments.config import GIN_CONFIGS_DIR

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
    "BicycleOnlineEnv.eval_jit_compile=False",  # (the graph-mode steps come with ONLINE_TINY)
]


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
    """A kill and the relaunch after it."""

    where: str  # where the kill landed, for the report
    killed: Launch
    resumed: Launch  # the next trial's killed launch, or the last launch, which runs to the end
    at_kill: object = None  # what ``after_kill`` read from the killed run's folder
    #: the latest complete checkpoint of each checkpoints folder at the kill (`latest_checkpoints`)
    checkpoints_at_kill: dict = dataclasses.field(default_factory=dict)

    @property
    def ran_to_the_end(self) -> bool:
        return self.resumed.returncode == 0


def kill_and_resume(config: Config, base: Baseline, root, after_kill=None) -> list[Trial]:
    """Launches ``config`` into ``root`` and SIGKILLs it at trial 0's random moment during training,
    relaunches it and kills it at trial 1's moment, and so on for the ``TRIALS`` trials, then relaunches it
    to the end. After each kill the folder must read back whole, hold no ``metrics.json`` (and
    ``after_kill(root)`` reads it). Returns the trials, each one's relaunch being the next one's killed
    launch (the last one's runs to the end)."""
    kills = []
    for trial in range(TRIALS):
        rng = random.Random(f"{config.name}/{trial}")
        marker = rng.randint(trial * config.n // TRIALS, (trial + 1) * config.n // TRIALS - 1)  # 0..n - 1
        fraction = rng.random()
        killed = launch(config, root, kill_at=(marker, fraction, fraction * base.durations[marker]))
        assert killed.returncode == -signal.SIGKILL, (
            f"trial {trial} not killed (rc {killed.returncode}):\n{killed.text[-3000:]}"
        )
        assert not os.path.exists(os.path.join(root, "metrics.json")), f"trial {trial}: killed after training"
        temporary = read_back(root)  # no partial file is read back
        checkpoints_at_kill = latest_checkpoints(root)
        where = (
            f"{config.name} trial {trial}: killed {killed.kill_delay * 1e3:.0f} ms after marker {marker} of "
            f"0..{config.n} (last line: {killed.killed_after[:60]!r}); latest checkpoints "
            f"{checkpoints_at_kill}; temporary files left {temporary}"
        )
        at_kill = None if after_kill is None else after_kill(root)
        kills.append((where, killed, at_kill, checkpoints_at_kill))
    last = launch(config, root)
    assert last.returncode == 0, f"{kills[-1][0]}:\n{last.text[-3000:]}"
    assert os.path.exists(os.path.join(root, "metrics.json"))
    trials = []
    for i, (where, killed, at_kill, checkpoints_at_kill) in enumerate(kills):
        resumed = kills[i + 1][1] if i + 1 < len(kills) else last
        restored = re.findall(r"restored checkpoint \S*ckpt-(\d+)", resumed.text)
        if restored:
            where += f"; the relaunch restored checkpoints {restored}"
        trials.append(Trial(where, killed, resumed, at_kill, checkpoints_at_kill))
    for before, after in itertools.pairwise(trials):  # a relaunch never goes back to an older checkpoint
        for folder, n in before.checkpoints_at_kill.items():
            assert (after.checkpoints_at_kill.get(folder) or 0) >= (n or 0), after.where
    return trials


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


def assert_ran_on(run: Trial, rounds: list[int], first: int, last: int) -> None:
    """The relaunch after the kill ran the refreshes / training steps ``rounds`` = ``first, first + 1, ...``
    in order: to ``last`` when it ran to the end, as far as it got when the next trial killed it."""
    end = last if run.ran_to_the_end else first + len(rounds) - 1
    assert rounds == list(range(first, end + 1)), run.where


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
