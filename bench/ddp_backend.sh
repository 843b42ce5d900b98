#!/usr/bin/env bash
# ddp_backend: a DDP step of ResNet-50's shapes (bench/ddp_step.py: little
# compute, measured apart, so the rest is the gradient synchronisation) under
# backend="een" (through PS PS) against backend="gloo" (een-launch --ps 0),
# with 2 and 4 workers, alternately ROUNDS times each in the same run.
# Prints every run's median step and its sync part (step - compute), then
# per worker count the medians and een / gloo of both (the goal: sync
# <= 0.8). TRANSPORT=tcp (or shm, ipc) gives een's data plane (default:
# een-launch's, shared memory on one host).
#   [TRANSPORT=tcp] bench/ddp_backend.sh [BUILD_DIR] [ROUNDS] [PS] [STEPS]
set -euo pipefail
build=${1:-build} rounds=${2:-3} ps=${3:-2} steps=${4:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-/usr/bin/python3}
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
run() {  # backend workers -> "STEP SYNC": the job's median step and its sync part, in ms
  local out servers=0
  local transport=()
  [ "$1" = een ] && servers=$ps && transport=(${TRANSPORT:+--transport "$TRANSPORT"})
  out=$("$build/bin/een-launch" --ps "$servers" --workers "$2" "${transport[@]}" -- \
        "$python" "$root/bench/ddp_step.py" --backend "$1" --steps "$steps" 2>&1) ||
    { echo "$out" >&2; exit 1; }
  sed -n 's/.*step median \([0-9.]*\) ms, compute median [0-9.]* ms, sync \([0-9.-]*\) ms.*/\1 \2/p' <<<"$out"
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
ratio() { awk "BEGIN {printf \"%.2f\", $1 / $2}"; }
for workers in 2 4; do
  gloo=() een=() gloo_sync=() een_sync=()
  for ((i = 1; i <= rounds; i++)); do
    out=$(run gloo "$workers") && read -r ms sync <<<"$out"
    echo "workers $workers round $i  gloo step ${ms} ms, sync ${sync} ms"
    gloo+=("$ms") gloo_sync+=("$sync")
    out=$(run een "$workers") && read -r ms sync <<<"$out"
    echo "workers $workers round $i  een  step ${ms} ms, sync ${sync} ms ($ps PS${TRANSPORT:+, $TRANSPORT})"
    een+=("$ms") een_sync+=("$sync")
  done
  g=$(printf '%s\n' "${gloo[@]}" | median) e=$(printf '%s\n' "${een[@]}" | median)
  gs=$(printf '%s\n' "${gloo_sync[@]}" | median) es=$(printf '%s\n' "${een_sync[@]}" | median)
  echo "workers $workers: step median gloo ${g} ms, een ${e} ms (een / gloo $(ratio "$e" "$g"));" \
       "sync median gloo ${gs} ms, een ${es} ms (een / gloo $(ratio "$es" "$gs"))"
done
