#!/usr/bin/env bash
# consistency: BSP against BSP with --dynamic-slicing auto, ssp:2, ssp:2 with
# --dynamic-slicing auto ("ssp:2+auto") and async
# on Fashion-MNIST (2 PS, 4 workers x batch 32, Adam, EPOCHS epochs),
# measured in one run:
#   equal:     four equal workers;
#   halfspeed: worker 1 at half speed: each of its samples costs 1/32 of
#              the equal BSP run's step time more (it sleeps that per sample
#              after backward: fashion_mnist --slow-rank 1
#              --slow-ms-per-sample X/32; a slower machine, whose cost
#              follows its share of the batch);
#   machines:  as on separate machines: every worker's samples cost X/32
#              more on "an accelerator of its own" (a sleep, which takes no
#              core from the others: --device-ms-per-sample X/32), so the
#              two cores are no longer the whole job's bottleneck; a BSP run
#              of four such equal workers measures their step time Y, then
#              worker 1's samples cost Y/32 more (--slow-ms-per-sample):
#              half speed;
#   slowed:    worker 1 sleeps, before each step, the mean step time the
#              equal BSP run measured (--slow-ms X: a fixed cost per step,
#              which no slicing of the batch can shorten);
#   jitter:    every worker sleeps 4X before a random quarter of its steps
#              (--jitter-ms 4X: stragglers that come and go).
# Under ssp/async the workers deal the batches out (DataParallel::NextBatch);
# with slicing they take their slices of each step's global batch; either way
# every run trains the same number of samples. Prints samples/s (the whole
# job's: EPOCHS x 60000 over rank 0's training time), rank 0's mean step
# time (over the whole run, and over its last epoch: with slicing, once the
# shares have settled), test accuracy, and each run's samples/s against
# BSP's with the same workers and its step times against four equal
# workers' BSP step times (for "machines", four equal such machines').
# Under ssp/async rank 0's steps are its own, not the job's: compare their
# samples/s.
#   bench/consistency.sh [BUILD_DIR] [EPOCHS]
set -euo pipefail
build=${1:-build} epochs=${2:-3}
modes="bsp auto ssp:2 ssp:2+auto async"
# SETTINGS="equal machines" runs only those (equal always runs first).
settings=${SETTINGS:-equal halfspeed machines slowed jitter}
case " $settings " in *" equal "*) ;; *) settings="equal $settings" ;; esac
run() {  # MODE SLOW_MS JITTER_MS SLOW_MS_PER_SAMPLE DEVICE_MS_PER_SAMPLE: prints "SAMPLES_PER_S ACCURACY MS_PER_STEP LAST_EPOCH_MS_PER_STEP"
  local out consistency=$1 slicing=off
  if [ "$1" = auto ]; then consistency=bsp slicing=auto; fi
  if [ "${1%+auto}" != "$1" ]; then consistency=${1%+auto} slicing=auto; fi
  out=$("$build/bin/een-launch" --ps 2 --workers 4 --consistency "$consistency" \
    --dynamic-slicing "$slicing" -- \
    "$build/bin/fashion_mnist" --epochs "$epochs" --slow-rank 1 --slow-ms "$2" \
    --jitter-ms "$3" --slow-ms-per-sample "$4" --device-ms-per-sample "$5" 2>&1) ||
    { echo "$out" >&2; exit 1; }
  echo "$(sed -n 's/.*images in [0-9.]* s: \([0-9]*\) samples\/s.*/\1/p' <<<"$out") \
$(sed -n 's/.*test accuracy: \([0-9.]*\)%.*/\1/p' <<<"$out") \
$(sed -n 's/.*mean step time: \([0-9.]*\) ms.*/\1/p' <<<"$out") \
$(sed -n 's/.*epoch [0-9]* done: .*, \([0-9.]*\) ms a step.*/\1/p' <<<"$out" | tail -1 | grep . || echo -)"
}
ratio() {  # A B: A / B as "1.23x", or "-" (ssp/async runs have no epoch lines)
  if [ "$1" = - ] || [ "$2" = - ]; then echo -; else awk "BEGIN {printf \"%.2fx\", $1 / $2}"; fi
}
declare -A rate acc step last
# Steps are compared with four equal workers' BSP step (equal/bsp, the
# first run), for "machines" with four equal machines' (equal_machines).
equal_machines=- equal_machines_last=-
for workers in $settings; do
  slow=0 jitter=0 per_sample=0 device=0
  step_ms=${step[equal/bsp]:-0}  # the equal BSP run's time per step (equal runs first)
  if [ "$workers" = halfspeed ]; then per_sample=$(awk "BEGIN {print $step_ms / 32}"); fi
  if [ "$workers" = machines ]; then
    device=$(awk "BEGIN {print $step_ms / 32}")
    read -r r a equal_machines equal_machines_last < <(run bsp 0 0 0 "$device")
    echo "machines: four equal workers: bsp: $r samples/s, $equal_machines ms/step ($equal_machines_last in the last epoch), test accuracy $a%"
    per_sample=$(awk "BEGIN {print $equal_machines / 32}")
  fi
  if [ "$workers" = slowed ]; then slow=$(printf '%.0f' "$step_ms"); fi
  if [ "$workers" = jitter ]; then jitter=$(printf '%.0f' "$(awk "BEGIN {print 4 * $step_ms}")"); fi
  for mode in $modes; do
    read -r r a ms lm < <(run "$mode" "$slow" "$jitter" "$per_sample" "$device")
    rate[$workers/$mode]=$r acc[$workers/$mode]=$a step[$workers/$mode]=$ms last[$workers/$mode]=$lm
    echo "$workers: $mode: $r samples/s, $ms ms/step ($lm in the last epoch), test accuracy $a%"
  done
done
echo
printf '%-10s %-10s %10s %8s %9s %9s %12s %12s %9s\n' workers mode samples/s "vs bsp" ms/step \
  "last ep." "vs equal" "(last ep.)" accuracy
for workers in $settings; do
  base=${step[equal/bsp]} base_last=${last[equal/bsp]}
  if [ "$workers" = machines ]; then base=$equal_machines base_last=$equal_machines_last; fi
  for mode in $modes; do
    printf '%-10s %-10s %10s %8s %9s %9s %12s %12s %8s%%\n' "$workers" "$mode" \
      "${rate[$workers/$mode]}" "$(ratio "${rate[$workers/$mode]}" "${rate[$workers/bsp]}")" \
      "${step[$workers/$mode]}" "${last[$workers/$mode]}" \
      "$(ratio "${step[$workers/$mode]}" "$base")" \
      "$(ratio "${last[$workers/$mode]}" "$base_last")" \
      "${acc[$workers/$mode]}"
  done
done
echo "(vs equal: against four equal workers' BSP step; for machines, four equal machines')"
