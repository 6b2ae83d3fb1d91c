#!/usr/bin/env bash
# results/README.md's summary table and results/report/ (figures and tables per environment and K), both written
# by pbo-report from the committed result folders (each section paired by seed against FQI where it ran):
#   bash scripts/results_report.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_USE_LEGACY_KERAS=1
"${PYTHON:-.venv/bin/python}" launch/report.py \
  --root_dir=results/chain_walk,results/lqr,results/car_on_hill/k9,results/car_on_hill/k39,results/car_on_hill/fit_optimum,results/bicycle_offline/k8_1pct,results/lunar_lander/k10_1pct,results/bicycle_online/k8_10pct \
  --output_dir=results/report --readme=results/README.md --paired_baseline=fqi
