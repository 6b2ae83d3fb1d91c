#!/usr/bin/env bash
# Sets up .venv/ (if needed), lints, and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q tests "$@"
