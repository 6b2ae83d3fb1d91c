"""`benchmarks/gym_online.py` at toy size: both paths run, at the same Q network size, and it reports their
rates and ratio."""

import json

import pytest

pytest.importorskip("Box2D")

from in_process import run_main  # noqa: E402  (tests/benchmarks/ is on sys.path)

from benchmarks import gym_online  # noqa: E402


def test_the_toy_benchmark_times_both_paths_at_the_same_size(tmp_path, monkeypatch):
    out = tmp_path / "gym_online.json"
    run_main(gym_online, ["--toy", "--algorithms=dqn", f"--output={out}"], monkeypatch)
    result = json.loads(out.read_text())
    assert list(result) == ["dqn"]
    dqn = result["dqn"]
    assert dqn["gym_id"] == "LunarLander-v3" and dqn["d"] == [(8 + 1) * 8 + 8 + 8 + 1] * 2  # toy Q: [8]
    assert len(dqn["rounds"]["lunar_lander"]) == len(dqn["rounds"]["generic"]) == 1
    assert dqn["lunar_lander_steps_per_s"] > 0 and dqn["generic_steps_per_s"] > 0
    ratio = dqn["rounds"]["generic"][0] / dqn["rounds"]["lunar_lander"][0]
    assert dqn["generic_over_lunar_lander"] == pytest.approx(ratio)
