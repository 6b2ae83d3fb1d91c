"""The experiment runner: every shipped gin file at tiny size, the run-folder contract, oracle curves
against exact value iteration / the closed-form LQR operator, skipping finished runs, reloading operators."""

import glob
import json
import os
import subprocess
import sys

import ground_truth  # tests/experiments/ is on sys.path (pytest prepends it)
import numpy as np
import pytest
from runner_sizes import run_tiny

from pbo_tf.analysis import results
from pbo_tf.envs import chain_walk, lqr, registry
from pbo_tf.evaluation.operator_activity import FRESH_VECTORS
from pbo_tf.experiments.config import GIN_CONFIGS_DIR, GinConfigError, parse_config, set_threads
from pbo_tf.experiments.reader import load_trained_operator
from pbo_tf.experiments.run_folder import RunFolderConflict

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _is_online(path):
    folder = os.path.dirname(path)
    from pathlib import Path

    text = "".join(Path(folder, f).read_text() for f in os.listdir(folder) if f.endswith(".gin"))
    return "OnlineExperiment." in text


GIN_FILES = sorted(
    f
    for f in glob.glob(os.path.join(GIN_CONFIGS_DIR, "*", "*.gin"))
    if not f.endswith("common.gin") and not _is_online(f)
)
METRIC_KEYS = {
    "chain_walk": {"q_error_rms"},
    "lqr": {"param_error_l2", "p_error"},
    "car_on_hill": {"J", "J_normalised", "q_error", "v_error"},
    "bicycle": {"balancing_time_s", "discounted_return"},
    "dataset": {"bellman_residual", "bellman_residual_rms"},  # no gym id: the held-out residual
}
REFERENCE_KEYS = {
    "chain_walk": {"optimal_q_rms"},
    "lqr": {"optimal_params", "optimal_P"},
    "car_on_hill": {"optimal_J", "optimal_v_grid_mean", "optimal_v_grid_positive_fraction"},
    "bicycle": set(),
    "dataset": {"transitions", "held_out_transitions", "zero_q_bellman_residual"},
}


def test_the_foundation_gin_files_are_all_there():
    names = {os.path.relpath(f, GIN_CONFIGS_DIR) for f in GIN_FILES}
    assert {
        "chain_walk/fqi.gin",
        "chain_walk/profqi.gin",
        "chain_walk/profqi_inf.gin",
        "chain_walk/profqi_chain.gin",
        "chain_walk/oracle.gin",
        "lqr/fqi.gin",
        "lqr/profqi.gin",
        "lqr/profqi_lqr.gin",
        "lqr/oracle.gin",
        "car_on_hill/fqi.gin",
        "car_on_hill/profqi.gin",
        "bicycle_offline/fqi.gin",
        "bicycle_offline/profqi.gin",
    } <= names


def expected_at_k0(on_disk: dict, folder) -> dict:
    """What the curve's k = 0 entry of a tiny run must hold, derived apart (`ground_truth`): ``ω_0`` is 0 for
    the table and LQR families, and ``Q ≡ 0`` (action 0 everywhere) for the MLP families."""
    env = on_disk["env"]
    if env == "chain_walk":
        return {"q_error_rms": np.sqrt(np.mean(ground_truth.chain_walk_q_star() ** 2))}
    if env == "lqr":  # Q_0 = M a²: the greedy policy plays a = 0
        opt = ground_truth.lqr_optimum()
        return {
            "param_error_l2": np.hypot(opt["G"], opt["I"]),
            "p_error": abs(opt["P"] - ground_truth.lqr_zero_policy_p()),
        }
    if env == "car_on_hill":
        with np.load(folder / "dataset.npz") as data:
            return ground_truth.car_on_hill_constant_action_j(data["state"])
    if env == "dataset":  # Q ≡ 0: the residual is the mean squared reward of the rows the run left out
        with np.load(f"{folder}_dataset.npz") as file, np.load(folder / "dataset.npz") as data:
            return ground_truth.zero_q_held_out_residual(file, data)
    # bicycle: ENV_TINY's 3 rollouts of 300 steps, noise seed 0, every curve point's policy in one call
    n_policies = sum(any(v is not None for k, v in c.items() if k != "k") for c in on_disk["curve"])
    return ground_truth.bicycle_constant_action(n_policies, 3, 300, 0.99, seed=0)


#: The recommended operator's variants train in graph mode here: their XLA refreshes are those of the same
#: env's profqi.gin (compiled here) with the operator's options (SiLU, standardised input, the fixed-point
#: term), which the benchmark's recommended case, tests/trainers and the XLA-export device test compile.
#: The equivariant operator's files too: tests/operators/test_equivariant.py compiles it under XLA.
GRAPH_MODE = ("_alive.gin", "_fixed_point.gin", "_equivariant.gin")


@pytest.mark.parametrize("gin_file", GIN_FILES, ids=lambda f: os.path.relpath(f, GIN_CONFIGS_DIR))
def test_every_gin_file_runs_at_tiny_size_and_writes_the_contract(gin_file, tmp_path):
    graph_mode = ["ProFQIConfig.jit_compile=False"] if gin_file.endswith(GRAPH_MODE) else []
    metrics = run_tiny(gin_file, tmp_path, graph_mode)
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk["algorithm"] == metrics["algorithm"] == os.path.splitext(os.path.basename(gin_file))[0]
    env = on_disk["env"]
    assert (on_disk["K"], on_disk["seed"]) == (2, 0)
    ks = [c["k"] for c in on_disk["curve"]]
    assert ks[:6] == [0, 1, 2, 3, 4, 5]
    assert ks[6:] == (
        ["inf"] if on_disk["algorithm"] in ("profqi", "profqi_inf") and env == "chain_walk" else []
    )
    for entry in on_disk["curve"]:
        assert set(entry) == {"k"} | METRIC_KEYS[env]
    assert REFERENCE_KEYS[env] <= set(on_disk["reference"])
    # The value at k = 0 (the evaluation of ω_0) against its independent derivation.
    for key, want in expected_at_k0(on_disk, tmp_path).items():
        assert on_disk["curve"][0][key] == pytest.approx(want, rel=1e-6, abs=1e-9), key
    fqi_trainer = on_disk["algorithm"] in ("fqi", "fit_optimum", "ifqi")  # no operator
    if fqi_trainer:  # FQI and i-FQI have no iterate beyond K
        assert all(v is None for c in on_disk["curve"][3:] for k, v in c.items() if k != "k")
    assert os.path.exists(tmp_path / "config.gin") and os.path.exists(tmp_path / "dataset.npz")
    assert os.listdir(tmp_path / "tensorboard")
    # Every operator run says whether its operator is a function; every trained run states its budget.
    activity = on_disk.get("operator_activity")
    if fqi_trainer:
        assert activity is None and "constant_map_seeds" not in on_disk
    elif activity["kind"] == "DeepPBO":
        assert len(activity["W"]["active_units"]) == len(activity["width"])
        assert activity["fresh"]["n"] == FRESH_VECTORS and activity["constant"] in (True, False)
        assert on_disk["constant_map_seeds"] == int(activity["constant"])
    elif activity["kind"] in ("ConvPBO", "EquivariantPBO"):  # no units to count: their spread alone
        assert activity["W"]["active_units"] == [] and "width" not in activity
        assert activity["fresh"]["n"] == FRESH_VECTORS and activity["constant"] in (True, False)
        assert on_disk["constant_map_seeds"] == int(activity["constant"])
    else:
        assert set(activity) == {"kind"}
    paper = registry.load(registry.entry(env).problem).paper_budget
    # the two references have no paper schedule, nor has a user's dataset
    if on_disk["algorithm"] not in ("oracle", "fit_optimum") and paper is not None:
        budget = on_disk["budget"]
        assert 0 < budget["gradient_steps_done"] == budget["gradient_steps_scheduled"]
        assert budget["fraction"] == pytest.approx(
            budget["gradient_steps_scheduled"] / budget["gradient_steps_paper"]
        )


def test_chain_walk_oracle_curve_is_value_iteration(tmp_path):
    metrics = run_tiny(os.path.join(GIN_CONFIGS_DIR, "chain_walk", "oracle.gin"), tmp_path)
    P, R = chain_walk.transition_model()
    q_star = chain_walk.optimal_q().reshape(-1)
    q = np.zeros(40)
    for entry in metrics["curve"]:
        assert entry["q_error_rms"] == pytest.approx(np.sqrt(np.mean((q - q_star) ** 2)), rel=1e-5)
        q = R + 0.9 * P @ q.reshape(20, 2).max(1)
    assert metrics["curve"][0]["q_error_rms"] == pytest.approx(
        metrics["reference"]["optimal_q_rms"], rel=1e-6
    )


def test_lqr_oracle_curve_converges_to_the_riccati_optimum(tmp_path):
    metrics = run_tiny(os.path.join(GIN_CONFIGS_DIR, "lqr", "oracle.gin"), tmp_path, ["EXTRA_ITERATIONS=20"])
    opt = lqr.optimal_params()
    g, i = 0.0, 0.0
    for entry in metrics["curve"]:
        assert entry["param_error_l2"] == pytest.approx(
            np.hypot(opt["G"] - g, opt["I"] - i), rel=1e-4, abs=1e-6
        )
        g, i = lqr.oracle_operator(g, i, opt["M"])
    assert metrics["curve"][-1]["param_error_l2"] < 1e-5
    assert metrics["curve"][-1]["p_error"] < 1e-5
    assert metrics["reference"]["optimal_params"] == pytest.approx([opt["G"], opt["I"]])


def test_finished_runs_are_skipped_and_operators_reload(tmp_path):
    gin_file = os.path.join(GIN_CONFIGS_DIR, "lqr", "profqi_lqr.gin")
    first = run_tiny(gin_file, tmp_path)
    stamp = os.path.getmtime(tmp_path / "metrics.json")
    # A complete folder of the same experiment is not re-run (a cosmetic binding does not count) ...
    again = run_tiny(gin_file, tmp_path, ["ProFQIConfig.checkpoint_every_s=5.0"])
    assert os.path.getmtime(tmp_path / "metrics.json") == stamp
    assert again["curve"] == first["curve"]
    # ... and one made with another config is refused, naming the binding that differs.
    with pytest.raises(RunFolderConflict, match="ProFQIConfig.refreshes: 1 in the folder, 1000 now"):
        run_tiny(gin_file, tmp_path, ["REFRESHES=1000"])
    pbo, q, omega0 = load_trained_operator(str(tmp_path))
    saved = np.load(tmp_path / "iterates.npz")["iterates"]
    np.testing.assert_allclose(pbo.iterate(omega0[None], len(saved) - 1)[:, 0].numpy(), saved, rtol=1e-6)
    assert pbo.iterate(omega0[None], 40).shape == (41, 1, 2)  # and further than the run went


def test_clear_errors_for_bad_input(tmp_path):
    profqi = os.path.join(GIN_CONFIGS_DIR, "chain_walk", "profqi.gin")
    with pytest.raises(ValueError, match="unknown environment 'mountain_car'.*chain_walk"):
        run_tiny(profqi, tmp_path, ["Experiment.problem = 'mountain_car'"])
    with pytest.raises(ValueError, match=r"^ProFQIConfig.K must be an integer >= 1, got 0"):
        run_tiny(profqi, tmp_path, ["K = 0"])
    with pytest.raises(GinConfigError, match="bad gin binding 'ProFQIConfig.epochz = 3'"):
        parse_config([profqi], ["ProFQIConfig.epochz = 3"])
    with pytest.raises(GinConfigError, match="NoSuchThing"):
        parse_config([profqi], ["NoSuchThing.x = 1"])
    with pytest.raises(FileNotFoundError, match="nope.gin"):
        parse_config(["nope.gin"])
    with pytest.raises(FileNotFoundError, match="no trained operator"):
        load_trained_operator(str(tmp_path))


def test_thread_pools_are_refused_once_tensorflow_has_started():
    import tensorflow as tf

    (tf.constant(1.0) + 1.0).numpy()  # TensorFlow has run an op: its pools are fixed
    current = tf.config.threading.get_intra_op_parallelism_threads()
    with pytest.raises(RuntimeError, match=f"intra_op={current + 3}.*already run an op"):
        set_threads(intra_op=current + 3)
    with pytest.raises(ValueError, match="must be >= 0"):
        set_threads(intra_op=-1)
    set_threads()  # 0, 0: keep the defaults, nothing to set


def test_batched_car_on_hill_keeps_each_seeds_reference_activity_and_budget(tmp_path, monkeypatch):
    """Car-on-hill's optimal J depends on the seed's dataset: each seed keeps its own, the top level and the
    figure's line are their mean; each seed's deep PBO is measured; the budget is the paper's share, and the
    figure's legend says it; the greedy policy map of Q ≡ 0 (k = 0) is action 0 on every cell."""
    gin_file = os.path.join(GIN_CONFIGS_DIR, "car_on_hill", "profqi.gin")
    run_dir = tmp_path / "profqi"
    # (graph mode: compiling both seeds' refreshes into one XLA program was a third of this test's time;
    # test_batched_seeds runs seeds side by side under XLA)
    metrics = run_tiny(gin_file, run_dir, ["NUM_SEEDS=2", "ProFQIConfig.jit_compile=False"])
    per_seed = metrics["per_seed"]
    optimal = [entry["reference"]["optimal_J"] for entry in per_seed]
    assert optimal[0] != optimal[1]
    on_disk = json.loads((run_dir / "metrics.json").read_text())
    assert on_disk["reference"]["optimal_J"] == pytest.approx(np.mean(optimal))
    assert [e["reference"]["optimal_J"] for e in on_disk["per_seed"]] == pytest.approx(optimal)
    records = results.load_runs(str(run_dir))
    assert [r["reference"]["optimal_J"] for r in records] == pytest.approx(optimal)
    assert results.reference_value(records, "optimal_J") == pytest.approx(np.mean(optimal))

    for entry in on_disk["per_seed"]:
        activity = entry["operator_activity"]
        assert activity["kind"] == "DeepPBO" and activity["width"] == [302] * 4
        assert activity["W"]["n"] == 4 and activity["fresh"]["n"] == FRESH_VECTORS
        assert all(0 <= a <= 302 for a in activity["W"]["active_units"] + activity["fresh"]["active_units"])
        budget = entry["budget"]
        paper = registry.make_problem("car_on_hill").paper_budget
        # TINY: 1 refresh × 1 pass × (|W| 4 / W batch 2) × (1000 transitions // 500) Adam steps
        assert budget["gradient_steps_done"] == budget["gradient_steps_scheduled"] == 4
        assert (
            budget["gradient_steps_paper"]
            == 1000 * 10 * 1 * 11
            == (paper["refreshes"] * paper["passes_per_refresh"] * paper["w_batches"] * paper["d_batches"])
        )
        assert budget["fraction"] == pytest.approx(4 / 110_000)
    constant = [e["operator_activity"]["constant"] for e in on_disk["per_seed"]]
    assert on_disk["constant_map_seeds"] == sum(constant)
    assert on_disk["budget"]["fraction"] == pytest.approx(4 / 110_000)

    # launch/plot.py draws the mean of the seeds' optima and says how many seeds and how much budget.
    process = subprocess.run(
        [sys.executable, os.path.join("launch", "plot.py"), f"--root_dir={run_dir}",
         f"--output={tmp_path / 'j.png'}", "--reference_key=optimal_J", "--table_ks=0,2",
         f"--policy_maps={tmp_path / 'maps.png'}"],
        cwd=REPO_ROOT, capture_output=True, text=True, encoding="utf-8", timeout=300,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr
    assert "(n=2)" in process.stdout
    assert (tmp_path / "j.png").stat().st_size > 0 and (tmp_path / "maps.png").stat().st_size > 0
    # the figure plot.py builds, made again in this process: the reference line at the mean optimum
    from pbo_tf.analysis import plotting
    from pbo_tf.cli.plot import make_plot
    from tests.figures import capture_figures

    figures = capture_figures(monkeypatch)
    make_plot([str(run_dir)], str(tmp_path / "again.png"), reference_key="optimal_J", table_ks=[0, 2])
    (figure,) = figures
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    reference = lines[plotting.reference_line_label("optimal_J", float(np.mean(optimal)), 2)]
    np.testing.assert_allclose(reference.get_ydata(), np.mean(optimal), rtol=1e-12)
    (curve,) = [label for label in lines if label.startswith("ProFQI")]
    assert "2 seeds" in curve and "0.0036%" in curve, curve  # 4 of the paper's 110 000 Adam steps
    for seed in (0, 1):
        with np.load(run_dir / f"seed_{seed}" / "policy_maps.npz") as maps:
            assert maps["k"][0] == "0" and not maps["actions"][0].any()


def test_the_same_gin_and_seed_give_identical_metrics_twice(tmp_path):
    """Determinism on one machine: a tiny chain-walk ProFQI run twice from scratch (same gin, same seed) gives
    bit-identical curves and iterates."""
    gin_file = os.path.join(GIN_CONFIGS_DIR, "chain_walk", "profqi.gin")
    sizes = ["REFRESHES=2", "PASSES_PER_REFRESH=2", "SEED=3"]
    first, second = (run_tiny(gin_file, tmp_path / name, sizes) for name in ("a", "b"))
    assert first["curve"] == second["curve"]
    assert first["curve"][2]["q_error_rms"] != first["curve"][0]["q_error_rms"]  # it trained
    a, b = (np.load(tmp_path / name / "iterates.npz") for name in ("a", "b"))
    for key in ("iterates", "fixed_point"):
        np.testing.assert_array_equal(a[key], b[key])


def test_car_on_hill_evaluation_traces_its_rollout_once_for_every_seed():
    """Each seed's evaluation assigns its parameters to the greedy function's variable: the compiled rollout
    is traced once, and a second evaluation gives what a fresh problem gives for the same parameters."""
    from pbo_tf.envs.car_on_hill import evaluation
    from pbo_tf.envs.car_on_hill.problem import CarOnHillProblem

    problem = CarOnHillProblem(n_random=200, n_oriented=0)
    d = problem.q_family().initial_params(1, 0).shape[1]
    first, second = (np.random.default_rng(s).normal(0.0, 0.5, (3, d)).astype(np.float32) for s in (0, 1))
    data = problem.dataset(0)
    problem.evaluate(first, data)
    again = problem.evaluate(second, data)
    greedy = problem._paired_greedy(second)
    rollouts = [rollout for fn, rollout in evaluation._COMPILED.values() if fn is greedy]
    assert len(rollouts) == 1 and rollouts[0].experimental_get_tracing_count() == 1
    assert again == CarOnHillProblem(n_random=200, n_oriented=0).evaluate(second, data)
    assert again != problem.evaluate(first, data)
