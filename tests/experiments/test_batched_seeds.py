"""Seeds as a batch axis through the experiment runner: S seeds in one graph give each seed the curves of a
separate single-seed run, the aggregate is their mean, and each seed's operator reloads.

(Apart from test_runner.py so that the two halves of the runner tests run on different pytest-xdist workers.)
"""

import os

import numpy as np
import pytest
from runner_sizes import run_tiny  # tests/experiments/ is on sys.path (pytest prepends it)

from pbo_tf.experiments.config import GIN_CONFIGS_DIR
from pbo_tf.experiments.reader import load_trained_operator


@pytest.mark.parametrize("gin_file", ["lqr/profqi.gin", "chain_walk/fqi.gin"])
def test_batched_seeds_match_separate_single_seed_runs(gin_file, tmp_path):
    gin_file = os.path.join(GIN_CONFIGS_DIR, gin_file)
    sizes = ["REFRESHES=2", "PASSES_PER_REFRESH=3", "MAX_EPOCHS=6", "PATIENCE=2"]
    batched = run_tiny(gin_file, tmp_path / "batched", sizes + ["SEED=3", "NUM_SEEDS=2"])
    assert batched["seeds"] == [3, 4] and len(batched["per_seed"]) == 2
    for entry in batched["per_seed"]:
        single = run_tiny(gin_file, tmp_path / f"single_{entry['seed']}", sizes + [f"SEED={entry['seed']}"])
        for got, want in zip(entry["curve"], single["curve"], strict=True):
            for key, value in want.items():
                if isinstance(value, float):
                    assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-7), (entry["seed"], got)
                else:
                    assert got[key] == value
    # The aggregate is the mean over the two seeds, and load_runs gives one record per seed.
    from pbo_tf.analysis.results import load_runs

    key = "q_error_rms" if "chain_walk" in gin_file else "param_error_l2"
    values = [e["curve"][1][key] for e in batched["per_seed"]]
    assert batched["curve"][1][key] == pytest.approx(np.mean(values), rel=1e-6)
    records = load_runs(str(tmp_path / "batched"))
    assert sorted(r["seed"] for r in records) == [3, 4]
    assert os.path.exists(tmp_path / "batched" / "seed_4" / "iterates.npz")
    if "profqi" in gin_file:
        pbo, q, omega0 = load_trained_operator(str(tmp_path / "batched"), seed=4)
        saved = np.load(tmp_path / "batched" / "seed_4" / "iterates.npz")["iterates"]
        np.testing.assert_allclose(pbo.iterate(omega0[None], 2)[:, 0].numpy(), saved[:3], rtol=1e-6)
