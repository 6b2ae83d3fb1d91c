"""Shared test set-up: the legacy-Keras switch before TensorFlow loads, no graph optimizer (Grappler) in the
test processes, one intra-op thread per worker when the suite runs in parallel (pytest-xdist,
`scripts/test.sh`), the heaviest files first, gin cleared around each test, and the property tests'
hypothesis settings (few examples; no deadline: TensorFlow's first calls are slow; derandomized, so a run is
reproducible; no example database written into the work tree)."""

import gc
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import gin  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import pbo_tf  # noqa: E402,F401

settings.register_profile(
    "pbo_tf",
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("pbo_tf")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # The workers already fill the cores; one thread each also avoids the thread-pool hand-offs that
    # dominate the tiny compiled programs the tests run (1.4-2.2x slower with two threads each, BUILD.md).
    # The programs the tests launch inherit the same through TensorFlow's environment variable.
    from pbo_tf.experiments.config import set_threads  # noqa: E402

    set_threads(intra_op=1)
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")


def pytest_configure(config):
    """The processes that run tests run TensorFlow without its graph optimizer (Grappler), which rewrites
    each function graph for speed before its first run: the suite's tiny graphs run a few times each, so its
    passes cost more than they save (7-11% of an in-process test file's time). The same arithmetic to float
    rounding. The programs the tests launch keep it, as users run them; PBO_TF_TEST_GRAPPLER=on keeps it
    here too. (oneDNN's kernels stay: without them the launched programs run about a tenth slower.) The
    pytest-xdist controller runs no test and does not load TensorFlow."""
    controller = getattr(config.option, "numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER")
    if controller or os.environ.get("PBO_TF_TEST_GRAPPLER", "off") != "off":
        return
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


@pytest.fixture(autouse=True)
def _clear_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


#: The heaviest files, heaviest first (their worker seconds are in the summary at the end of a run): they run
#: before every other file. `scripts/test.sh` hands whole files to the workers in collection order
#: (``--dist loadfile --no-loadscope-reorder``), so a heavy file never starts while the other workers have
#: little left; a file missing here only runs later.
HEAVY_FIRST = (
    "tests/benchmarks/test_benchmark.py",
    "tests/experiments/test_runner.py",
    "tests/trainers/test_trainers.py",
    "tests/benchmarks/test_xla_export.py",
    "tests/experiments/test_online.py",
    "tests/launch/test_sweep_grid.py",
    "tests/launch/test_external_env.py",
    "tests/experiments/test_kill_resume.py",
    "tests/launch/test_quickstart.py",
    "tests/launch/test_launch.py",
    "tests/experiments/test_kill_resume_online.py",
    "tests/launch/test_gym_online_script.py",
)


def pytest_collection_modifyitems(items):
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(_file_of(item.nodeid), len(rank)))  # stable: the rest as collected


def pytest_collection_finish(session):
    """Every test module is imported: the modules' objects (TensorFlow's are most of a worker's) are never
    garbage, so they are frozen and the collector's full passes skip them; and the young generation holds
    10 000 objects rather than 700 (a test traces many small graphs: tens of thousands of short-lived
    objects each)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


_FILE_SECONDS: dict[str, float] = {}
_WORKER_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = _file_of(report.nodeid)
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration
    node = getattr(report, "node", None)  # the worker that ran it (pytest-xdist sets it on the controller)
    worker = node.gateway.id if node is not None else "main"
    _WORKER_SECONDS[worker] = _WORKER_SECONDS.get(worker, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _FILE_SECONDS:
        return
    heaviest = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:20]
    terminalreporter.write_sep("=", "worker seconds per file (setup + call + teardown), heaviest 20")
    for path, seconds in heaviest:
        terminalreporter.write_line(f"{seconds:8.1f}s {path}")
    per_worker = ", ".join(f"{w} {s:.1f}s" for w, s in sorted(_WORKER_SECONDS.items()))
    terminalreporter.write_line(f"worker seconds per worker: {per_worker}")
