"""scripts/jemalloc.sh, which scripts/test.sh uses to run the suite on jemalloc: it prints nothing or the
path of a library that a Python of .venv/ preloads (mapped into the process, allocating), the same path on
a second call; and where the suite runs with it preloaded, this worker has it mapped."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
MAPPED = "import sys; sys.exit(0 if 'libjemalloc' in open('/proc/self/maps').read() else 3)"


def _script():
    out = subprocess.run(["bash", os.path.join(REPO, "scripts", "jemalloc.sh")], capture_output=True,
                         text=True, timeout=300, check=True)  # fmt: skip
    assert out.stderr == ""
    return out.stdout.strip()


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; LD_PRELOAD")
@pytest.mark.skipif(not os.path.exists(VENV_PYTHON), reason="no .venv/ (scripts/setup.sh makes it)")
def test_jemalloc_script_prints_a_library_that_python_preloads_or_nothing():
    path = _script()
    if not path:
        pytest.skip("no jemalloc on this machine (the suite runs on the system's malloc)")
    assert os.path.isabs(path) and os.path.isfile(path) and path.endswith("libjemalloc.so.2")
    env = {**os.environ, "LD_PRELOAD": path}
    run = subprocess.run([VENV_PYTHON, "-c", MAPPED + "\nx = [bytearray(1 << 20) for _ in range(64)]"],
                         env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (run.returncode, run.stderr) == (0, "")
    without = subprocess.run([VENV_PYTHON, "-c", MAPPED], env={**os.environ, "LD_PRELOAD": ""}, timeout=60)
    assert without.returncode == 3  # the check can fail: nothing else maps it
    assert _script() == path  # the copy in .venv/lib/, found again


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_suite_run_with_jemalloc_preloaded_has_it_in_its_workers():
    if "libjemalloc" not in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("the suite runs on the system's malloc here")
    with open("/proc/self/maps") as f:
        assert "libjemalloc" in f.read()
