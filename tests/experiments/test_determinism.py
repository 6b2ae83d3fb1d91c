"""``pbo-train --deterministic`` (`pbo_tf.experiments.config.set_determinism`): TensorFlow's op determinism
is on, and two runs of the same small offline (LQR ProFQI, a deep operator) and online (bicycle
ProDQN) config give identical curves."""

import json
import os
import subprocess
import sys

from pbo_tf.cli import common, train

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def test_two_runs_with_deterministic_ops_give_identical_metrics(tmp_path):
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "deterministic_runs.py"), str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["enabled"] is True
    for name in ("offline", "online"):
        first, second = got[name]
        assert len(first) >= 3 and first == second, name  # every k, every metric, exactly


def test_the_flag_is_a_pbo_train_flag_and_stays_out_of_the_fingerprint(tmp_path, monkeypatch):
    """The flag reaches `set_determinism` before the run; the run folder's fingerprint does not record it."""
    import pbo_tf.experiments
    from pbo_tf.experiments import config

    calls = []
    monkeypatch.setattr(config, "set_determinism", lambda: calls.append("on"))
    monkeypatch.setattr(pbo_tf.experiments, "run_experiment", lambda root_dir, **_: calls.append(root_dir))
    args = ["pbo-train", "--gin_file=gin_configs/chain_walk/fqi.gin", f"--root_dir={tmp_path}"]
    assert common.call_main(train.run, train.FLAGS, [*args, "--deterministic"]) == 0
    assert calls == ["on", str(tmp_path)]
    calls.clear()
    assert common.call_main(train.run, train.FLAGS, args) == 0
    assert calls == [str(tmp_path)]
    assert "determinis" not in json.dumps(pbo_tf.experiments.run_folder.fingerprint())
