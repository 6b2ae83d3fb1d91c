#!/usr/bin/env bash
# Creates .venv/ at the repository root with the pinned stack (see BUILD.md) and installs pbo_tf into it.
# Idempotent: re-running with unchanged requirement files does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.pbo_tf_requirements
want="$(cat requirements/*.txt setup.py | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # ray.txt (the `sweep` extra) and minari.txt (the `minari` extra) too, so that the tests of
  # `pbo-sweep --engine=ray` and of Minari datasets run.
  .venv/bin/python -m pip install --quiet -r requirements/base.txt -r requirements/dev.txt -r requirements/ray.txt \
    -r requirements/minari.txt
  # tf-agents 0.19.0 and gym 0.23.0: their metadata pins conflict with TF 2.21 / gymnasium 1.4 but the
  # code runs on this stack, so they go in without their dependencies (BUILD.md).
  .venv/bin/python -m pip install --quiet --no-deps -r requirements/nodeps.txt
  # JAX for the XLA-export tests, in .venv/jax/ where only they look (requirements/jax.txt): importable from
  # site-packages, it would be imported by every TensorFlow process. An older .venv/ held it there.
  .venv/bin/python -m pip uninstall --quiet --yes jax jaxlib 2>/dev/null || true
  rm -rf .venv/jax
  .venv/bin/python -m pip install --quiet --no-deps --target .venv/jax -r requirements/jax.txt
  # setuptools reports how it makes an editable install as a warning ("Editable installation. Please be careful
  # with folders ..."), which pip prints even with --quiet: a banner on every fresh setup, so filtered here.
  PYTHONWARNINGS="${PYTHONWARNINGS:+$PYTHONWARNINGS,}ignore:Editable installation" \
    .venv/bin/python -m pip install --quiet --no-deps -e .
  echo "$want" > "$stamp"
fi
