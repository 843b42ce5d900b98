#!/usr/bin/env bash
# ddp_backend: a DDP step of ResNet-50's shapes (bench/ddp_step.py: next to
# no compute, so the step is the gradient synchronisation) under
# backend="een" (through PS PS) against backend="gloo" (een-launch --ps 0),
# with 2 and 4 workers, alternately ROUNDS times each in the same run.
# Prints every run's median step, then per worker count the medians and
# een / gloo (the goal: <= 0.8). TRANSPORT=shm (or ipc) gives een's data
# plane (default: een-launch's, tcp on one host).
#   [TRANSPORT=shm] bench/ddp_backend.sh [BUILD_DIR] [ROUNDS] [PS] [STEPS]
set -euo pipefail
build=${1:-build} rounds=${2:-3} ps=${3:-2} steps=${4:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-/usr/bin/python3}
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
run() {  # backend workers -> the job's median step in ms
  local out servers=0
  local transport=()
  [ "$1" = een ] && servers=$ps && transport=(${TRANSPORT:+--transport "$TRANSPORT"})
  out=$("$build/bin/een-launch" --ps "$servers" --workers "$2" "${transport[@]}" -- \
        "$python" "$root/bench/ddp_step.py" --backend "$1" --steps "$steps" 2>&1) ||
    { echo "$out" >&2; exit 1; }
  sed -n 's/.*step median \([0-9.]*\) ms.*/\1/p' <<<"$out"
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
for workers in 2 4; do
  gloo=() een=()
  for ((i = 1; i <= rounds; i++)); do
    ms=$(run gloo "$workers"); echo "workers $workers round $i  gloo ${ms} ms/step"; gloo+=("$ms")
    ms=$(run een "$workers"); echo "workers $workers round $i  een  ${ms} ms/step ($ps PS${TRANSPORT:+, $TRANSPORT})"; een+=("$ms")
  done
  g=$(printf '%s\n' "${gloo[@]}" | median) e=$(printf '%s\n' "${een[@]}" | median)
  echo "workers $workers: median gloo ${g} ms, een ${e} ms; een / gloo = $(awk "BEGIN {printf \"%.2f\", $e / $g}")"
done
