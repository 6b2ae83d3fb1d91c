"""docs/tutorials/new_loss_term.py --toy as a user runs it: the contraction penalty it defines in its own file
trains chain-walk's ProFQI through gin, its metrics reach the progress line, TensorBoard and metrics.json by
themselves, and with weight 1 it shrinks the trained operator's largest stretch on W against the same run
with weight 0 (measured, not trained on)."""

import json
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO_ROOT, "docs", "tutorials", "new_loss_term.py")
K = 5  # the tutorial's --toy K


def test_the_toy_tutorial_trains_with_its_term_and_logs_its_metrics(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, SCRIPT, "--toy", f"--work_dir={tmp_path / 'work'}"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ProFQIConfig.loss_terms = [@BellmanTerm(), @ContractionPenalty()]" in done.stdout
    summary = json.loads((tmp_path / "work" / "summary.json").read_text())
    own = ["contraction", "contraction/ratio_max", "contraction/ratio_mean"]
    for label, weight in (("measured_only", 0.0), ("penalised", 1.0)):
        run = tmp_path / "work" / "runs" / label
        metrics = json.loads((run / "metrics.json").read_text())
        assert (metrics["env"], metrics["K"]) == ("chain_walk", K)
        assert metrics["operator"]["loss_terms"] == ["bellman", "contraction"]
        terms = metrics["loss_terms"]  # metrics.json: the terms' metrics at the last refresh
        assert sorted(terms) == sorted(["bellman", *(f"bellman/k{k}" for k in range(1, K + 1)), *own])
        assert 0 < terms["contraction/ratio_mean"] <= terms["contraction/ratio_max"]
        assert terms["contraction"] > 0  # pairs stretched past 0.5 remain in both runs
        tags = summary[label]["tensorboard_tags"]  # TensorBoard, read back from the event files
        assert all(f"loss_terms/{name}" in tags for name in own)
        assert summary[label]["ratio_max_last"] == terms["contraction/ratio_max"]
        line = summary[label]["progress_lines"][-1]  # the progress line
        assert f"contraction/ratio_max {terms['contraction/ratio_max']:.4g}" in line
        assert summary[label]["weight"] == weight
    # trained on, the penalty shrinks the operator's stretch of W (toy run: 0.87 -> 0.69)
    before, after = (summary[label]["metrics_json"] for label in ("measured_only", "penalised"))
    assert after["contraction/ratio_max"] < before["contraction/ratio_max"] - 0.05
    assert after["contraction/ratio_mean"] < before["contraction/ratio_mean"]
