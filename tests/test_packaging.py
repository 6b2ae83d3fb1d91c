"""pbo_tf as a user installs it: the wheel holds the gin configs and the car-on-hill data and declares the
pinned requirements; installed (not editable) into a fresh virtual environment, its console scripts run an
experiment from a folder outside the checkout, by the shipped config's name, without gin's "Path not found"
log line; a missing TF-Agents is one line naming the install command.

To stay fast and offline, the fresh environment borrows the third-party packages of the environment running
the tests (a ``.pth`` line naming its site-packages, which does not run that environment's editable-install
hook), and the wheel is built without build isolation; pbo_tf itself comes only from the wheel.
"""

import glob
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What a wheel is built from (the rest of the checkout is not needed, and the build leaves files behind).
SOURCES = ["setup.py", "MANIFEST.in", "pyproject.toml", "requirements", "pbo_tf", "gin_configs"]
TINY = ["K=2", "REFRESHES=1", "PASSES_PER_REFRESH=1", "MAX_EPOCHS=2", "PATIENCE=1", "EXTRA_ITERATIONS=2"]
TINY += ["ProFQIConfig.w_size=4", "ProFQIConfig.w_batch_size=2"]
CONSOLE_SCRIPTS = ("pbo-train", "pbo-sweep", "pbo-plot", "pbo-play", "pbo-apply", "pbo-report", "pbo-configs")


def _run(cmd, cwd, timeout=300):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PBO_TF_VERBOSE")}
    env.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel built from a copy of the checkout's sources."""
    src, dist = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        path = os.path.join(REPO, name)
        if os.path.isdir(path):
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(path, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(dist), str(src)],
        src,
    )
    (path,) = glob.glob(str(dist / "pbo_tf-*.whl"))
    return path


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh virtual environment with the wheel installed, and the tests' third-party packages."""
    root = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(root)], root)
    python = str(root / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "--python", python]
    _run([*pip, "install", "--no-deps", "--no-index", "-q", wheel], root)
    site_packages = _run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root
    ).stdout
    borrowed = sysconfig.get_path("purelib")
    with open(os.path.join(site_packages.strip(), "_borrowed_site_packages.pth"), "w") as f:
        f.write(borrowed + "\n")
    return root


def test_the_wheel_holds_the_configs_and_data_and_declares_the_pinned_requirements(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(metadata).decode()
        (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = archive.read(entry_points).decode()
    configs = {os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "gin_configs", "*", "*.gin"))}
    assert len(configs) > 10 and {f"pbo_tf/{name}" for name in configs} <= names
    data = {
        os.path.relpath(p, REPO)
        for p in glob.glob(os.path.join(REPO, "pbo_tf", "**", "*.npz"), recursive=True)
    }
    assert any("car_on_hill" in name for name in data) and data <= names
    for script in CONSOLE_SCRIPTS:
        assert f"{script} = pbo_tf.cli." in entry_points
    # Requirements: exactly requirements/base.txt (tensorboard, box2d, ... included), satisfied by the
    # environment scripts/setup.sh makes; TF-Agents and gym are not (they need --no-deps).
    declared = [
        line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    runtime = [req for req in declared if "extra ==" not in req]
    with open(os.path.join(REPO, "requirements", "base.txt")) as f:
        pinned = [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]
    assert runtime == pinned
    assert {"tensorboard==2.21.0", "box2d==2.3.10", "tensorflow-probability==0.25.0"} <= set(runtime)
    assert not any(req.startswith(("tf-agents", "gym=")) for req in declared)
    for req in runtime:
        name, _, version = req.partition("==")
        assert importlib.metadata.version(name) == version or not version, req


def test_an_installed_wheel_runs_its_console_scripts_from_outside_the_checkout(venv, tmp_path):
    python, bin_dir = str(venv / "bin" / "python"), venv / "bin"
    assert all((bin_dir / script).exists() for script in CONSOLE_SCRIPTS)
    # Where pbo_tf and its configs come from, and what a missing TF-Agents gives (hidden from the import).
    probe = (
        "import json, sys, pbo_tf\n"
        "from pbo_tf.experiments.config import GIN_CONFIGS_DIR\n"
        "sys.modules['tf_agents'] = None\n"
        "try:\n"
        "    import pbo_tf.agents.dqn\n"
        "    error = None\n"
        "except ImportError as e:\n"
        "    error = [type(e).__name__, str(e)]\n"
        "print(json.dumps([pbo_tf.__file__, GIN_CONFIGS_DIR, error]))\n"
    )
    found = json.loads(_run([python, "-c", probe], tmp_path).stdout)
    package, configs, (error_type, message) = found
    assert package.startswith(str(venv)) and configs.startswith(str(venv)), found
    assert os.path.isfile(os.path.join(configs, "chain_walk", "profqi.gin"))
    assert error_type == "MissingDependencyError" and "\n" not in message
    assert "pip install --no-deps tf-agents==0.19.0 gym==0.23.0" in message
    # pbo-train with the shipped config's name, from a folder outside the checkout.
    work = tmp_path / "work"
    work.mkdir()
    args = [f"--gin_bindings={b}" for b in TINY]
    train = [str(bin_dir / "pbo-train"), "--gin_file=chain_walk/profqi.gin", "--root_dir=run", *args]
    out = _run(train, work)
    out = out.stdout + out.stderr
    assert "Path not found" not in out and "ERROR" not in out, out
    metrics = json.loads((work / "run" / "metrics.json").read_text())
    assert (metrics["algorithm"], metrics["K"]) == ("profqi", 2)
    # pbo-sweep launches its runs as `python -m pbo_tf.cli.train` of the same environment.
    out = _run([str(bin_dir / "pbo-sweep"), "--gin_file=chain_walk/fqi.gin", "--root_dir=sweep", *args], work)
    out = out.stdout + out.stderr
    assert "Path not found" not in out and "done: " in out, out
    run = work / "sweep" / "chain_walk" / "fqi" / "seed_0"
    assert "Path not found" not in (run / "log.txt").read_text()
    assert json.loads((run / "metrics.json").read_text())["K"] == 2
