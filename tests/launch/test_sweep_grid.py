"""pbo-sweep's grid and engines: the cross product of gin files × ``--ks`` × ``--grid`` × seeds and its
folder names; a tiny chain-walk sweep (FQI and ProFQI, K = 2, two seeds) through the local engine and
through a local Ray instance (one per module; skipped without Ray): every point's metrics.json, a rerun that
skips every point, a point stopped before its metrics.json that resumes from its checkpoint, and points
with a bad binding or a corrupt input that fail (exit code and error line in sweep_status.json, exit code
1) while the others finish; and Ctrl-C during a sweep, then the same command resuming it."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from sweep_in_process import run_sweep  # tests/launch/ is on sys.path (pytest prepends it)

from pbo_tf.cli import sweep
from pbo_tf.experiments.config import GIN_CONFIGS_DIR

FQI = f"{GIN_CONFIGS_DIR}/chain_walk/fqi.gin"
PROFQI = f"{GIN_CONFIGS_DIR}/chain_walk/profqi.gin"
#: Test-size chain-walk runs (K comes from --ks), trained in graph mode: compiling the XLA rounds would be a
#: fifth to a quarter of each point's process (tests/trainers covers them; the Ctrl-C test keeps them).
TINY = ["REFRESHES=1", "PASSES_PER_REFRESH=1", "MAX_EPOCHS=2", "PATIENCE=1", "EXTRA_ITERATIONS=2"]
TINY += ["ProFQIConfig.w_size=4", "ProFQIConfig.w_batch_size=2"]
TINY += ["FQIConfig.jit_compile=False", "ProFQIConfig.jit_compile=False"]
K0_ERROR = "K must be an integer >= 1, got 0"  # FQIConfig.K (FQI) and ProFQIConfig.K (ProFQI)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def call(root, *args):
    """``(exit code, stderr, stdout)`` of a tiny sweep of FQI and ProFQI into ``root``, in this process."""
    argv = ["sweep.py", f"--root_dir={root}", f"--gin_file={FQI}", f"--gin_file={PROFQI}", "--seeds=0,1"]
    argv += [f"--gin_bindings={b}" for b in TINY] + ["--intra_op_threads=1", "--progress_every_s=2", *args]
    return run_sweep(argv)


def statuses(root):
    """``{point: status entry}`` of the last sweep into ``root``."""
    return json.loads((root / sweep.STATUS_FILE).read_text())["points"]


def metrics(root, key):
    return json.loads((root / key / "metrics.json").read_text())


def test_the_grid_is_the_cross_product_of_gin_files_ks_grid_values_and_seeds():
    grid = sweep.parse_grid(["REFRESHES=1,2", "AnnealedAdam.lr_start=1e-3, 1e-4 ,3e-5"])
    assert grid == [("REFRESHES", ["1", "2"]), ("AnnealedAdam.lr_start", ["1e-3", "1e-4", "3e-5"])]
    points = sweep.grid_points("R", [FQI, PROFQI], ["0", "1", "2"], False, [2, 5, 15], grid, ["X=1"])
    assert len(points) == 2 * 3 * 2 * 3 * 3 == 108 == len({p.key for p in points})
    point = points[((((1 * 3 + 1) * 2 + 1) * 3 + 1) * 3) + 2]  # profqi, K=5, REFRESHES=2, 1e-4, seed 2
    assert point.key == "chain_walk/k5/profqi/REFRESHES_2/AnnealedAdam.lr_start_1e-4/seed_2"
    assert point.folder == "R/" + point.key and point.gin_file == PROFQI
    assert point.bindings == ("SEED=2", "X=1", "K=5", "REFRESHES=2", "AnnealedAdam.lr_start=1e-4")
    # A small grid, every folder written out.
    small = sweep.grid_points("R", [FQI], ["0", "1"], False, [2, 5], [("A", ["1", "'x y'"])])
    assert [p.key for p in small] == [
        "chain_walk/k2/fqi/A_1/seed_0",
        "chain_walk/k2/fqi/A_1/seed_1",
        "chain_walk/k2/fqi/A_x_y/seed_0",
        "chain_walk/k2/fqi/A_x_y/seed_1",
        "chain_walk/k5/fqi/A_1/seed_0",
        "chain_walk/k5/fqi/A_1/seed_1",
        "chain_walk/k5/fqi/A_x_y/seed_0",
        "chain_walk/k5/fqi/A_x_y/seed_1",
    ]
    assert small[3].bindings == ("SEED=1", "K=2", "A='x y'")
    batched = sweep.grid_points("R", [FQI, PROFQI], ["3", "4", "5"], True, [15])
    assert [p.key for p in batched] == ["chain_walk/k15/fqi/seeds_3-5", "chain_walk/k15/profqi/seeds_3-5"]
    assert batched[0].bindings == ("SEED=3", "NUM_SEEDS=3", "K=15")
    # Without --ks and --grid: the layout of earlier sweeps.
    plain = sweep.grid_points("R", [FQI], ["0", "7"], False, bindings=["K=5"])
    assert [p.folder for p in plain] == [sweep.run_dir("R", FQI, "0"), sweep.run_dir("R", FQI, "7")]
    assert [p.key for p in plain] == ["chain_walk/fqi/seed_0", "chain_walk/fqi/seed_7"]
    assert plain[1].bindings == ("SEED=7", "K=5")
    grid_only = sweep.grid_points("R", [FQI], ["0"], grid=[("A", ["1"])])
    assert [p.key for p in grid_only] == ["chain_walk/fqi/A_1/seed_0"]


@pytest.mark.parametrize(
    "spec, pattern",
    [
        ("REFRESHES", "expected NAME=v1,v2"),
        ("REFRESHES=", "expected NAME=v1,v2"),
        ("REFRESHES=1,,2", "expected NAME=v1,v2"),
        ("1X=1", "expected NAME=v1,v2"),
        ("A='a b',a_b", "values repeat"),
    ],
)
def test_a_bad_grid_flag_is_refused(spec, pattern):
    with pytest.raises(ValueError, match=pattern):
        sweep.parse_grid([spec])


def test_bad_grid_flags_and_a_missing_ray_are_one_line_and_exit_code_2(tmp_path, monkeypatch):
    for args, pattern in (
        (["--ks=2,x"], r"--ks must be comma-separated integers"),
        (["--ks=2", "--gin_bindings=K=3"], r"K is both swept \(--ks / --grid\) and bound by --gin_bindings"),
        (["--grid=A=1", "--grid=A=2"], r"--grid names A twice"),
        (["--ks=0"], re.escape(K0_ERROR)),  # every point has the bad value: nothing to run
    ):
        code, err, out = call(tmp_path, *args)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith("sweep.py: error: ") and re.search(pattern, err), err
        assert "started" not in out
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as when it is not installed
    code, err, _ = call(tmp_path, "--engine=ray")
    want = "sweep.py: error: ray is not installed: --engine=ray needs it; install it with "
    want += "`pip install -e .[sweep]`"
    assert code == 2 and err.strip().splitlines() == [want], err


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    """The tiny sweep with K = 2 and K = 0 (a bad value) through the local engine, two points at a time."""
    root = tmp_path_factory.mktemp("local")
    return root, call(root, "--ks=2,0", "--parallel=2")


def test_the_local_engine_runs_every_point_and_a_bad_binding_fails_only_its_points(local_sweep):
    root, (code, err, out) = local_sweep
    assert code == 1, err + out
    assert err.strip().splitlines() == [
        f"sweep.py: error: 4 of 8 points failed (see {root}/sweep_status.json)"
    ]
    points = statuses(root)
    assert sorted(points) == [
        f"chain_walk/k{k}/{a}/seed_{s}" for k in (0, 2) for a in ("fqi", "profqi") for s in (0, 1)
    ]
    for algorithm in ("fqi", "profqi"):
        for seed in (0, 1):
            key = f"chain_walk/k2/{algorithm}/seed_{seed}"
            got = metrics(root, key)
            assert (got["algorithm"], got["K"], got["seed"]) == (algorithm, 2, seed)
            assert (
                points[key]["status"] == "done"
                and points[key]["exit_code"] == 0
                and points[key]["wall_s"] > 0
            )
            bad = points[f"chain_walk/k0/{algorithm}/seed_{seed}"]
            assert (bad["status"], bad["exit_code"]) == ("failed", 2) and K0_ERROR in bad["error"]
            assert not (root / f"chain_walk/k0/{algorithm}/seed_{seed}").exists()
    assert "4 runs to launch, 2 at a time" in out and out.count("started: ") == 4
    assert "progress: " in out and " running, 4 failed, " in out
    assert "sweep: 4 done, 0 running, 4 failed, 0 left, 0 skipped" in out


def test_a_rerun_skips_every_complete_point(local_sweep):
    root, _ = local_sweep
    code, err, out = call(root, "--ks=2", "--parallel=2")
    assert code == 0 and not err, err
    assert "0 runs to launch" in out and "started" not in out and out.count("skip (complete)") == 4
    assert {entry["status"] for entry in statuses(root).values()} == {"skipped"} and len(statuses(root)) == 4


def test_a_stopped_point_resumes_and_a_failing_one_does_not_stop_it(local_sweep, tmp_path):
    root = tmp_path / "sweep"
    shutil.copytree(local_sweep[0], root)
    stopped, broken = root / "chain_walk/k2/profqi/seed_0", root / "chain_walk/k2/fqi/seed_1"
    (stopped / "metrics.json").unlink()  # killed after its last checkpoint, before its metrics
    (broken / "metrics.json").unlink()
    (broken / "dataset.npz").write_bytes(b"not a dataset")
    code, err, out = call(root, "--ks=2", "--parallel=2")
    assert code == 1 and "1 of 4 points failed" in err, err + out
    points = statuses(root)
    assert points["chain_walk/k2/profqi/seed_0"]["status"] == "done" and metrics(
        root, stopped.relative_to(root)
    )
    assert "restored checkpoint" in (stopped / "log.txt").read_text()
    failed = points["chain_walk/k2/fqi/seed_1"]
    assert (failed["status"], failed["exit_code"]) == ("failed", 2)
    assert (
        failed["error"].startswith("train.py: error: dataset ")
        and "is not an .npz of arrays" in failed["error"]
    )
    assert [points[f"chain_walk/k2/{k}"]["status"] for k in ("fqi/seed_0", "profqi/seed_1")] == [
        "skipped"
    ] * 2


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray instance for the module (the sweeps join it instead of starting their own). Its workers,
    and the training processes they start, run at the test's own priority: Ray starts them at niceness 15
    by default, where the suite's other worker and any other load on the machine starve them (a point that
    takes seconds takes minutes)."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e .[sweep])")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_worker_niceness", "0")  # read by the raylet that ray.init starts
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_the_ray_engine_runs_every_point_as_a_task_and_reports_failures(ray_instance, tmp_path):
    code, err, out = call(tmp_path, "--ks=2,0", "--batch_seeds", "--engine=ray")
    assert code == 1 and "2 of 4 points failed" in err, err + out
    points = statuses(tmp_path)
    for algorithm in ("fqi", "profqi"):
        key = f"chain_walk/k2/{algorithm}/seeds_0-1"
        assert points[key]["status"] == "done" and points[key]["wall_s"] > 0
        got = metrics(tmp_path, key)
        assert (got["algorithm"], got["K"], got["seeds"]) == (algorithm, 2, [0, 1])
        bad = points[f"chain_walk/k0/{algorithm}/seeds_0-1"]
        assert bad["status"] == "failed" and K0_ERROR in bad["error"]
    assert "2 runs to launch, on Ray" in out and ray_instance.is_initialized()
    code, err, out = call(tmp_path, "--ks=2", "--batch_seeds", "--engine=ray")
    assert code == 0 and out.count("skip (complete)") == 2 and "started" not in out, err + out
    assert [entry["status"] for entry in statuses(tmp_path).values()] == ["skipped"] * 2
    broken = tmp_path / "chain_walk/k2/fqi/seeds_0-1"
    (broken / "metrics.json").unlink()
    (broken / "seed_1" / "dataset.npz").write_bytes(b"not a dataset")  # (seeds in one graph: one each)
    code, err, out = call(tmp_path, "--ks=2", "--batch_seeds", "--engine=ray")
    assert code == 1 and "1 of 2 points failed" in err, err + out
    failed = statuses(tmp_path)["chain_walk/k2/fqi/seeds_0-1"]
    assert (failed["status"], failed["exit_code"]) == ("failed", 2) and "is not an .npz" in failed["error"]
    assert failed["wall_s"] > 0


def _processes_mentioning(text: str) -> list[int]:
    """The pids of this machine's processes whose command line contains ``text`` (Linux /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                pass  # the process ended meanwhile
    return pids


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_ctrl_c_stops_every_point_records_them_and_a_rerun_resumes_them(tmp_path):
    """Ctrl-C (SIGINT to the sweep's whole process group, as a terminal sends it) while two ProFQI points
    train: the sweep exits 130 within seconds, no training process is left, both points are recorded as
    failed, and the same command then resumes both from their checkpoints to complete runs."""
    root = tmp_path / "sweep"
    argv = [sys.executable, os.path.join(REPO, "launch", "sweep.py"), f"--root_dir={root}"]
    argv += [f"--gin_file={PROFQI}", "--seeds=0,1", "--ks=2", "--parallel=2", "--intra_op_threads=1"]
    argv += ["--gin_bindings=REFRESHES=200", "--gin_bindings=EXTRA_ITERATIONS=2", "--progress_every_s=1"]
    # A checkpoint after every refresh: the first one comes after refresh 1 whatever the host's speed, and a
    # point is paused within a poll (0.2 s, a few refreshes) of it, long before its 200th.
    argv += ["--gin_bindings=ProFQIConfig.checkpoint_every_s=0"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
    points = [root / f"chain_walk/k2/profqi/seed_{s}" for s in (0, 1)]
    # As from a terminal: SIGINT at its default disposition, even when this suite itself runs in the
    # background of a non-interactive shell (which starts it with SIGINT ignored, inherited across exec:
    # the sweep would then ignore the Ctrl-C, finish its points and exit 0).
    sweep_proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip

    # A point that has checkpointed while the other is still starting (a loaded host can start one several
    # seconds after the other, and a fast one trains a point in a few) is paused (SIGSTOP) until the other
    # has checkpointed too, so that the Ctrl-C finds both in the middle of their training.
    def checkpointed(point):
        return (point / "checkpoints" / "checkpoint").exists()

    paused = {}  # point -> the pids of its training process, stopped
    try:
        deadline = time.monotonic() + 240
        while not all(checkpointed(p) for p in points):
            assert sweep_proc.poll() is None, sweep_proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint within 240 s"
            for point in points:
                if point not in paused and checkpointed(point):
                    paused[point] = _processes_mentioning(f"--root_dir={point}")
                    for pid in paused[point]:
                        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.2)
        assert not any((p / "metrics.json").exists() for p in points), "the points finished too early"
        os.killpg(sweep_proc.pid, signal.SIGINT)  # delivered to a paused point when it continues
        for pids in paused.values():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        out, err = sweep_proc.communicate(timeout=60)
    finally:
        if sweep_proc.poll() is None:
            os.killpg(sweep_proc.pid, signal.SIGKILL)
    assert sweep_proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "sweep.py: interrupted (the run folder keeps its last checkpoint)"
    assert _processes_mentioning(str(root)) == []
    recorded = statuses(root)
    assert {recorded[f"chain_walk/k2/profqi/seed_{s}"]["status"] for s in (0, 1)} == {"failed"}
    assert not any((p / "metrics.json").exists() for p in points)

    # The same command line again, run in this process (its points are training subprocesses as before; a
    # second sweep process would only add its own TensorFlow start).
    code, err, out = run_sweep(argv[1:])
    assert code == 0, err + out
    assert out.count("started: ") == 2
    for point in points:
        assert json.loads((point / "metrics.json").read_text())["K"] == 2
        assert "restored checkpoint" in (point / "log.txt").read_text()
    assert {entry["status"] for entry in statuses(root).values()} == {"done"}


def test_the_eta_charges_each_point_the_mean_time_of_its_gin_files_finished_points():
    def entry(gin_file, status, wall=None):
        return {"status": status, "wall_s": wall, "gin_file": gin_file}

    entries = {
        "a0": entry("fqi.gin", "done", 10.0),
        "a1": entry("fqi.gin", "failed", 30.0),  # mean FQI point: 20 s
        "b0": entry("profqi.gin", "done", 100.0),  # mean ProFQI point: 100 s
        "a2": entry("fqi.gin", "running"),
        "b1": entry("profqi.gin", "running"),
        "b2": entry("profqi.gin", "pending"),
    }
    status = sweep.Status("unused", entries)
    # 20 + 100 + 100 s of work, 2 at a time: 110 s
    assert sweep.progress(status, 1, 2) == "2 done, 2 running, 1 failed, 1 left, ETA 1m50s"
    # a running point is charged what is left of its mean: a2 ran 14 of its 20 s, b1 130 s (over its mean)
    entries["a2"]["started"], entries["b1"]["started"] = 1001.0, 885.0
    assert sweep.progress(status, 1, 2, now=1015.0).endswith("ETA 53s")  # (6 + 0 + 100) / 2
    entries["c0"] = entry("oracle.gin", "pending")  # no oracle point has finished: no ETA yet
    assert sweep.progress(status, 2, 2).endswith("2 left, ETA after a point of each gin file has finished")
    for key in ("a2", "b1", "b2", "c0"):
        entries[key]["status"] = "skipped"
    assert sweep.progress(status, 0, 2) == "2 done, 0 running, 1 failed, 0 left"


def test_a_running_point_shows_its_latest_progress_line_and_its_own_eta(tmp_path):
    """The last line with a count i/N of the point's log.txt, TensorFlow's log lines skipped; ETA =
    elapsed · (N − i) / i: 3 refreshes of 12 in 60 s leave 9 · 20 s = 3 minutes."""
    log = tmp_path / "log.txt"
    assert sweep.point_progress(str(tmp_path), started=0.0, now=60.0) is None  # no log yet
    log.write_text(
        "car_on_hill / profqi: K=9, seed=0\n"
        "ProFQI refresh 2/12: loss 0.5, 300 gradient steps/s\n"
        "ProFQI refresh 3/12: loss 0.4, 310 gradient steps/s\n"
        "W1201 20:28:52.203632 140062881352576 polymorphic_function.py:157] 5 out of the last 12 calls\n"
        "\n"
    )
    got = sweep.point_progress(str(tmp_path), started=0.0, now=60.0)
    assert got == "ProFQI refresh 3/12: loss 0.4, 310 gradient steps/s (ETA 3m00s)"
    assert (
        sweep.point_progress(str(tmp_path), started=None)
        == "ProFQI refresh 3/12: loss 0.4, 310 gradient steps/s"
    )
    log.write_text("car_on_hill / fqi: K=9, seed=0\n")  # no count yet
    assert sweep.point_progress(str(tmp_path), started=0.0, now=5.0) is None


def test_the_status_file_keeps_the_points_of_earlier_sweeps_it_does_not_run(tmp_path):
    """A sweep into a root whose status file lists other points: this sweep's points under ``points``, the
    others (and entries already under ``earlier``) under ``earlier``, a point of both sweeps replaced by
    this sweep's entry; an unreadable file is rewritten from this sweep alone."""
    path = tmp_path / sweep.STATUS_FILE
    path.write_text(json.dumps({
        "updated": "x",
        "points": {"a/seed_0": {"status": "done", "wall_s": 5.0}, "b/seed_0": {"status": "failed"}},
        "earlier": {"old/seed_0": {"status": "done"}, "b/seed_0": {"status": "done"}},
    }))  # fmt: skip
    status = sweep.Status(
        str(tmp_path),
        {
            "b/seed_0": {"status": "pending", "gin_file": "f.gin"},
            "c/seed_0": {"status": "pending", "gin_file": "f.gin"},
        },
    )
    status.write()
    body = json.loads(path.read_text())
    assert body["points"] == {
        "b/seed_0": {"status": "pending", "gin_file": "f.gin"},
        "c/seed_0": {"status": "pending", "gin_file": "f.gin"},
    }
    assert body["earlier"] == {
        "old/seed_0": {"status": "done"},
        "a/seed_0": {"status": "done", "wall_s": 5.0},
    }
    assert sweep.progress(status, 2, 1).startswith("0 done, 0 running, 0 failed, 2 left")  # this sweep's only
    path.write_text("{not json")
    sweep.Status(str(tmp_path), {"c/seed_0": {"status": "done"}}).write()
    assert json.loads(path.read_text())["points"] == {"c/seed_0": {"status": "done"}}
    assert "earlier" not in json.loads(path.read_text())
