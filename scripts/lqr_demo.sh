#!/usr/bin/env bash
# LQR demo: sets up .venv/ (if needed), then runs a small, real ProFQI-vs-FQI experiment on
# LQR (K=3, paper budgets, 2 seeds: FQI, ProFQI with the deep PBO, ProFQI_LQR and the exact operator)
# and draws the paper's Figure-5-style curve. A few minutes on 2 CPU cores.
# Re-running skips finished runs; an interrupted run resumes from its checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_USE_LEGACY_KERAS=1
OUT="${OUT_DIR:-results/quickstart}"
.venv/bin/python launch/sweep.py --root_dir="$OUT/runs" --seeds=0,1 --parallel=2 --gin_bindings=K=3 \
  --gin_file=gin_configs/lqr/fqi.gin --gin_file=gin_configs/lqr/profqi.gin \
  --gin_file=gin_configs/lqr/profqi_lqr.gin --gin_file=gin_configs/lqr/oracle.gin
.venv/bin/python launch/plot.py --root_dir="$OUT/runs" --output="$OUT/lqr_k3.png" \
  --title="LQR, K=3: distance to the optimal parameters"
echo "Figure: $OUT/lqr_k3.png"
