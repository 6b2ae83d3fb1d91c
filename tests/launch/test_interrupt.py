"""SIGTERM and Ctrl-C during a run: one line on stderr naming the checkpoint a rerun resumes from, a
non-zero exit code (143, 130), and the rerun resumes from that checkpoint and finishes."""

import os
import re
import signal
import subprocess
import sys
import time

from pbo_tf.experiments import run_folder

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: chain-walk ProFQI, a checkpoint and a progress line after every one of 100 refreshes (about 40 ms each).
ARGS = [
    "--gin_file=gin_configs/chain_walk/profqi.gin",
    *(
        f"--gin_bindings={b}"
        for b in (
            "K=2", "REFRESHES=100", "PASSES_PER_REFRESH=1", "EXTRA_ITERATIONS=1",
            "ProFQIConfig.checkpoint_every_s=0", "ProFQIConfig.progress_every_s=0",
        )
    ),
]  # fmt: skip
ENV = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def _launch(root):
    return subprocess.Popen(
        [sys.executable, os.path.join(REPO, "launch", "train.py"), f"--root_dir={root}", *ARGS],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=ENV,
    )  # fmt: skip


def _stop_after_refresh(process, n: int, sig) -> tuple[str, str]:
    """Sends ``sig`` once the run has printed its n-th refresh line; returns its (stdout, stderr)."""
    lines = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.match(rf"ProFQI refresh {n}/", line):
            process.send_signal(sig)
            break
    out, err = process.communicate(timeout=120)
    return "".join(lines) + out, err


def test_a_terminated_run_names_its_checkpoint_and_the_rerun_resumes_from_it(tmp_path):
    root = tmp_path / "run"
    process = _launch(root)
    _, err = _stop_after_refresh(process, 3, signal.SIGTERM)
    assert process.returncode == 143, err
    (line,) = err.strip().splitlines()
    (checkpoint,) = run_folder.latest_checkpoints(str(root))
    assert line == f"train.py: terminated (SIGTERM): a rerun resumes from {checkpoint}"
    assert os.path.exists(checkpoint + ".index")
    done = int(checkpoint.rsplit("-", 1)[1])  # refreshes done at that checkpoint
    assert done >= 3
    rerun = subprocess.run(
        [sys.executable, os.path.join(REPO, "launch", "train.py"), f"--root_dir={root}", *ARGS],
        capture_output=True, text=True, cwd=REPO, env=ENV, timeout=300,
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr
    assert f"restored checkpoint {checkpoint}" in rerun.stdout
    first = re.search(r"ProFQI refresh (\d+)/100", rerun.stdout)
    assert first and int(first.group(1)) == done + 1, rerun.stdout[:500]
    assert (root / "metrics.json").exists()


def test_ctrl_c_names_the_checkpoint_too(tmp_path, monkeypatch, capsys):
    """In-process: the run raises KeyboardInterrupt (what Ctrl-C raises) with one checkpoint written."""
    import pbo_tf.experiments
    from pbo_tf.cli import common, train

    def interrupted_run(root_dir, **_):
        folder = os.path.join(root_dir, "checkpoints")
        os.makedirs(folder)
        with open(os.path.join(folder, "checkpoint"), "w") as f:
            f.write('model_checkpoint_path: "ckpt-7"\n')
        raise KeyboardInterrupt

    monkeypatch.setattr(pbo_tf.experiments, "run_experiment", interrupted_run)
    root = tmp_path / "run"
    code = common.call_main(train.run, train.FLAGS, ["pbo-train", f"--root_dir={root}", *ARGS])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 130
    assert err == [f"pbo-train: interrupted (Ctrl-C): a rerun resumes from {root / 'checkpoints' / 'ckpt-7'}"]


def test_resume_text_names_each_seed_or_says_none_was_written(tmp_path):
    assert (
        run_folder.resume_text(str(tmp_path))
        == f"no checkpoint was written yet in {tmp_path}: a rerun starts afresh"
    )
    for seed, n in ((0, 5), (1, 5)):
        folder = tmp_path / f"seed_{seed}" / "checkpoints"
        folder.mkdir(parents=True)
        (folder / "checkpoint").write_text(
            f'model_checkpoint_path: "ckpt-{n}"\nall_model_checkpoint_paths: "ckpt-{n}"\n'
        )
    where = os.path.join(str(tmp_path), "seed_*", "checkpoints")
    assert (
        run_folder.resume_text(str(tmp_path))
        == f"a rerun resumes from ckpt-5 of each of the 2 seeds ({where})"
    )
    (tmp_path / "seed_1" / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-4"\n')
    assert run_folder.resume_text(str(tmp_path)) == "a rerun resumes from " + ", ".join(
        os.path.join(str(tmp_path), f"seed_{s}", "checkpoints", f"ckpt-{n}") for s, n in ((0, 5), (1, 4))
    )
