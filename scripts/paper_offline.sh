#!/usr/bin/env bash
# The paper's offline experiments at the paper's budgets, 20 seeds each trained together in one graph:
#   bash scripts/paper_offline.sh OUT lqr          # K = 2, 3, 4 x FQI, ProFQI (deep), ProFQI_LQR, exact operator
#   bash scripts/paper_offline.sh OUT chain_walk   # K = 2, 5, 15 x FQI, ProFQI, ProFQI_inf, ProFQI_chain, exact
#   SEEDS=0-9 bash scripts/paper_offline.sh OUT car_on_hill   # K = 9 (KS="5 9 15" for all three)
#   ALGOS=profqi_alive SEEDS=10-14 bash scripts/paper_offline.sh OUT car_on_hill   # other gin files of the env
# EXTRA_BINDINGS="B1 B2" adds gin bindings to every run (e.g. a smaller budget: "REFRESHES=50").
# Runs go to OUT/<env>/k<K>/<env>/<algorithm>/seeds_<a>-<b>; finished runs are skipped, interrupted ones resume.
# Figures and tables: launch/plot.py --root_dir=OUT/<env>/k<K> (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="$1"
ENV_NAME="$2"
export TF_USE_LEGACY_KERAS=1
PY="${PYTHON:-.venv/bin/python}"
case "$ENV_NAME" in
  lqr) KS="${KS:-2 3 4}"; ALGOS="${ALGOS:-fqi profqi profqi_lqr oracle}" ;;
  chain_walk) KS="${KS:-2 5 15}"; ALGOS="${ALGOS:-fqi profqi profqi_inf profqi_chain oracle}" ;;
  car_on_hill) KS="${KS:-9}"; ALGOS="${ALGOS:-fqi profqi}" ;;
  *) echo "unknown environment '$ENV_NAME' (lqr, chain_walk, car_on_hill)" >&2; exit 2 ;;
esac
FIRST="${SEEDS:-0-19}"; FIRST="${FIRST%-*}"; LAST="${SEEDS:-0-19}"; LAST="${LAST#*-}"
SEED_LIST="$(seq -s, "$FIRST" "$LAST")"
for K in $KS; do
  GIN_FILES=()
  for A in $ALGOS; do GIN_FILES+=("--gin_file=gin_configs/$ENV_NAME/$A.gin"); done
  for B in ${EXTRA_BINDINGS:-}; do GIN_FILES+=("--gin_bindings=$B"); done
  "$PY" launch/sweep.py --root_dir="$OUT/$ENV_NAME/k$K" --seeds="$SEED_LIST" --batch_seeds \
    --gin_bindings="K=$K" "${GIN_FILES[@]}"
done
