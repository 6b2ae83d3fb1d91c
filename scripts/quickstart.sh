#!/usr/bin/env bash
# The README's main job: sets up .venv/ (if needed), then runs a small, real ProFQI-vs-FQI experiment on
# car-on-hill (K=9, 5 seeds each trained together in one graph; FQI at the paper's budget, ProFQI with the
# operator that does not collapse and keeps improving past K, profqi_fixed_point.gin, at 50 of the paper's
# 1000 target refreshes, 5% of its gradient steps, applied to k = K + 30) and draws J against k with 95% intervals and the exact optimum
# (paper Fig. 7), and the greedy policies after K iterations (Fig. 6).
# Re-running skips finished runs; an interrupted run resumes from its checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_USE_LEGACY_KERAS=1
OUT="${OUT_DIR:-results/quickstart}"
.venv/bin/python launch/sweep.py --root_dir="$OUT/runs" --seeds=0,1,2,3,4 --batch_seeds \
  --gin_bindings=K=9 --gin_bindings=REFRESHES=50 --gin_bindings=EXTRA_ITERATIONS=30 \
  --gin_file=gin_configs/car_on_hill/fqi.gin --gin_file=gin_configs/car_on_hill/profqi_fixed_point.gin
.venv/bin/python launch/plot.py --root_dir="$OUT/runs" --output="$OUT/car_on_hill_k9.png" \
  --reference_key=optimal_J --table_ks=1,5,9,19,39 --policy_maps="$OUT/car_on_hill_k9_policies.png" \
  --title="Car-on-hill, K=9: ProFQI with the fixed-point term (5% of the paper's budget) vs FQI"
echo "Figures: $OUT/car_on_hill_k9.png, $OUT/car_on_hill_k9_policies.png"
