"""Shared test set-up: the legacy-Keras switch before TensorFlow loads, one intra-op thread per worker when
the suite runs in parallel (pytest-xdist, `scripts/test.sh`), gin cleared around each test, and the
property tests' hypothesis settings (few examples; no deadline: TensorFlow's first calls are slow;
derandomized, so a run is reproducible; no example database written into the work tree)."""

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
    from pbo_tf.experiments.config import set_threads  # noqa: E402

    set_threads(intra_op=1)


@pytest.fixture(autouse=True)
def _clear_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = _file_of(report.nodeid)
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _FILE_SECONDS:
        return
    heaviest = sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:20]
    terminalreporter.write_sep("=", "worker seconds per file (setup + call + teardown), heaviest 20")
    for path, seconds in heaviest:
        terminalreporter.write_line(f"{seconds:8.1f}s {path}")
