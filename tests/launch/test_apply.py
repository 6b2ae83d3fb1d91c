"""`pbo_tf.cli.apply` (``launch/apply.py``): a trained operator applied beyond the run's curve.

Two tiny finished runs: chain-walk ProFQI with the linear PBO (two seeds trained together) and LQR ProFQI with
the deep PBO. Checked against ground truth: the applied curve repeats the run's own metrics.json numbers
where the run has them; beyond, chain-walk's ``Λ^k(ω_0)`` is the checkpoint's kernel and bias iterated in
NumPy and ``q_error_rms`` the distance to the dynamic-programming Q*; the exported operator and greedy policy
reload in a fresh process without pbo_tf and give the same ``Λ^k(ω_0)`` and the argmax of its Q; bad input
is one line and exit code 2 and leaves earlier files as they were.
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys

import gymnasium
import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.cli import apply, play
from pbo_tf.cli import common as cli
from pbo_tf.envs import chain_walk
from pbo_tf.experiments import export
from pbo_tf.experiments.config import GIN_CONFIGS_DIR, parse_config
from pbo_tf.experiments.reader import load_trained_operator
from pbo_tf.experiments.runner import Experiment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K, EXTRA = 2, 3
TINY = [f"K={K}", "REFRESHES=1", "PASSES_PER_REFRESH=1", f"EXTRA_ITERATIONS={EXTRA}"]
TINY += ["ProFQIConfig.w_size=4", "ProFQIConfig.w_batch_size=2"]  # (tests/experiments/runner_sizes.py)
TINY += ["ProFQIConfig.jit_compile=False"]  # the refresh in graph mode: no XLA compile (tests/trainers)
N_STATES, SUCCESS_PROB, GAMMA = 20, 0.9, 0.9  # gin_configs/chain_walk/common.gin


def _train(gin_name, root, *bindings):
    parse_config([os.path.join(GIN_CONFIGS_DIR, gin_name)], TINY + list(bindings))
    return Experiment(root_dir=str(root), log=None).run()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    cw = _train("chain_walk/profqi.gin", root / "cw", "NUM_SEEDS=2")
    lqr = _train("lqr/profqi.gin", root / "lqr")
    return {"cw": (root / "cw", cw), "lqr": (root / "lqr", lqr)}


def call(*args):
    """``(exit code, stderr, stdout)`` of apply's run on ``args``, in this process."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = cli.call_main(apply.run, apply.FLAGS, ["apply.py", *args])
    return code, err.getvalue(), out.getvalue()


def by_hand(seed_dir, k_max, starts=None):
    """``Λ^k(ω) = ω kernel + bias``, k = 0..k_max, in float64 from the checkpoint's weights: ``[k, n, d]``."""
    reader = tf.train.load_checkpoint(str(seed_dir / "operator" / "pbo"))
    kernel = reader.get_tensor("pbo/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE").astype(np.float64)
    bias = reader.get_tensor("pbo/dense/bias/.ATTRIBUTES/VARIABLE_VALUE").astype(np.float64)
    if starts is None:
        with np.load(seed_dir / "iterates.npz") as data:
            starts = data["iterates"][:1]  # ω_0 of the run
    out = [np.asarray(starts, np.float64)]
    for _ in range(k_max):
        out.append(out[-1] @ kernel + bias)
    return np.stack(out)


def q_error_rms(omega):
    q_star = chain_walk.optimal_q(N_STATES, SUCCESS_PROB, GAMMA).reshape(-1)
    return np.sqrt(np.mean((omega - q_star) ** 2, axis=-1))


def test_chain_walk_curve_repeats_the_run_then_follows_the_linear_operator_and_q_star(runs):
    root, metrics = runs["cw"]
    seed_dir, k_max = root / "seed_1", 9
    code, err, out = call(f"--run_dir={root}", "--seed=1", f"--k_max={k_max}")
    assert code == 0, err
    applied = json.loads((seed_dir / f"applied_k{k_max}.json").read_text())
    assert (applied["env"], applied["seed"], applied["K"], applied["k_max"]) == ("chain_walk", 1, K, k_max)
    curve = applied["curve"]
    assert [e["k"] for e in curve] == list(range(k_max + 1))
    run_curve = next(p["curve"] for p in metrics["per_seed"] if p["seed"] == 1)
    assert curve[: K + EXTRA + 1] == [e for e in run_curve if e["k"] != "inf"]  # the same numbers
    hand = by_hand(seed_dir, k_max)[:, 0]
    with np.load(seed_dir / "iterates.npz") as data:  # the run's own iterates are the same map
        np.testing.assert_allclose(data["iterates"], hand[: K + EXTRA + 1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose([e["q_error_rms"] for e in curve], q_error_rms(hand), rtol=1e-5)
    assert "q_error_rms" in out and f"{curve[k_max]['q_error_rms']:.6g}" in out

    # Starting vectors of a file: each its own curve, their mean as `curve`.
    starts = np.random.default_rng(0).normal(size=(3, N_STATES * 2)).astype(np.float32)
    np.savez(root / "starts.npz", params=starts)
    output = root / "from_starts.json"
    code, err, _ = call(f"--run_dir={root}", "--seed=1", "--k_max=6", f"--omega0={root / 'starts.npz'}",
                        f"--output={output}")  # fmt: skip
    assert code == 0, err
    applied = json.loads(output.read_text())
    expected = q_error_rms(by_hand(seed_dir, 6, starts))  # [k, n]
    got = np.array([[e["q_error_rms"] for e in p["curve"]] for p in applied["per_omega0"]]).T
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    np.testing.assert_allclose([e["q_error_rms"] for e in applied["curve"]], expected.mean(1), rtol=1e-5)
    np.savez(root / "one.npz", params=starts[1])  # a [d] vector
    code, err, _ = call(f"--run_dir={root}", "--seed=1", "--k_max=2", f"--omega0={root / 'one.npz'}")
    assert code == 0, err
    one = json.loads((seed_dir / "applied_k2_one.json").read_text())  # default name with --omega0
    assert one["curve"] == applied["per_omega0"][1]["curve"][:3]


RELOAD = r"""
import json, sys
import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

cw, lqr, k_max, export_k = json.loads(sys.argv[1])
out = {}
for name, folder in (("cw", cw), ("lqr", lqr)):
    op = tf.saved_model.load(folder + "/operator")
    w0 = op.omega0.numpy()[None]
    out[name] = {
        "omega0": w0.tolist(),
        "apply": [op.apply(w0, k).numpy().tolist() for k in range(k_max + 1)],
        "iterate": op.iterate(w0, k_max).numpy().tolist(),
    }
policy = tf.saved_model.load(cw + "/policy")
states = tf.range(20, dtype=tf.int32)
out["cw"]["actions"] = policy.action(ts.restart(states, batch_size=20)).action.numpy().tolist()
assert "pbo_tf" not in sys.modules
print(json.dumps(out))
"""


def test_exported_operator_and_policy_reload_without_pbo_tf(runs, tmp_path):
    (cw_root, cw_metrics), (lqr_root, lqr_metrics) = runs["cw"], runs["lqr"]
    k_max, export_k = 8, 7
    user = subprocess.run(
        [sys.executable, os.path.join(REPO, "launch", "apply.py"), f"--run_dir={cw_root}", "--k_max=4",
         f"--output={tmp_path / 'cw.json'}", f"--export={tmp_path / 'cw'}", f"--export_k={export_k}"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert user.returncode == 0, user.stderr
    assert "Wrote" in user.stdout and "WARNING" not in user.stdout + user.stderr
    code, err, out = call(f"--run_dir={lqr_root}", "--k_max=4", f"--export={tmp_path / 'lqr'}")
    assert code == 0 and "No policy exported" in out, err
    assert not (tmp_path / "lqr" / "policy").exists()
    info = json.loads((tmp_path / "cw" / "export.json").read_text())
    assert (info["export_k"], info["policy"], info["seed"], info["d"]) == (export_k, "policy", 0, 40)

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    arg = json.dumps([str(tmp_path / "cw"), str(tmp_path / "lqr"), k_max, export_k])
    reload = subprocess.run(
        [sys.executable, "-c", RELOAD, arg],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env=env,
        timeout=300,
    )
    assert reload.returncode == 0, reload.stderr
    got = json.loads(reload.stdout.strip().splitlines()[-1])

    hand = by_hand(cw_root / "seed_0", k_max)  # [k, 1, d]
    np.testing.assert_array_equal(got["cw"]["omega0"], hand[0])
    np.testing.assert_allclose(np.array(got["cw"]["apply"]), hand, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(got["cw"]["iterate"]), hand, rtol=1e-5, atol=1e-6)
    q = hand[export_k, 0].reshape(N_STATES, 2)
    clear = np.abs(q[:, 0] - q[:, 1]) > 1e-4  # no near-ties
    assert clear.sum() >= 10
    np.testing.assert_array_equal(np.array(got["cw"]["actions"])[clear], np.argmax(q, axis=1)[clear])
    # pbo-play feeds the policy chain-walk's integer observations; its episodes are the greedy policy's.
    err, played = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(played):
        argv = ["play.py", f"--policy_dir={tmp_path / 'cw' / 'policy'}", "--env=pbo_tf/ChainWalk-v0"]
        assert cli.call_main(play.run, play.FLAGS, [*argv, "--episodes=2", "--max_steps=30"]) == 0, err
    env = gymnasium.make("pbo_tf/ChainWalk-v0", max_episode_steps=30)
    lines = played.getvalue().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["episodes"] == 2, lines
    for episode, line in enumerate(lines[:2]):
        state, _ = env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            assert clear[state], state  # (the greedy action is the policy's where Q has no near-tie)
            state, reward, terminated, truncated, _ = env.step(int(np.argmax(q[state])))
            total, done = total + reward, terminated or truncated
        assert line.startswith(f"episode {episode}: return {total:.1f},"), line

    pbo, _, omega0 = load_trained_operator(str(lqr_root))
    expected = pbo.iterate(tf.constant(omega0[None]), k_max).numpy()
    np.testing.assert_allclose(np.array(got["lqr"]["apply"]), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(got["lqr"]["iterate"]), expected, rtol=1e-5, atol=1e-6)
    applied = json.loads((lqr_root / "applied_k4.json").read_text())["curve"]
    assert applied == [e for e in lqr_metrics["curve"] if e["k"] != "inf"][:5]
    assert json.loads((tmp_path / "cw.json").read_text())["curve"] == cw_metrics["per_seed"][0]["curve"][:5]


@pytest.mark.parametrize("kind", ["conv", "equivariant"])
def test_the_scalable_operators_reload_apply_and_export_like_the_others(kind, tmp_path):
    """A tiny run with the convolutional operator (LQR) and with the equivariant one (a user's dataset, its
    standardisation restored from the checkpoint): the reloaded operator recomputes the run's iterates, the
    applied curve repeats the run's, and the exported SavedModel gives the same iterates."""
    from tests.experiments.runner_sizes import tiny_dataset

    root = tmp_path / "run"
    if kind == "conv":
        bindings = ["make_pbo.kind = 'conv'", "ConvPBO.channels = [2]", "make_pbo.init_std = 0.1"]
        metrics = _train("lqr/profqi.gin", root, *bindings)
    else:
        path = tmp_path / "data.npz"
        np.savez(path, **tiny_dataset())
        bindings = [f"DATASET = '{path}'", "BATCH_SIZE = 20", "EquivariantPBO.channels = [4]"]
        metrics = _train("dataset/profqi_equivariant.gin", root, *bindings, "FixedPointTerm.iterations = 2")
    code, err, _ = call(f"--run_dir={root}", "--k_max=4", f"--export={tmp_path / 'export'}")
    assert code == 0, err
    applied = json.loads((root / "applied_k4.json").read_text())["curve"]
    assert applied == [e for e in metrics["curve"] if e["k"] != "inf"][:5]
    pbo, _, omega0 = load_trained_operator(str(root))
    assert type(pbo).__name__ == {"conv": "ConvPBO", "equivariant": "EquivariantPBO"}[kind]
    with np.load(root / "iterates.npz") as data:
        iterates = data["iterates"]  # [K + EXTRA + 1, d]: what the trained operator computed in the run
    assert len(iterates) == K + EXTRA + 1 and np.abs(iterates[-1] - iterates[0]).max() > 1e-6
    reloaded = pbo.iterate(tf.constant(omega0[None]), K + EXTRA).numpy()[:, 0]
    np.testing.assert_allclose(reloaded, iterates, rtol=1e-5, atol=1e-6)
    exported = tf.saved_model.load(str(tmp_path / "export" / "operator"))
    got = exported.iterate(tf.constant(omega0[None]), tf.constant(4)).numpy()[:, 0]
    np.testing.assert_allclose(got, iterates[:5], rtol=1e-5, atol=1e-6)


def test_bad_input_is_one_line_exit_2_and_keeps_what_was_written(runs, tmp_path):
    cw_root, lqr_root = runs["cw"][0], runs["lqr"][0]
    output = tmp_path / "kept.json"
    assert call(f"--run_dir={lqr_root}", "--k_max=3", f"--output={output}")[0] == 0
    kept = output.read_bytes()
    unfinished = tmp_path / "unfinished"
    shutil.copytree(lqr_root, unfinished)
    os.remove(unfinished / "metrics.json")
    no_operator = tmp_path / "no_operator"
    shutil.copytree(lqr_root, no_operator)
    shutil.rmtree(no_operator / "operator")
    (tmp_path / "garbage.npz").write_bytes(b"not a zip")
    np.savez(tmp_path / "wrong_d.npz", params=np.zeros((3, 7), np.float32))
    np.savez(tmp_path / "no_params.npz", omega=np.zeros(40, np.float32))
    for args, pattern in (
        ([f"--run_dir={tmp_path / 'nope'}", "--k_max=3"], r"does not exist"),
        ([f"--run_dir={unfinished}", "--k_max=3"], r"has no metrics.json: .*unfinished"),
        ([f"--run_dir={no_operator}", "--k_max=3"], r"holds no trained operator"),
        ([f"--run_dir={cw_root}", "--seed=7", "--k_max=3"], r"--seed=7: .* trained the seeds \[0, 1\]"),
        ([f"--run_dir={lqr_root}", "--k_max=-1"], r"--k_max must be >= 0, got -1"),
        ([f"--run_dir={cw_root}", "--k_max=3", f"--omega0={tmp_path / 'garbage.npz'}"], r"not a readable"),
        ([f"--run_dir={cw_root}", "--k_max=3", f"--omega0={tmp_path / 'missing.npz'}"], r"not a readable"),
        ([f"--run_dir={cw_root}", "--k_max=3", f"--omega0={tmp_path / 'wrong_d.npz'}"],
         r"must be \[n, 40\] or \[40\] .* got float32 \[3, 7\]"),
        ([f"--run_dir={cw_root}", "--k_max=3", f"--omega0={tmp_path / 'no_params.npz'}"], r"no 'params'"),
        ([f"--run_dir={lqr_root}", "--k_max=3", f"--export={output}"], r"it is a file, not a folder"),
        ([f"--run_dir={lqr_root}", "--k_max=3", "--export_k=2"], r"--export_k needs --export"),
    ):  # fmt: skip
        code, err, _ = call(*args, f"--output={output}")
        lines = err.strip().splitlines()
        assert code == 2, err
        assert len(lines) == 1 and lines[0].startswith("apply.py: error: ") and "Traceback" not in err, err
        assert re.search(pattern, lines[0]), lines[0]
        assert output.read_bytes() == kept
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["kept.json", "unfinished", "no_operator", "garbage.npz", "wrong_d.npz", "no_params.npz"]
    )
    # a run's own files are no tool's outputs: its metrics.json (or any file named as a run's), its folder
    run = tmp_path / "run"
    shutil.copytree(lqr_root, run)
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    for args, pattern in (
        ([f"--output={run / 'metrics.json'}"], r"metrics.json is a run's own file \(the readers would"),
        ([f"--output={tmp_path / 'elsewhere' / 'config.gin'}"], r"config.gin is a run's own file"),
        ([f"--export={run}"], r"it is a run folder \(it holds metrics.json, config.gin, fingerprint.json, .*"
                              r"operator/pbo.index\), whose operator/ and policy/ an export would replace"),
    ):  # fmt: skip
        code, err, _ = call(f"--run_dir={run}", "--k_max=3", *args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and re.search(pattern, lines[0]), err
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before
    assert not (tmp_path / "elsewhere").exists()


def test_policy_specs_say_why_a_problem_has_no_policy_to_export():
    from pbo_tf.envs.base import Problem
    from pbo_tf.envs.chain_walk.problem import ChainWalkProblem
    from pbo_tf.envs.lqr.problem import LQRProblem

    walk = ChainWalkProblem(n_states=7)
    specs, why = export.policy_specs(walk)
    assert why is None
    time_step_spec, action_spec = specs
    assert time_step_spec.observation.shape == () and time_step_spec.observation.dtype.is_integer
    assert (int(action_spec.minimum), int(action_spec.maximum)) == (0, 1)

    class Unregistered(Problem):
        name = "not_in_the_registry"

    class Shaped(ChainWalkProblem):
        def dataset_layout(self):
            return {**super().dataset_layout(), "state_shape": (3,)}

    class Real(ChainWalkProblem):
        def dataset_layout(self):
            return {**super().dataset_layout(), "integer_states": False}

    class Three(ChainWalkProblem):
        def dataset_layout(self):
            return {**super().dataset_layout(), "n_actions": 3}

    for problem, expected in (
        (Unregistered(), "no gymnasium id registered for problem not_in_the_registry (its registry entry has "
                         "no gym_id and Unregistered.env_id is None)"),
        (LQRProblem(), "lqr's actions are not discrete (pbo_tf/LQR-v0's actions are float32 of shape [1])"),
        (Shaped(), "observation shape mismatch: pbo_tf/ChainWalk-v0 observations have shape [], chain_walk's "
                   "states [3]"),
        (Real(), "observation dtype mismatch: pbo_tf/ChainWalk-v0 observations are int32, chain_walk's "
                 "states real"),
        (Three(), "pbo_tf/ChainWalk-v0 has 2 actions, chain_walk's Q family 3"),
    ):  # fmt: skip
        assert export.policy_specs(problem) == (None, expected)
    missing = ChainWalkProblem()
    missing.env_id = "nowhere/Missing-v0"
    with pytest.raises(export.ExportError, match=r"^cannot make chain_walk's gymnasium environment "
                       r"'nowhere/Missing-v0' with \{'n_states': 20, .*unknown environment id"):  # fmt: skip
        export.policy_specs(missing)


def test_an_environment_that_cannot_be_made_stops_the_export_in_one_line(runs, tmp_path, monkeypatch):
    def cannot_make(problem):
        raise export.ExportError(f"cannot make {problem.name}'s gymnasium environment 'nowhere/Missing-v0'")

    monkeypatch.setattr(export, "policy_specs", cannot_make)
    output = tmp_path / "applied.json"
    args = [f"--run_dir={runs['cw'][0]}", "--k_max=3", f"--export={tmp_path / 'e'}", f"--output={output}"]
    code, err, _ = call(*args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == (
        "apply.py: error: --export: cannot make chain_walk's gymnasium environment 'nowhere/Missing-v0'"
    )
    assert sorted(os.listdir(tmp_path)) == []  # checked before anything is written


def test_an_ifqi_run_is_refused_in_one_line_it_has_no_iterate_past_k(tmp_path):
    _train("chain_walk/ifqi.gin", tmp_path / "ifqi", "IFQIConfig.jit_compile=False")
    code, err, _ = call(f"--run_dir={tmp_path / 'ifqi'}", "--k_max=5")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "holds no trained operator" in lines[0], lines[0]
    assert "i-FQI or i-DQN run's curve is its K + 1 heads" in lines[0], lines[0]


def test_an_online_prodqn_run_continues_its_curve_by_greedy_episodes_and_exports(tmp_path):
    """A tiny CartPole-v1 ProDQN run (gym/prodqn.gin): pbo-apply repeats the run's curve up to K + extra
    iterations and continues it past them; every applied return is checked against greedy episodes played
    here with gymnasium alone, from the evaluation's reset seeds, on the operator's chain of the run's own
    ω_0; the exported policy acts as the argmax of Q at --export_k (the first application past the run's, on
    4096 states on which it takes both actions and differs from the run's last iterate). A DQN run has no
    operator: one line."""
    from pbo_tf.envs.gym.evaluation import episode_seed
    from pbo_tf.experiments.run import make_experiment
    from tests.experiments.runner_sizes import ONLINE_EXTRA, ONLINE_GRAPH_MODE, ONLINE_TINY

    def train(name, *bindings):
        sizes = ONLINE_TINY + ONLINE_GRAPH_MODE + [*bindings]
        parse_config([os.path.join(GIN_CONFIGS_DIR, "gym", f"{name}.gin")], sizes)
        return make_experiment(str(tmp_path / name), log=None).run()

    # an operator with a visible effect (the file's 5e-7 initialisation leaves Λ^k(ω₀) near 0 for every k
    # after a tiny run, so the applications past the run's could not be told apart)
    metrics = train("prodqn", "PBO_INIT_STD=0.1")
    K = metrics["K"]
    k_max = K + ONLINE_EXTRA + 3
    export_k = K + ONLINE_EXTRA + 1  # the first application past the run's
    export_dir = tmp_path / "export"
    code, err, out = call(f"--run_dir={tmp_path / 'prodqn'}", f"--k_max={k_max}", f"--export={export_dir}",
                          f"--export_k={export_k}")  # fmt: skip
    assert code == 0, err
    applied = json.loads((tmp_path / "prodqn" / f"applied_k{k_max}.json").read_text())
    curve = applied["curve"]
    assert [e["k"] for e in curve] == list(range(k_max + 1))
    assert curve[: K + ONLINE_EXTRA + 1] == metrics["curve"]  # the run's own numbers
    assert "return" in out and "(K + extra: the run's last)" in out

    pbo, q, omega0 = load_trained_operator(str(tmp_path / "prodqn"))
    chain = pbo.iterate(tf.constant(omega0[None]), k_max)[:, 0].numpy()
    with np.load(tmp_path / "prodqn" / "iterates.npz") as data:
        np.testing.assert_allclose(chain[: K + ONLINE_EXTRA + 1], data["iterates"], rtol=1e-5, atol=1e-6)
    past = chain[K + ONLINE_EXTRA + 1 :]  # the applications pbo-apply adds: each its own vector
    assert min(np.abs(a - b).max() for a, b in zip(chain[K + ONLINE_EXTRA :], past, strict=False)) > 1e-3
    e = make_experiment(str(tmp_path / "unused"), log=None)  # (the last parsed config: gym/prodqn.gin)
    n_episodes, horizon, eval_seed = e.n_eval_episodes, e.env.eval_max_steps, e.env.eval_seed
    for k in range(k_max + 1):
        returns = []
        for j in range(n_episodes):
            env = gymnasium.make("CartPole-v1", max_episode_steps=horizon)
            obs, _ = env.reset(seed=episode_seed(eval_seed, j))
            total, done = 0.0, False
            while not done:
                values = q.q_all(tf.constant(chain[k : k + 1]), tf.constant(obs[None], tf.float32))[0, 0]
                obs, reward, terminated, truncated, _ = env.step(int(np.argmax(values.numpy())))
                total, done = total + reward, terminated or truncated
            returns.append(total)
        assert curve[k]["return"] == pytest.approx(np.mean(returns)), k

    policy = tf.saved_model.load(str(export_dir / "policy"))
    from tf_agents.trajectories import time_step as ts

    states = np.random.default_rng(0).uniform(-2.0, 2.0, (4096, 4)).astype(np.float32)
    actions = policy.action(ts.restart(tf.constant(states), batch_size=len(states))).action.numpy()
    values = [  # Q of the run's last iterate and of the exported application
        q.q_all(tf.constant(chain[k : k + 1]), tf.constant(states))[0].numpy()
        for k in (export_k - 1, export_k)
    ]
    np.testing.assert_array_equal(actions, np.argmax(values[1], axis=1))
    assert len(set(actions.tolist())) == 2  # the comparison covers both actions
    assert not np.array_equal(np.argmax(values[0], axis=1), actions)  # and tells export_k from export_k - 1
    assert json.loads((export_dir / "export.json").read_text())["export_k"] == export_k

    train("dqn_prodqn_schedule")
    code, err, _ = call(f"--run_dir={tmp_path / 'dqn_prodqn_schedule'}", "--k_max=3")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "holds no trained operator" in lines[0] and "DQN runs have none" in lines[0], lines[0]
