#!/usr/bin/env bash
# The README's main job: sets up .venv/ (if needed), then runs a small, real ProFQI-vs-FQI experiment on
# car-on-hill (K=9, 2 seeds trained together in one graph; FQI at the paper's budget, ProFQI at a budget cut
# to a few minutes on 2 CPU cores) and draws the paper's Figure 7-style J-vs-k curve against the optimal J,
# and the greedy policy maps after K iterations (Figure 6).
# Re-running skips finished runs; an interrupted run resumes from its checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=3
OUT="${OUT_DIR:-results/quickstart}"
.venv/bin/python launch/sweep.py --root_dir="$OUT/runs" --seeds=0,1 --batch_seeds --parallel=2 \
  --gin_bindings=K=9 --gin_bindings=EPOCHS=3 --gin_bindings=TRAINING_STEPS=5 \
  --gin_file=gin_configs/car_on_hill/fqi.gin --gin_file=gin_configs/car_on_hill/profqi.gin
.venv/bin/python launch/plot.py --root_dir="$OUT/runs" --output="$OUT/car_on_hill_k9.png" \
  --reference_key=optimal_J --table_ks=1,5,9,19 --policy_maps="$OUT/car_on_hill_k9_policies.png" \
  --title="Car-on-hill, K=9: J of the greedy policy of Q_k (line: optimal J)"
echo "Figures: $OUT/car_on_hill_k9.png, $OUT/car_on_hill_k9_policies.png"
