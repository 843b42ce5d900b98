#!/usr/bin/env bash
# consistency: BSP against ssp:2 and async on Fashion-MNIST (2 PS, 4
# workers x batch 32, Adam, EPOCHS epochs), measured in one run: first with
# four equal workers, then with worker 1 slowed to about half speed (it
# sleeps, before each step, the mean step time the equal BSP run measured:
# fashion_mnist --slow-rank 1 --slow-ms X), then with every worker sleeping
# 4X before a random quarter of its steps (--jitter-ms 4X: each at half
# speed on average, stragglers that come and go). Under ssp/async the workers deal
# the batches out (DataParallel::NextBatch), so every run trains the same
# number of samples. Prints samples/s (the whole job's: EPOCHS x 60000 over
# rank 0's training time), test accuracy, and each run's samples/s against
# BSP's with the same workers.
#   bench/consistency.sh [BUILD_DIR] [EPOCHS]
set -euo pipefail
build=${1:-build} epochs=${2:-3}
run() {  # MODE SLOW_MS JITTER_MS: prints "SAMPLES_PER_S ACCURACY MS_PER_STEP" of one job
  local out
  out=$("$build/bin/een-launch" --ps 2 --workers 4 --consistency "$1" -- \
    "$build/bin/fashion_mnist" --epochs "$epochs" --slow-rank 1 --slow-ms "$2" \
    --jitter-ms "$3" 2>&1) ||
    { echo "$out" >&2; exit 1; }
  echo "$(sed -n 's/.*images in [0-9.]* s: \([0-9]*\) samples\/s.*/\1/p' <<<"$out") \
$(sed -n 's/.*test accuracy: \([0-9.]*\)%.*/\1/p' <<<"$out") \
$(sed -n 's/.*mean step time: \([0-9.]*\) ms.*/\1/p' <<<"$out")"
}
declare -A rate acc
step_ms=0  # the equal BSP run's time per step: the slowed worker's sleep
for workers in equal slowed jitter; do
  slow=0 jitter=0
  if [ "$workers" = slowed ]; then slow=$step_ms; fi
  if [ "$workers" = jitter ]; then jitter=$((4 * step_ms)); fi
  for mode in bsp ssp:2 async; do
    read -r r a ms < <(run "$mode" "$slow" "$jitter")
    rate[$workers/$mode]=$r acc[$workers/$mode]=$a
    echo "$workers: slow $slow ms, jitter $jitter ms, $mode: $r samples/s, test accuracy $a%"
    if [ "$workers/$mode" = equal/bsp ]; then step_ms=$(printf '%.0f' "$ms"); fi
  done
done
echo
printf '%-8s %-6s %12s %10s %9s\n' workers mode samples/s "vs bsp" accuracy
for workers in equal slowed jitter; do
  for mode in bsp ssp:2 async; do
    printf '%-8s %-6s %12s %9.2fx %8s%%\n' "$workers" "$mode" "${rate[$workers/$mode]}" \
      "$(awk "BEGIN {print ${rate[$workers/$mode]} / ${rate[$workers/bsp]}}")" \
      "${acc[$workers/$mode]}"
  done
done
