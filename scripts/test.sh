#!/usr/bin/env bash
# Sets up .venv/ (if needed), lints, and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2
# The suite's processes allocate through jemalloc where scripts/jemalloc.sh finds or fetches it (XLA's
# compiler, most of the suite's time, runs faster on it); PBO_TF_TEST_MALLOC=system keeps the system's.
jemalloc=""
if [ "${PBO_TF_TEST_MALLOC:-jemalloc}" = jemalloc ]; then
  jemalloc=$(bash scripts/jemalloc.sh)
fi
if [ -n "$jemalloc" ]; then
  export LD_PRELOAD="$jemalloc${LD_PRELOAD:+:$LD_PRELOAD}"
  echo "allocator: jemalloc ($jemalloc)"
else
  echo "allocator: the system's malloc"
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Two workers (CI has 2 cores), and a third where 15 GB of memory are available (a worker holds up to
# ~4 GB): it keeps the cores busy while another worker waits for a launched program's start or the disk.
# A whole test file at a time (module fixtures run once), handed out in collection order, which starts the
# heaviest files first (tests/conftest.py); the summary lists the worker seconds of the heaviest files and
# of each worker.
available_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
workers=$(( ${available_kb:-0} >= 15 * 1024 * 1024 ? 3 : 2 ))
.venv/bin/python -m pytest -q -n "${PBO_TF_TEST_WORKERS:-$workers}" --dist loadfile --no-loadscope-reorder \
  --durations=15 tests "$@"
