#!/usr/bin/env bash
# DQN, ProDQN and ProDQN with the fixed-point term (prodqn_fixed_point) on CartPole-v1 (gin_configs/gym/:
# DQN the RL Zoo's settings, ProDQN the same env steps) and Acrobot-v1 (gin_configs/acrobot/, the reference code's configuration), seeds 0-4
# each, at a fraction of each schedule, then one report (pbo-report) of all of it:
#   bash scripts/gym_online.sh                      # runs in runs/gym_online, report in results/gym_online/
#   BUDGET=0.01 bash scripts/gym_online.sh          # 1% of both schedules
#   ACROBOT_BUDGET=0.1 CARTPOLE_BUDGET=1 OUT_DIR=runs/g REPORT_DIR=reports/g bash scripts/gym_online.sh
# The budget is a fraction of the training steps: ProDQN's target refreshes (REFRESHES, of 780 CartPole
# x 32 training steps / 3000 Acrobot x 25) and DQN's training steps per target update
# (DQN_TRAIN_STEPS_PER_REFRESH, of 128 / 6000, x K target updates); K and every size stay the gin file's.
# Acrobot's metrics.json["budget"]["fraction"] records it against the reference's schedule. BUDGET sets
# both; CARTPOLE_BUDGET (default 0.05) and ACROBOT_BUDGET (default 0.001) set one each. The defaults take
# about half an hour on 2 cores.
# N_EVAL_EPISODES (default 10; the files: CartPole 10, Acrobot 100, the reference's) greedy episodes per k.
# SEEDS (default 0,1,2,3,4), PARALLEL (default 2: runs at a time, one process each), ALGOS (default
# "dqn prodqn prodqn_fixed_point"), EXTRA_BINDINGS (gin bindings added to every run, space-separated).
# Runs go to OUT_DIR/<gym|acrobot>/<algorithm>/seed_<s>; finished runs are skipped, interrupted ones resume.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
PY="${PYTHON:-.venv/bin/python}"
OUT="${OUT_DIR:-runs/gym_online}"
REPORT="${REPORT_DIR:-results/gym_online}"
SEEDS="${SEEDS:-0,1,2,3,4}"
PARALLEL="${PARALLEL:-2}"
ALGOS="${ALGOS:-dqn prodqn prodqn_fixed_point}"
EVAL="${N_EVAL_EPISODES:-10}"
CARTPOLE_BUDGET="${CARTPOLE_BUDGET:-${BUDGET:-0.05}}"
ACROBOT_BUDGET="${ACROBOT_BUDGET:-${BUDGET:-0.001}}"

# steps FRACTION FULL: max(1, round(FRACTION x FULL))
steps() { "$PY" -c "import sys; print(max(1, round(float(sys.argv[1]) * int(sys.argv[2]))))" "$1" "$2"; }

# sweep FOLDER FRACTION FULL_REFRESHES FULL_DQN_STEPS
sweep() {
  local folder="$1" refreshes dqn_steps
  refreshes="$(steps "$2" "$3")"
  dqn_steps="$(steps "$2" "$4")"
  local args=()
  for a in $ALGOS; do args+=("--gin_file=gin_configs/$folder/$a.gin"); done
  for b in ${EXTRA_BINDINGS:-}; do args+=("--gin_bindings=$b"); done
  echo "$folder: budget $2: REFRESHES=$refreshes, DQN_TRAIN_STEPS_PER_REFRESH=$dqn_steps, seeds $SEEDS"
  "$PY" launch/sweep.py --root_dir="$OUT" --seeds="$SEEDS" --parallel="$PARALLEL" \
    --gin_bindings="REFRESHES=$refreshes" --gin_bindings="DQN_TRAIN_STEPS_PER_REFRESH=$dqn_steps" \
    --gin_bindings="N_EVAL_EPISODES=$EVAL" "${args[@]}"
}

status=0
sweep gym "$CARTPOLE_BUDGET" 780 128 || status=$?
sweep acrobot "$ACROBOT_BUDGET" 3000 6000 || status=$?
"$PY" launch/report.py --root_dir="$OUT" --output_dir="$REPORT"
echo "Report: $REPORT/report.md"
exit "$status"
