"""`benchmarks/online_seeds.py` at toy size: CartPole DQN with S = 2 seeds in one process and in two processes
in a row; it reports both ways' seeds per hour, their ratio and the table."""

import json

import pytest
from in_process import run_main  # tests/benchmarks/ is on sys.path

from benchmarks import online_seeds


def test_the_toy_benchmark_times_batched_and_separate_seeds(tmp_path, monkeypatch, capsys):
    out = tmp_path / "online_seeds.json"
    run_main(online_seeds, ["--toy", f"--output={out}"], monkeypatch)
    result = json.loads(out.read_text())
    assert result["cpu_count"] >= 1 and result["steps"] == 4
    entry = result["configs"]["gym/dqn.gin"]["2"]
    trial = entry["trials"][0]
    for way in ("batched", "separate"):
        assert trial[way]["seeds_per_hour"] == pytest.approx(2 * 3600 / trial[way]["wall_s"])
        assert 0 < trial[way]["loop_s"] < trial[way]["wall_s"]
    ratio = trial["batched"]["seeds_per_hour"] / trial["separate"]["seeds_per_hour"]
    assert entry["batched_over_separate"] == pytest.approx(ratio)
    assert "| gym/dqn.gin | 2 |" in capsys.readouterr().out
