#!/usr/bin/env bash
# Car-on-hill ProFQI, K = 9, 5 seeds in one graph, at the paper's budget (10 refreshes x 1000 epochs), trained
# on the CPU a piece at a time: each call trains for at most MINUTES, then keeps the run's latest checkpoint
# in results/car_on_hill_k9_paper_cpu/run_state/ (committed), so the next session, in a fresh clone,
# resumes where this one stopped. When the run finishes, its metrics.json, figures and policy maps go to
# results/car_on_hill_k9_paper_cpu/.
#
#   bash scripts/coh_paper_cpu.sh [MINUTES]     # default 150
#   bash scripts/coh_paper_cpu.sh save          # keep the latest checkpoints now (while or after it runs)
#   bash scripts/coh_paper_cpu.sh restore       # only lay the kept state out as the run folder (e.g. to
#                                               # export it for a GPU with launch/xla_profqi.py)
#
# A killed process loses only the refresh in progress (checkpoints are written after each refresh).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES="${1:-150}"
ROOT=runs/coh_paper_cpu
RUN=$ROOT/car_on_hill/profqi/seeds_0-4  # the layout of launch/sweep.py --batch_seeds
STATE=results/car_on_hill_k9_paper_cpu/run_state
OUT=results/car_on_hill_k9_paper_cpu
SEEDS=5
[[ "$MINUTES" == save || "$MINUTES" == restore ]] || bash scripts/setup.sh
export TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 PYTHONUNBUFFERED=1

restore() {  # the committed state into an empty run folder
  [[ -d "$STATE" && ! -e "$RUN/config.gin" ]] || return 0
  mkdir -p "$RUN"
  cp -r "$STATE"/. "$RUN"/
  echo "restored $RUN from $STATE"
}

save() {  # the latest complete checkpoint of every seed (and what a resume needs beside it) into $STATE
  local tmp="$STATE.tmp" s dir latest
  rm -rf "$tmp"
  mkdir -p "$tmp"
  for ((s = 0; s < SEEDS; s++)); do
    dir="$RUN/seed_$s"
    if [[ ! -f "$dir/checkpoints/checkpoint" ]]; then  # no refresh finished yet: nothing to keep
      rm -rf "$tmp"
      return 0
    fi
    latest=$(sed -n 's/^model_checkpoint_path: "\(.*\)"$/\1/p' "$dir/checkpoints/checkpoint")
    mkdir -p "$tmp/seed_$s/checkpoints"
    cp "$dir/dataset.npz" "$tmp/seed_$s/"
    cp "$dir/checkpoints/$latest".* "$dir/checkpoints/train_time.json" "$tmp/seed_$s/checkpoints/"
    printf 'model_checkpoint_path: "%s"\nall_model_checkpoint_paths: "%s"\n' "$latest" "$latest" \
      > "$tmp/seed_$s/checkpoints/checkpoint"
  done
  cp "$RUN/config.gin" "$tmp/"
  rm -rf "$STATE"
  mv "$tmp" "$STATE"
  echo "kept the latest checkpoints in $STATE ($(du -sh "$STATE" | cut -f1))"
}

if [[ "$MINUTES" == save || "$MINUTES" == restore ]]; then
  "$MINUTES"
  exit 0
fi
restore
status=0
timeout "${MINUTES}m" .venv/bin/python launch/train.py --gin_file=gin_configs/car_on_hill/profqi.gin \
  --gin_bindings="NUM_SEEDS=$SEEDS" --root_dir="$RUN" || status=$?
if [[ -f "$RUN/metrics.json" ]]; then
  # FQI at the paper's budget beside it (minutes; the finished ProFQI run is skipped), then the figures.
  .venv/bin/python launch/sweep.py --root_dir="$ROOT" --seeds=0,1,2,3,4 --batch_seeds --parallel=1 \
    --gin_file=gin_configs/car_on_hill/fqi.gin --gin_file=gin_configs/car_on_hill/profqi.gin
  for algo in fqi profqi; do
    mkdir -p "$OUT/$algo"
    cp "$ROOT/car_on_hill/$algo/seeds_0-4/metrics.json" "$ROOT/car_on_hill/$algo/seeds_0-4/config.gin" "$OUT/$algo/"
  done
  .venv/bin/python launch/plot.py --root_dir="$ROOT" --output="$OUT/car_on_hill_k9_paper.png" \
    --reference_key=optimal_J --table_ks=1,5,9,19 --policy_maps="$OUT/car_on_hill_k9_paper_policies.png" \
    --title="Car-on-hill, K=9, the paper's budget: J of the greedy policy of Q_k (line: optimal J)"
  rm -rf "$STATE"
  echo "finished: $OUT"
else
  save
  [[ $status == 124 ]] && echo "stopped after $MINUTES min; run this script again to go on"
fi
