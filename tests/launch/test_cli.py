"""Every bad input to a program is one line on stderr and exit code 2 (3 for a diverged run), no traceback
unless --verbose: the programs' `run` called in-process through `pbo_tf.cli.common.call_main`, and two
cases as a user runs them (subprocesses of the launch/ files). Also: a tiny run with legitimate macros
works, a folder of another experiment is refused (by train and sweep) unless --overwrite, a diverged
offline run leaves failure.json, not metrics.json, and a tiny CPU run prints nothing on stderr."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pbo_tf.cli import common as cli
from pbo_tf.cli import play as play_policy
from pbo_tf.cli import plot, sweep, train
from pbo_tf.deps import MissingDependencyError
from pbo_tf.experiments.config import GIN_CONFIGS_DIR

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFQI = os.path.join(GIN_CONFIGS_DIR, "chain_walk", "profqi.gin")
FQI = os.path.join(GIN_CONFIGS_DIR, "chain_walk", "fqi.gin")
TINY = ["K=2", "REFRESHES=1", "PASSES_PER_REFRESH=1", "EXTRA_ITERATIONS=2", "ProFQIConfig.w_size=4"]
TINY += ["ProFQIConfig.w_batch_size=2"]
#: The name each program reports its errors under: its launch/ file's, as run by a user from a checkout.
PROGRAMS = {train: "train.py", sweep: "sweep.py", plot: "plot.py", play_policy: "play_policy.py"}


def call(program, *args):
    """``(exit code, stderr, stdout)`` of ``program``'s run on ``args``, in this process."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = cli.call_main(program.run, program.FLAGS, [PROGRAMS[program], *args])
    return code, err.getvalue(), out.getvalue()


def bindings(*values):
    return [f"--gin_bindings={b}" for b in values]


def tiny(root, *extra, gin_file=PROFQI):
    return [f"--gin_file={gin_file}", f"--root_dir={root}", *bindings(*TINY, *extra)]


def assert_one_line(result, want_code, pattern, program="train.py"):
    """``result`` (of `call`) exited with ``want_code`` and printed one error line matching ``pattern``."""
    import re

    code, err, _ = result
    lines = err.strip().splitlines()
    assert code == want_code, err
    assert len(lines) == 1 and lines[0].startswith(f"{program}: error: "), err
    assert "Traceback" not in err and re.search(pattern, lines[0]), lines[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A tiny chain-walk ProFQI run made by train.py with legitimate macro bindings."""
    root = tmp_path_factory.mktemp("finished") / "run"
    code, err, out = call(train, *tiny(root, "K=3", "REFRESHES=2"))
    assert code == 0, err
    metrics = json.loads((root / "metrics.json").read_text())
    assert metrics["K"] == 3 and len(metrics["curve"]) == 3 + 2 + 2  # k = 0..K+2 and the fixed point
    assert json.loads((root / "fingerprint.json").read_text())["bindings"]["ProFQIConfig.refreshes"] == 2
    return root


def _started(finished, tmp_path):
    """A copy of the finished run without metrics.json: a relaunch resumes it (and reads its files)."""
    root = tmp_path / "run"
    shutil.copytree(finished, root)
    (root / "metrics.json").unlink()
    return root


BAD_TRAIN = {
    "unknown env": (["Experiment.problem='mountain_car'"], r"Experiment: unknown environment 'mountain_car'"),
    "algorithm by name": (
        ["Experiment.algorithm='fqi'"],
        r"Experiment: algorithm must be an offline algorithm's builder "
        r"\(@FQI, @ProFQI, @Oracle or @FitOptimum\), got 'fqi'",
    ),
    "unknown algorithm": (
        ["Experiment.algorithm=@Sarsa"],
        r"bad gin binding 'Experiment.algorithm=@Sarsa': No configurable matching reference '@Sarsa'",
    ),
    "unknown configurable": (["NoSuchThing.x=1"], r"bad gin binding 'NoSuchThing.x=1': No configurable"),
    "mistyped parameter": (["ProFQIConfig.epochz=3"], r"doesn't have a parameter named 'epochz'"),
    "ill-typed macro": (["K='abc'"], r"ProFQIConfig.K = %K = 'abc': expected int, got str"),
    "float for an int": (["ProFQIConfig.refreshes=2.5"], r"ProFQIConfig.refreshes = 2.5: expected int"),
    "undefined macro": (
        ["EPOCH=3"],
        r"no gin file defines the macro EPOCH .*PASSES_PER_REFRESH, PATIENCE, REFRESHES",
    ),
    "macro used, not defined": (
        ["ProFQIConfig.K=%KK"],
        r"ProFQIConfig.K uses the macro %KK, which no gin file",
    ),
    "K = 0": (["K=0"], r"^train.py: error: ProFQIConfig.K must be an integer >= 1, got 0$"),
    "zero refreshes": (["REFRESHES=0"], r"ProFQIConfig.refreshes must be an integer >= 1, got 0"),
    "negative passes": (
        ["PASSES_PER_REFRESH=-1"],
        r"ProFQIConfig.passes_per_refresh must be an integer >= 1, got -1",
    ),
    "zero W": (["ProFQIConfig.w_size=0"], r"ProFQIConfig.w_size must be an integer >= 1, got 0"),
    "zero batch": (["ProFQIConfig.batch_size=0"], r"ProFQIConfig.batch_size must be an integer >= 1, got 0"),
    "batch > dataset": (
        ["ProFQIConfig.batch_size=401"],
        r"ProFQIConfig.batch_size must be in \[1, 400\].*got 401",
    ),
    "negative seed": (
        ["SEED=-1"],
        r"^train.py: error: Experiment.seed \(SEED\) must be an integer in \[0, 2\*\*32 - 1\]",
    ),
    "W batch not dividing W": (
        ["ProFQIConfig.w_batch_size=3"],
        r"ProFQIConfig.w_batch_size=3 must divide the size of W \(w_size=4\)",
    ),
    "no structured PBO": (
        ["Experiment.problem='bicycle'", "make_pbo.kind='structured'"],
        r"make_pbo: kind='structured': bicycle has no structured PBO",
    ),
}


@pytest.mark.parametrize("case", list(BAD_TRAIN))
def test_a_bad_config_is_one_line_and_exit_code_2(case, tmp_path):
    extra, pattern = BAD_TRAIN[case]
    assert_one_line(call(train, *tiny(tmp_path / "run", *extra)), 2, pattern)
    assert not (tmp_path / "run" / "metrics.json").exists()
    if case == "negative seed":  # refused before the folder is claimed: the corrected run is not refused
        assert not (tmp_path / "run").exists()


def test_a_run_refused_after_its_claim_leaves_the_folder_to_the_corrected_run(tmp_path):
    """The batch-size check needs the dataset, so it comes after the folder is claimed: the refused run
    takes its claim back (fingerprint.json, config.gin, the drawn dataset.npz) and the corrected run trains
    there without --overwrite (tests/experiments/test_run_folder.py: a folder holding anything else keeps its
    claim)."""
    run = tmp_path / "run"
    assert_one_line(call(train, *tiny(run, "ProFQIConfig.batch_size=401")), 2, r"batch_size must be in")
    assert not [p for p in run.rglob("*") if p.is_file()]
    code, err, _ = call(train, *tiny(run))
    assert code == 0, err
    assert (run / "metrics.json").exists()


def test_a_bad_binding_of_an_fqi_gin_file_is_one_line_and_writes_nothing(tmp_path):
    args = [f"--gin_file={FQI}", f"--root_dir={tmp_path}", "--gin_bindings=FQITrainer.fitting_stepz=3"]
    assert_one_line(call(train, *args), 2, r"bad gin binding 'FQITrainer.fitting_stepz=3'")
    assert not (tmp_path / "metrics.json").exists()


def test_bad_flags_files_and_folders_are_one_line_and_exit_code_2(tmp_path):
    assert_one_line(call(train, f"--gin_file={PROFQI}"), 2, r"--root_dir must have a value")
    assert_one_line(call(train, *tiny(tmp_path), "--gin_fle=x"), 2, r"Unknown command line flag 'gin_fle'")
    missing = tiny(tmp_path / "run")
    missing[0] = "--gin_file=gin_configs/chain_walk/nope.gin"
    assert_one_line(call(train, *missing), 2, r"gin file 'gin_configs/chain_walk/nope.gin' does not exist")
    fqi = tiny(tmp_path / "fqi", "FQIConfig.jit_compile='iteratoin'", gin_file=FQI)
    assert_one_line(call(train, *fqi), 2, r"FQIConfig.jit_compile must be one of .* got 'iteratoin'")
    two = [f"--gin_file={FQI}", f"--gin_file={PROFQI}", f"--root_dir={tmp_path / 'two'}"]
    assert_one_line(call(train, *two), 2, r"the gin files bind different algorithms \(fqi.gin @FQI, "
                    r"profqi.gin @ProFQI\): a run trains one; pbo-sweep takes several")  # fmt: skip
    assert not (tmp_path / "two").exists()
    (tmp_path / "a_file").write_text("")
    unwritable = tiny(tmp_path / "a_file" / "run")
    assert_one_line(call(train, *unwritable), 2, r"cannot write the run folder .*a_file/run.*Not a directory")


def test_corrupt_or_foreign_inputs_of_a_resumed_run_are_one_line(finished, tmp_path):
    from pbo_tf.envs.lqr.problem import LQRProblem

    root = _started(finished, tmp_path)
    dataset = root / "dataset.npz"
    good = dataset.read_bytes()
    dataset.write_bytes(good[: len(good) // 2])
    assert_one_line(
        call(train, *tiny(root, "K=3", "REFRESHES=2")), 2, r"dataset .* is corrupt or not an .npz file"
    )
    dataset.write_bytes(b"not a zip file at all")  # (NumPy takes anything else for a pickle: refused)
    pattern = r"dataset .* is not an .npz of arrays \(reading it would mean unpickling objects"
    assert_one_line(call(train, *tiny(root, "K=3", "REFRESHES=2")), 2, pattern)
    LQRProblem().dataset(0).save(str(dataset), env="lqr")
    assert_one_line(
        call(train, *tiny(root, "K=3", "REFRESHES=2")), 2, r"was collected on lqr, not chain_walk"
    )
    LQRProblem().dataset(0).save(str(dataset))  # (no environment recorded: the layout tells)
    pattern = (
        r"not a chain_walk dataset of this config \(121 transitions, expected 400; states of shape \[1\]"
    )
    assert_one_line(call(train, *tiny(root, "K=3", "REFRESHES=2")), 2, pattern)
    dataset.write_bytes(good)
    (data_file,) = (root / "checkpoints").glob("ckpt-*.data-*")
    data_file.write_bytes(b"garbage")
    pattern = r"checkpoint .* is corrupt or does not match this run \(a damaged or missing piece"
    assert_one_line(call(train, *tiny(root, "K=3", "REFRESHES=2")), 2, pattern)
    data_file.unlink()
    assert_one_line(call(train, *tiny(root, "K=3", "REFRESHES=2")), 2, pattern)
    (root / "checkpoints" / "checkpoint").write_text("garbage {{")  # (TensorFlow alone would start over)
    pattern = r"the checkpoint index .*checkpoints/checkpoint' is corrupt"
    assert_one_line(call(train, *tiny(root, "K=3", "REFRESHES=2")), 2, pattern)


def test_a_folder_of_another_experiment_is_refused_unless_overwrite_moves_it_aside(finished, tmp_path):
    root = tmp_path / "run"
    shutil.copytree(finished, root)
    code, err, _ = call(train, *tiny(root, "K=3", "REFRESHES=2", "ProFQIConfig.progress_every_s=1.0"))
    assert code == 0 and "skipping" in _ and not err  # same experiment (a cosmetic binding aside): skipped
    pattern = (
        r"holds another experiment: ProFQIConfig.K: 3 in the folder, 2 now; ProFQIConfig.refreshes: 2 in"
    )
    assert_one_line(call(train, *tiny(root)), 2, pattern + r".*pass --overwrite")
    # sweep.py makes the same check before launching anything: not "skip (complete)".
    sweep_root = tmp_path / "sweep"
    shutil.copytree(finished, sweep_root / "chain_walk" / "profqi" / "seed_0")
    args = [f"--root_dir={sweep_root}", f"--gin_file={PROFQI}", *bindings(*TINY)]
    result = call(sweep, *args)
    assert_one_line(
        result, 2, r"seed_0 holds another experiment: ProFQIConfig.K: 3 in the folder, 2 now", "sweep.py"
    )
    assert "started" not in result[2]
    code, err, out = call(sweep, *args[:2], *bindings(*TINY, "K=3", "REFRESHES=2"))
    assert code == 0 and "skip (complete)" in out and "0 runs to launch" in out
    # --overwrite: the old folder is moved aside (kept whole), the new run is made.
    code, err, out = call(train, *tiny(root), "--overwrite")
    assert code == 0, err
    (old,) = tmp_path.glob("run.old-*")
    assert json.loads((old / "metrics.json").read_text())["K"] == 3
    assert json.loads((root / "metrics.json").read_text())["K"] == 2


def test_other_launchers_report_bad_input_in_one_line(tmp_path):
    assert_one_line(call(sweep, f"--root_dir={tmp_path}", f"--gin_file={PROFQI}", *bindings("EPOCH=3")), 2,
                    r"no gin file defines the macro EPOCH", "sweep.py")  # fmt: skip
    assert_one_line(call(sweep, f"--root_dir={tmp_path}", f"--gin_file={PROFQI}", "--seeds=0,x"), 2,
                    r"--seeds must be comma-separated integers", "sweep.py")  # fmt: skip
    assert_one_line(call(sweep, f"--root_dir={tmp_path}", f"--gin_file={PROFQI}", "--parallel=0"), 2,
                    r"--parallel must be >= 1", "sweep.py")  # fmt: skip
    assert_one_line(call(sweep, f"--root_dir={tmp_path}", f"--gin_file={PROFQI}", "--intra_op_threads=-1"),
                    2, r"--intra_op_threads must be >= 0 \(0 = all cores\), got -1", "sweep.py")  # fmt: skip
    assert_one_line(call(sweep, f"--root_dir={tmp_path}", f"--gin_file={PROFQI}", "--seeds=0,1,0"), 2,
                    r"--seeds lists 0 more than once$", "sweep.py")  # fmt: skip
    assert_one_line(call(sweep, f"--root_dir={tmp_path}", f"--gin_file={PROFQI}", "--ks=2,3,2"), 2,
                    r"--ks lists 2 more than once$", "sweep.py")  # fmt: skip
    for binding in ("SEED=5", "NUM_SEEDS=3"):
        assert_one_line(call(sweep, f"--root_dir={tmp_path}", f"--gin_file={PROFQI}", "--seeds=0,1",
                             f"--gin_bindings={binding}"), 2,
                        rf"{binding[:-2]} is set by --seeds \(and --batch_seeds\), not by --gin_bindings",
                        "sweep.py")  # fmt: skip
    assert_one_line(call(sweep, f"--root_dir={tmp_path}", f"--gin_file={PROFQI}", "--grid=SEED=3,4"), 2,
                    r"--grid cannot sweep SEED: --seeds", "sweep.py")  # fmt: skip
    assert not list(tmp_path.iterdir())  # nothing launched, nothing written
    for wrong in ("x.pdf", "x"):
        assert_one_line(call(plot, f"--root_dir={tmp_path}", f"--output={tmp_path / wrong}"), 2,
                        r"--output .* must be a .png path \(pbo-plot writes PNG", "plot.py")  # fmt: skip
    same = f"--output={tmp_path / 'x.png'}", f"--policy_maps={tmp_path / 'x.png'}"
    assert_one_line(call(plot, f"--root_dir={tmp_path}", *same), 2, r"are the same file", "plot.py")
    out_png = f"--output={tmp_path / 'x.png'}"
    assert_one_line(call(plot, f"--root_dir={tmp_path / 'nope'}", out_png), 2, r"does not exist", "plot.py")
    assert_one_line(call(plot, f"--root_dir={tmp_path}", out_png), 2, r"No runs .* found under", "plot.py")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metrics.json").write_text("{oops")
    assert_one_line(call(plot, f"--root_dir={tmp_path / 'bad'}", out_png), 2, r"metrics.json", "plot.py")
    assert_one_line(call(plot, f"--root_dir={tmp_path}", out_png, "--table_ks=a"), 2, r"--table_ks must be",
                    "plot.py")  # fmt: skip
    not_policy = f"--policy_dir={tmp_path}"
    assert_one_line(call(play_policy, not_policy), 2, r"has no saved_model.pb", "play_policy.py")
    assert_one_line(
        call(play_policy, f"--policy_dir={tmp_path / 'nope'}"), 2, r"does not exist", "play_policy.py"
    )
    assert_one_line(
        call(play_policy, not_policy, "--episodes=0"),
        2,
        r"--episodes=0: 0 is not a positive integer",
        "play_policy.py",
    )
    (tmp_path / "saved_model.pb").write_bytes(b"garbage")
    assert_one_line(call(play_policy, not_policy), 2, r"corrupt or incomplete SavedModel", "play_policy.py")


def test_verbose_prints_the_traceback(tmp_path, monkeypatch):
    code, err, _ = call(train, *tiny(tmp_path, "K=0"), "--verbose")
    assert code == 2 and "Traceback" in err and err.strip().splitlines()[-1].startswith("train.py: error: ")
    monkeypatch.setenv(cli.VERBOSE_ENV, "1")
    code, err, _ = call(train, *tiny(tmp_path, "K=0"))
    assert code == 2 and "Traceback" in err


def test_a_diverged_offline_run_exits_3_and_leaves_failure_json_not_metrics(tmp_path):
    root = tmp_path / "run"
    args = tiny(
        root, "REFRESHES=6", "PASSES_PER_REFRESH=5", "AnnealedAdam.lr_start=1e8", "AnnealedAdam.lr_end=1e8"
    )
    assert_one_line(
        call(train, *args), 3, r"training diverged: the loss became (nan|inf) at step \d+ of refresh \d+"
    )
    failure = json.loads((root / "failure.json").read_text())
    assert failure["status"] == "diverged" and failure["where"].startswith("refresh")
    assert failure["setting"] == "offline" and failure["seeds"] == [0]  # the run it is about, for pbo-report
    assert not (root / "metrics.json").exists()
    assert np.isfinite(failure["step"])


def test_a_user_sees_one_line_from_the_command_line(tmp_path):
    """Two runs as a user makes them: no TensorFlow start-up lines, no traceback."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")  # even with TensorFlow's C++ logging on
    env.pop(cli.VERBOSE_ENV, None)
    for script, args, pattern in (
        ("train.py", tiny(tmp_path / "run", "K=0"), "ProFQIConfig.K must be an integer >= 1, got 0"),
        ("play_policy.py", [f"--policy_dir={tmp_path}"], "has no saved_model.pb"),
    ):
        out = subprocess.run(
            [sys.executable, os.path.join(REPO, "launch", script), *args],
            capture_output=True, text=True, cwd=REPO, timeout=300, env=env,
        )  # fmt: skip
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip().splitlines() == [out.stderr.strip()] and pattern in out.stderr, out.stderr


def test_a_tiny_cpu_run_prints_its_progress_and_nothing_on_stderr(tmp_path):
    """A run as a user makes it, on the CPU (a machine without an NVIDIA driver; elsewhere
    ``CUDA_VISIBLE_DEVICES=""`` hides the GPUs): the run's own lines on stdout, and no TensorFlow line at all,
    not even its ``failed call to cuInit`` error (which every run printed on a machine without a driver)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("TF_CPP_MIN_LOG_LEVEL", cli.VERBOSE_ENV)
    }
    if not cli._cpu_run():
        env["CUDA_VISIBLE_DEVICES"] = ""
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "launch", "train.py"), *tiny(tmp_path / "run")],
        capture_output=True, text=True, cwd=REPO, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "cuInit" not in out.stderr + out.stdout and out.stderr == "", out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3, out.stdout
    assert lines[0].startswith("chain_walk / profqi: K=2, seed=0, d=40, 400 transitions -> ")
    assert lines[1].startswith("ProFQI refresh 1/1: loss ") and lines[2].startswith("done in ")
    assert len(json.loads((tmp_path / "run" / "metrics.json").read_text())["curve"]) == 2 + 2 + 2


def test_the_cuinit_line_is_dropped_on_a_cpu_run_only(monkeypatch):
    """TensorFlow 2.21's line on a machine without a driver is dropped on a CPU run (no driver, or every GPU
    hidden by CUDA_VISIBLE_DEVICES), kept where a GPU could be used; other error lines are always kept."""
    cuinit = (
        "E0000 00:00:1795823433.874116    6131 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
        "error: Failed call to cuInit: UNKNOWN ERROR (303)"
    )
    other = "E0000 00:00:1795823433.874116    6131 cuda_platform.cc:60] failed to allocate 1.0G"
    info = (
        "I0000 00:00:1795823430.889085    6131 cudart_stub.cc:31] Could not find cuda drivers on your machine"
    )
    assert [cli._shown(line, cpu_run=True) for line in (cuinit, other, info)] == [False, True, False]
    assert [cli._shown(line, cpu_run=False) for line in (cuinit, other, info)] == [True, True, False]
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert cli._cpu_run()


def test_describe_unwraps_gin_and_tells_config_errors_from_bugs(tmp_path):
    gin_file = tmp_path / "no_problem.gin"
    gin_file.write_text("Experiment.algorithm = @FQI\nFQIConfig.K = 2\n")
    assert_one_line(
        call(train, f"--gin_file={gin_file}", f"--root_dir={tmp_path / 'run'}"),
        2,
        r"the gin config binds no value for the required Experiment.problem$",
    )
    wrapped = ValueError(
        "K must be >= 1, got 0\n  In call to configurable 'Experiment' (<class 'x.Experiment'>)"
    )
    assert cli.describe(wrapped) == (2, "Experiment: K must be >= 1, got 0")
    typed = TypeError("bad operand\n  In call to configurable 'make_pbo' (<function make_pbo>)")
    assert cli.describe(typed) == (2, "make_pbo: bad operand")  # a binding of the wrong kind
    assert cli.describe(TypeError("bad operand")) == (1, "TypeError: bad operand")  # a bug
    assert cli.describe(FloatingPointError("training diverged: nan"))[0] == 3
    missing = MissingDependencyError("tf_agents is not installed: ... `pip install --no-deps tf-agents`")
    assert cli.describe(missing) == (2, str(missing))  # an install to make, not a bug
