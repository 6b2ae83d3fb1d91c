"""scripts/operator_study.sh at toy size, as a user runs it: two variants through pbo-sweep and pbo-report;
the report's tables hold each variant's J at k = 1, K, K + 10, K + 30 and its operator activity, equal to
the values in the runs' metrics.json."""

import json
import os
import re
import subprocess

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The script's EXTRA_BINDINGS at toy size: 1000 transitions, |W| = 4, the refresh in graph mode (compiling
#: it with XLA would be a third of the test's time; tests/trainers covers the XLA refresh).
TOY = [
    "ProFQIConfig.jit_compile=False",
    "CarOnHillProblem.n_random=900",
    "CarOnHillProblem.n_oriented=100",
    "ProFQIConfig.w_size=4",
    "ProFQIConfig.w_batch_size=2",
]


def _row(report, first_cell):
    rows = [line for line in report.splitlines() if line.startswith(f"| {first_cell} |")]
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def test_operator_study_script_at_toy_size(tmp_path):
    env = dict(
        os.environ,
        OUT_DIR=str(tmp_path / "study"),
        REFRESHES="1",
        PASSES_PER_REFRESH="1",
        SEEDS="0,1",
        KS="2",
        VARIANTS="paper residual",
        EXTRA_BINDINGS=" ".join(TOY),
    )
    done = subprocess.run(
        ["bash", "scripts/operator_study.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = (tmp_path / "study" / "report.md").read_text()
    runs = tmp_path / "study" / "runs" / "operator_study" / "k2"
    for variant in ("paper", "residual"):
        metrics = json.loads(
            (runs / f"study_{variant}" / "REFRESHES_1" / "seeds_0-1" / "metrics.json").read_text()
        )
        assert metrics["operator"]["residual"] is (variant == "residual")
        by_k = {c["k"]: c["J"] for c in metrics["curve"]}
        assert max(by_k) == 2 + 30  # the curve reaches K + 30
        # J table: algorithm, seeds, budget, wall time, k = 1, 2, 12, 32, ∞
        cells = _row(report, f"study_{variant}")
        assert cells[1] == "2"
        for cell, k in zip(cells[4:8], (1, 2, 12, 32), strict=True):
            assert float(cell.split()[0]) == float(f"{by_k[k]:.4g}"), (cell, k)
        # activity table: the mean over seeds of the relative spread on W
        activity = [
            line
            for line in report.splitlines()
            if line.startswith(f"| study_{variant} | ") and "spread" not in line
        ]
        cells = [c.strip() for c in activity[-1].strip("|").split("|")]
        spreads = [p["operator_activity"]["W"]["relative_spread"] or 0.0 for p in metrics["per_seed"]]
        assert float(cells[3]) == float(f"{np.mean(spreads):.3g}")
        assert ("residual=True" in cells[1]) is (variant == "residual")
        # the unit alignment of the K-th iterate (K = 2), per hidden layer, mean over seeds
        aligned = np.mean([p["operator_activity"]["unit_alignment"][2] for p in metrics["per_seed"]], axis=0)
        assert cells[7] == str([round(float(v), 2) for v in aligned])
    assert "![car_on_hill, K = 2](car_on_hill_k2.png)" in report
    assert (tmp_path / "study" / "car_on_hill_k2.png").stat().st_size > 0


def test_every_study_variant_configures_a_run(tmp_path):
    """Each gin file of the study parses and builds its experiment (the script's default VARIANTS run them
    at 5% of the budget; the toy run above covers two); the fixed-point variant's trainer takes Eq. (4)'s
    term at the target's iterates."""
    import glob

    from pbo_tf.experiments.config import GIN_CONFIGS_DIR, parse_config
    from pbo_tf.experiments.runner import Experiment

    files = sorted(glob.glob(os.path.join(GIN_CONFIGS_DIR, "car_on_hill", "operator_study", "study_*.gin")))
    with open(os.path.join(REPO, "scripts", "operator_study.sh")) as f:
        script = f.read()
    (default,) = re.findall(r'VARIANTS="\$\{VARIANTS:-([^}]*)\}"', script)
    names = [os.path.basename(path)[len("study_") : -len(".gin")] for path in files]
    assert sorted(default.split()) == sorted(names)  # the script's one command runs every variant
    for path, name in zip(files, names, strict=True):
        parse_config([path], ["REFRESHES=1", "PASSES_PER_REFRESH=1", *TOY])
        experiment = Experiment(root_dir=str(tmp_path / name), log=None)
        assert experiment.label == f"study_{name}"
    import gin

    parse_config(
        [os.path.join(GIN_CONFIGS_DIR, "car_on_hill", "operator_study", "study_fixed_point.gin")], TOY
    )
    assert gin.query_parameter("FixedPointTerm.iterations") == 30
    terms = gin.query_parameter("ProFQIConfig.loss_terms")
    assert [term.selector for term in terms] == ["BellmanTerm", "FixedPointTerm"]
