#!/usr/bin/env bash
# On an accelerator with JAX (no TensorFlow): trains the ProFQI seeds of one or more
# `xla_profqi.py --mode=export` folders, each seed in a process of its own and all seeds of a folder at
# once (so that a deadline leaves every seed with a state to finish from; on an H200 five processes share
# the GPU at 0.69x the throughput of one alone, benchmarks/README.md), the folders one after another, and
# stops whatever still runs DEADLINE_S seconds after the start.
#   DEADLINE_S=500 bash benchmarks/xla_profqi_device.sh TRAIN_ROOT EXPORT_DIR [EXPORT_DIR ...]
# Each folder's states go to TRAIN_ROOT/<folder name>/ (`xla_replay.py --train_dir`), with a snapshot every
# SNAPSHOT_EVERY calls, so that seeds stopped at the deadline can still be finished at a refresh they all
# reached. Back here: `xla_profqi.py --mode=finish --device_dir=TRAIN_ROOT/<folder name>`
# (`--allow_partial` for a folder cut short; `launch/train.py` then trains the refreshes left).
set -uo pipefail
TRAIN_ROOT="$1"
shift
DEADLINE_S="${DEADLINE_S:-500}"
SNAPSHOT_EVERY="${SNAPSHOT_EVERY:-50}"
PY="${PYTHON:-python3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
export XLA_PYTHON_CLIENT_PREALLOCATE=false # several processes share the device's memory
START=$(date +%s)
for EXPORT in "$@"; do
  NAME="$(basename "$EXPORT")"
  mkdir -p "$TRAIN_ROOT/$NAME"
  CASES=$("$PY" -c "import json, sys; print(' '.join(c['name'] for c in json.load(open(sys.argv[1]))['cases']))" \
    "$EXPORT/cases.json")
  PIDS=()
  for CASE in $CASES; do
    "$PY" "$HERE/xla_replay.py" --export_dir="$EXPORT" --train_dir="$TRAIN_ROOT/$NAME" --cases="$CASE" \
      --snapshot_every="$SNAPSHOT_EVERY" >"$TRAIN_ROOT/$NAME/$CASE.log" 2>&1 &
    PIDS+=($!)
  done
  echo "$NAME: $(echo $CASES | wc -w) seeds started at $(($(date +%s) - START)) s"
  while :; do
    RUNNING=0
    for PID in "${PIDS[@]}"; do kill -0 "$PID" 2>/dev/null && RUNNING=$((RUNNING + 1)); done
    [ "$RUNNING" -eq 0 ] && break
    if [ $(($(date +%s) - START)) -ge "$DEADLINE_S" ]; then
      echo "$NAME: deadline ${DEADLINE_S} s reached, stopping $RUNNING seeds"
      kill "${PIDS[@]}" 2>/dev/null
      wait
      break
    fi
    sleep 2
  done
  for CASE in $CASES; do echo "  $CASE: $(grep -E 'call|Error|error' "$TRAIN_ROOT/$NAME/$CASE.log" | tail -1)"; done
  echo "$NAME: ended at $(($(date +%s) - START)) s"
  if [ $(($(date +%s) - START)) -ge "$DEADLINE_S" ]; then break; fi
done
