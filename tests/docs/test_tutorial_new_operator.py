"""docs/tutorials/new_operator.py --toy as a user runs it: the residual low-rank operator it defines and
registers is trained on car-on-hill, its curve goes past K, pbo-apply rebuilds it in a fresh process from
the run's config.gin (``--import=new_operator``) and exports it, and the export, loaded with TensorFlow
alone, gives the run's own iterates and ``ω + (ω V) Uᵀ + b`` on its variables."""

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO_ROOT, "docs", "tutorials", "new_operator.py")
K, EXTRA = 3, 4  # the tutorial's --toy sizes


def test_the_toy_tutorial_trains_applies_and_exports_its_operator(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, SCRIPT, "--toy", f"--work_dir={tmp_path / 'work'}"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'equivariant', 'residual_low_rank']" in done.stdout
    assert "pbo-apply --import=new_operator" in done.stdout
    work = tmp_path / "work"
    run = work / "runs" / "profqi"
    metrics = json.loads((run / "metrics.json").read_text())
    assert (metrics["env"], metrics["algorithm"], metrics["K"]) == ("car_on_hill", "profqi", K)
    operator = metrics["operator"]
    assert (operator["kind"], operator["d"], operator["rank"]) == ("ResidualLowRankPBO", 151, 4)
    assert operator["layers"] == [[3, 30], [30, 1]]  # read off FlatMLPQ.layout
    assert "ResidualLowRankPBO.rank = 4" in (run / "config.gin").read_text()
    assert [e["k"] for e in metrics["curve"]] == list(range(K + EXTRA + 1))
    past_k = [e["J"] for e in metrics["curve"] if e["k"] > K]
    assert len(past_k) == EXTRA and np.all(np.isfinite(past_k))

    # pbo-apply's curve (a fresh process) repeats the run's up to K + extra and goes on past it
    applied = json.loads((run / f"applied_k{K + EXTRA + 5}.json").read_text())["curve"]
    assert [e["k"] for e in applied] == list(range(K + EXTRA + 6))
    for mine, theirs in zip(applied, metrics["curve"], strict=False):
        assert mine["J"] == theirs["J"]
    assert np.all(np.isfinite([e["J"] for e in applied]))

    # the export, loaded with TensorFlow alone, is the trained operator
    module = tf.saved_model.load(str(work / "export" / "operator"))
    with np.load(run / "iterates.npz") as data:
        iterates = data["iterates"]
    assert iterates.shape == (K + EXTRA + 1, 151)
    np.testing.assert_array_equal(module.omega0.numpy(), iterates[0])
    reloaded = module.iterate(tf.constant(iterates[:1]), tf.constant(K + EXTRA)).numpy()[:, 0]
    np.testing.assert_allclose(reloaded, iterates, rtol=1e-5, atol=1e-6)
    weights = {v.name.split("/")[-1].split(":")[0]: v.numpy() for v in module.operator_variables}
    assert weights["U"].shape == weights["V"].shape == (151, 4) and weights["b"].shape == (151,)
    omega = np.random.default_rng(0).normal(size=[2, 151]).astype(np.float32)
    by_hand = omega + (omega.astype(np.float64) @ weights["V"]) @ weights["U"].T + weights["b"]
    np.testing.assert_allclose(
        module.apply(tf.constant(omega), tf.constant(1)).numpy(), by_hand, rtol=1e-4, atol=1e-5
    )
    assert not np.allclose(iterates[K], iterates[0])  # the operator moved ω_0
    summary = json.loads((work / "summary.json").read_text())
    assert summary["export_max_abs_difference"] <= 1e-5 and summary["K"] == K
