#!/usr/bin/env bash
# The operator study (car-on-hill, K = 9): the paper's deep PBO and one variant per option that could keep
# it a function of ω, each at 5% of the paper's budget (50 of 1000 target refreshes × 10 passes), seeds
# 0-4 trained together in one graph, the curve evaluated to k = K + 30. Writes OUT/runs (the run folders),
# OUT/report.md (pbo-report): J against k per variant in one figure, a table at k = 1, K, K + 10 and
# K + 30, and the operator activity per variant. Re-running skips finished runs; an interrupted one resumes.
# Sizes: REFRESHES, PASSES_PER_REFRESH, SEEDS, KS, VARIANTS (gin file names under
# gin_configs/car_on_hill/operator_study/ without study_ and .gin) and EXTRA_BINDINGS (more gin bindings,
# space-separated) can be set in the environment (the tests run it at toy size).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_USE_LEGACY_KERAS=1
OUT="${OUT_DIR:-results/operator_study}"
REFRESHES="${REFRESHES:-50}"
PASSES="${PASSES_PER_REFRESH:-10}"
SEEDS="${SEEDS:-0,1,2,3,4}"
KS="${KS:-9}"
VARIANTS="${VARIANTS:-paper w_last residual standardise leaky_relu silu glorot combined combined_residual fixed_point
  fixed_point_n10 fixed_point_n100 fixed_point_w fixed_point_w_r30 fixed_point_fqi_w fp_weight03 fp_warmup fp_past_k
  fp_balance fp_w_chain fp_warmup_w_chain}"
gin_files=()
for v in $VARIANTS; do
  gin_files+=("--gin_file=gin_configs/car_on_hill/operator_study/study_$v.gin")
done
for b in ${EXTRA_BINDINGS:-}; do
  gin_files+=("--gin_bindings=$b")
done
.venv/bin/python launch/sweep.py --root_dir="$OUT/runs" --seeds="$SEEDS" --batch_seeds --ks="$KS" \
  --grid=REFRESHES="$REFRESHES" --gin_bindings=PASSES_PER_REFRESH="$PASSES" \
  --gin_bindings=EXTRA_ITERATIONS=30 "${gin_files[@]}"
.venv/bin/python launch/report.py --root_dir="$OUT/runs" --output_dir="$OUT"
echo "Report: $OUT/report.md"
