"""Every program on an environment package outside pbo_tf: ``tests/external_env/`` (a five-state walk,
`toy_walk_env`), installed with ``pip install --no-deps --no-build-isolation --target SITE`` (the shared
virtual environment is left as it is) and found by the programs through its ``pbo_tf.envs`` entry point,
``SITE`` on their ``PYTHONPATH``; and once through ``--import`` from its source tree, which declares no
entry point.

Ground truth, worked out here: the walk's ``Q*`` and value iteration ``T^k 0`` (FQI's iterates on a
dataset holding every (s, a)); the trained operator's ``Λ^k(ω_0)`` as `load_trained_operator` rebuilds it
in a fresh process, which must give the runs' own ``iterates.npz``, the applied curve's RMS distance to
``Q*`` and, at k = K, the greedy policy whose episodes ``pbo-play`` must report.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(REPO, "tests", "external_env")
N, GAMMA, K, EXTRA, HORIZON = 5, 0.8, 4, 4, 10  # toy_walk_env/mdp.py, gin_configs/toy_walk/common.gin
GIN = os.path.join("toy_walk_env", "gin_configs")
FQI_TINY = ["MAX_EPOCHS=100", "PATIENCE=100", "FQIConfig.jit_compile=False"]
PROFQI_TINY = ["REFRESHES=10", "ProFQIConfig.jit_compile=False"]  # graph mode: no XLA compile


def bellman(q):
    """``T q`` of a table ``q [N, 2]``: left (0) and right (1) moves clipped at the ends, reward 1 on
    landing on N - 1."""
    next_state = np.clip(np.arange(N)[:, None] + np.array([-1, 1]), 0, N - 1)
    return (next_state == N - 1) + GAMMA * q.max(axis=1)[next_state]


def value_iteration(k):
    q = np.zeros((N, 2))
    for _ in range(k):
        q = bellman(q)
    return q


Q_STAR = value_iteration(400)


def greedy_episode(q):
    """``(return, discounted return)`` of the greedy policy of ``q [N, 2]`` over HORIZON steps from 0."""
    state, total, discounted = 0, 0.0, 0.0
    for t in range(HORIZON):
        state = int(np.clip(state + 2 * int(np.argmax(q[state])) - 1, 0, N - 1))
        total += float(state == N - 1)
        discounted += GAMMA**t * float(state == N - 1)
    return total, discounted


def rms_to_q_star(omegas):
    return np.sqrt(np.mean((np.asarray(omegas, np.float64) - Q_STAR.reshape(-1)) ** 2, axis=-1))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """``(SITE, SOURCE)``: the package installed into SITE (entry point included), and a copy of its source
    tree (no entry point: nothing declares it there)."""
    root = tmp_path_factory.mktemp("external")
    source = root / "source"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    build = root / "build"  # pip builds in the tree it installs: a copy, so the source copy stays clean
    shutil.copytree(source, build)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(root / "site"), str(build)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    return root / "site", source


def launch(script, *args, path):
    """A program as a user runs it, with ``path`` (SITE or SOURCE) on its ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": str(path)}
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "launch", script), *args],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=600,
    )  # fmt: skip


def gin_file(path, family, name):
    return f"--gin_file={path / GIN / family / name}"


def bindings(values):
    return [f"--gin_bindings={value}" for value in values]


RELOAD = """
import json, sys
import numpy as np
import tensorflow as tf
from pbo_tf.experiments.reader import load_trained_operator

out = {}
for name, run_dir, k_max in json.loads(sys.argv[1]):
    pbo, q_family, omega0 = load_trained_operator(run_dir)
    out[name] = pbo.iterate(tf.constant(omega0[None]), k_max)[:, 0].numpy().tolist()
print(json.dumps(out))
"""


def test_every_program_finds_the_installed_package_through_its_entry_point(site, tmp_path):
    site, _ = site
    runs = tmp_path / "runs"
    # pbo-train, FQI: its iterates are value iteration from 0 (the dataset holds every (s, a)).
    out = launch("train.py", f"--root_dir={runs / 'fqi'}", gin_file(site, "toy_walk", "fqi.gin"),
                 *bindings(FQI_TINY), path=site)  # fmt: skip
    assert out.returncode == 0, out.stderr
    fqi = json.loads((runs / "fqi" / "metrics.json").read_text())
    assert (fqi["env"], fqi["algorithm"], fqi["K"]) == ("toy_walk", "fqi", K)
    iterates = np.load(runs / "fqi" / "iterates.npz")["iterates"]
    for k in range(K + 1):
        np.testing.assert_allclose(iterates[k].reshape(N, 2), value_iteration(k), atol=1e-3, err_msg=k)
    np.testing.assert_allclose(
        [e["q_error_rms"] for e in fqi["curve"][: K + 1]], rms_to_q_star([value_iteration(k).reshape(-1)
                                                                           for k in range(K + 1)]), atol=1e-3
    )  # fmt: skip

    # pbo-train, ProFQI; then pbo-apply beyond the run's K + EXTRA, exporting the operator and the policy.
    out = launch("train.py", f"--root_dir={runs / 'profqi'}", gin_file(site, "toy_walk", "profqi.gin"),
                 *bindings(PROFQI_TINY), path=site)  # fmt: skip
    assert out.returncode == 0, out.stderr
    profqi = json.loads((runs / "profqi" / "metrics.json").read_text())
    k_max = K + EXTRA + 3
    out = launch("apply.py", f"--run_dir={runs / 'profqi'}", f"--k_max={k_max}",
                 f"--export={tmp_path / 'export'}", path=site)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Wrote " + str(tmp_path / "export" / "policy") in out.stdout
    assert "pbo-play --env=toy_walk_env/ToyWalk-v0" in out.stdout
    applied = json.loads((runs / "profqi" / f"applied_k{k_max}.json").read_text())["curve"]
    assert applied[: K + EXTRA + 1] == [e for e in profqi["curve"] if e["k"] != "inf"]

    # pbo-train, ProDQN online (the package's online spec).
    out = launch("train.py", f"--root_dir={runs / 'prodqn'}", gin_file(site, "toy_walk_online", "prodqn.gin"),
                 path=site)  # fmt: skip
    assert out.returncode == 0, out.stderr
    prodqn = json.loads((runs / "prodqn" / "metrics.json").read_text())
    assert (prodqn["env"], prodqn["setting"], prodqn["algorithm"]) == ("toy_walk", "online", "prodqn")
    out = launch("apply.py", f"--run_dir={runs / 'prodqn'}", "--k_max=5", path=site)  # past its curve
    assert out.returncode == 0, out.stderr
    online_applied = json.loads((runs / "prodqn" / "applied_k5.json").read_text())["curve"]
    assert online_applied[: len(prodqn["curve"])] == prodqn["curve"] and len(online_applied) == 6

    # load_trained_operator in a fresh process: the offline and the online operator give their runs'
    # iterates; the applied curve is the RMS distance of Λ^k(ω_0) to Q*.
    jobs = [["profqi", str(runs / "profqi"), k_max], ["prodqn", str(runs / "prodqn"), 2 + 2]]
    reload = subprocess.run(
        [sys.executable, "-c", RELOAD, json.dumps(jobs)], capture_output=True, text=True, cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(site)}, timeout=300,
    )  # fmt: skip
    assert reload.returncode == 0, reload.stderr
    chains = {name: np.array(chain) for name, chain in json.loads(reload.stdout.splitlines()[-1]).items()}
    for name in ("profqi", "prodqn"):
        own = np.load(runs / name / "iterates.npz")["iterates"]
        np.testing.assert_allclose(chains[name][: len(own)], own, rtol=1e-5, atol=1e-6, err_msg=name)
    applied_rms = [e["q_error_rms"] for e in applied]
    np.testing.assert_allclose(applied_rms, rms_to_q_star(chains["profqi"]), rtol=1e-5)

    # pbo-play: the exported policy is the greedy policy of Q_{Λ^K(ω_0)}, played in the package's env.
    out = launch("play_policy.py", f"--policy_dir={tmp_path / 'export' / 'policy'}",
                 "--env=toy_walk_env/ToyWalk-v0", "--episodes=2", f"--max_steps={HORIZON}",
                 f"--gamma={GAMMA}", path=site)  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.splitlines()[-1])
    total, discounted = greedy_episode(chains["profqi"][K].reshape(N, 2))
    assert summary["mean_return"] == total
    assert summary["mean_discounted_return"] == pytest.approx(discounted, rel=1e-12)
    assert summary["pbo_tf_modules"] == []  # TensorFlow, TF-Agents, gymnasium and the package only

    # pbo-report and pbo-plot read the run folders.
    out = launch("report.py", f"--root_dir={runs}", f"--output_dir={tmp_path / 'report'}", path=site)
    assert out.returncode == 0, out.stderr
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## toy_walk" in report and (tmp_path / "report" / f"toy_walk_k{K}.png").exists()
    for metrics in (fqi, profqi):
        at_k = next(e["q_error_rms"] for e in metrics["curve"] if e["k"] == K)
        assert f"| {metrics['algorithm']} | 1 | — |" in report and f"{at_k:.4g} (n=1)" in report
    out = launch("plot.py", f"--root_dir={runs / 'fqi'}", f"--root_dir={runs / 'profqi'}",
                 f"--output={tmp_path / 'walk.png'}", path=site)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "walk.png").stat().st_size > 0
    rows = {line.split()[1]: line.split() for line in out.stdout.splitlines() if line.startswith("toy_walk")}
    assert rows["fqi"][6] == f"{fqi['curve'][K]['q_error_rms']:.4g}"  # env algorithm K seeds k=0 (n) k=K
    assert rows["profqi"][6] == f"{profqi['curve'][K]['q_error_rms']:.4g}"


def test_the_package_operator_kind_trains_reloads_and_exports_through_its_entry_point(site, tmp_path):
    """``toy_state_affine`` (toy_walk_env/operators.py, the package's ``pbo_tf.operators`` entry point):
    pbo-train builds it from its gin file, pbo-apply rebuilds it from the run's config.gin in another process
    and exports it; the export gives the run's iterates and ``slope[s] · ω[s, a] + offset[s]``."""
    import tensorflow as tf

    site, _ = site
    run = tmp_path / "affine"
    out = launch("train.py", f"--root_dir={run}", gin_file(site, "toy_walk", "profqi_state_affine.gin"),
                 *bindings(PROFQI_TINY), path=site)  # fmt: skip
    assert out.returncode == 0, out.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    assert (metrics["env"], metrics["algorithm"], metrics["K"]) == ("toy_walk", "profqi_state_affine", K)
    assert (metrics["operator"]["kind"], metrics["operator"]["slope"]) == ("StateAffinePBO", 0.8)
    assert "StateAffinePBO.slope = 0.8" in (run / "config.gin").read_text()
    k_max = K + EXTRA + 3
    out = launch("apply.py", f"--run_dir={run}", f"--k_max={k_max}", f"--export={tmp_path / 'export'}",
                 path=site)  # fmt: skip
    assert out.returncode == 0, out.stderr
    applied = json.loads((run / f"applied_k{k_max}.json").read_text())["curve"]
    assert applied[: K + EXTRA + 1] == [e for e in metrics["curve"] if e["k"] != "inf"]
    assert len(applied) == k_max + 1 and np.all(np.isfinite([e["q_error_rms"] for e in applied]))

    module = tf.saved_model.load(str(tmp_path / "export" / "operator"))
    iterates = np.load(run / "iterates.npz")["iterates"]
    reloaded = module.iterate(tf.constant(iterates[:1]), tf.constant(K + EXTRA)).numpy()[:, 0]
    np.testing.assert_allclose(reloaded, iterates, rtol=1e-5, atol=1e-6)
    weights = {v.name.split("/")[-1].split(":")[0]: v.numpy() for v in module.operator_variables}
    assert weights["slope"].shape == weights["offset"].shape == (N,)
    assert not np.allclose(weights["slope"], 0.8)  # trained from StateAffinePBO.slope
    by_hand = weights["slope"][:, None] * iterates[0].reshape(N, 2) + weights["offset"][:, None]
    np.testing.assert_allclose(reloaded[1].reshape(N, 2), by_hand, rtol=1e-5, atol=1e-6)


def test_without_its_entry_point_the_package_is_found_with_the_import_flag(site, tmp_path):
    _, source = site
    root = tmp_path / "sweep"
    args = [gin_file(source, "toy_walk", "fqi.gin"), *bindings(FQI_TINY)]
    missing = launch("train.py", f"--root_dir={tmp_path / 'no'}", *args, path=source)
    assert missing.returncode == 2
    common, fqi = (source / GIN / "toy_walk" / name for name in ("common.gin", "fqi.gin"))
    assert missing.stderr.strip().splitlines() == [
        f"train.py: error: cannot parse gin file '{common}' (included by '{fqi}'"
        "): No configurable matching 'ToyWalkProblem'. (the configurables of another package's environment "
        "exist once its module is imported: by the gin file, by pbo_tf's registry through the package's "
        "'pbo_tf.envs' entry point, or with --import=<module>)"
    ]
    bad = launch("train.py", f"--root_dir={tmp_path / 'no'}", *args, "--import=toy_walk_env.registrashun",
                 path=source)  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "train.py: error: --import=toy_walk_env.registrashun: cannot import it: ModuleNotFoundError: No "
        "module named 'toy_walk_env.registrashun'"
    ]
    # pbo-sweep, two points; it passes --import on to each training process.
    out = launch("sweep.py", f"--root_dir={root}", "--seeds=0,1", "--import=toy_walk_env.registration", *args,
                 path=source)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    for seed in (0, 1):
        metrics = json.loads((root / "toy_walk" / "fqi" / f"seed_{seed}" / "metrics.json").read_text())
        assert (metrics["env"], metrics["seed"]) == ("toy_walk", seed)
        want = rms_to_q_star([value_iteration(k).reshape(-1) for k in range(K + 1)])
        np.testing.assert_allclose([e["q_error_rms"] for e in metrics["curve"][: K + 1]], want, atol=1e-3)
    status = json.loads((root / "sweep_status.json").read_text())["points"]
    assert sorted(status) == [os.path.join("toy_walk", "fqi", f"seed_{s}") for s in (0, 1)]
    assert {p["status"] for p in status.values()} == {"done"}


def test_apply_says_which_package_a_run_needs(site, tmp_path):
    """A run folder of the walk, read where the package is not installed: one line naming the way out."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"env": "toy_walk", "algorithm": "profqi", "K": 4, "seed": 0,
                                                  "curve": []}))  # fmt: skip
    out = launch("apply.py", f"--run_dir={run}", "--k_max=3", path=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"apply.py: error: --run_dir '{run}' is a run of the environment 'toy_walk', which no registered "
        "package provides: install the package that registers it (its 'pbo_tf.envs' entry point) or pass "
        "--import=<the module that registers it>"
    ]
