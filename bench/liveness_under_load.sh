#!/bin/bash
# Failure detection on a busy machine: how often a live process is declared
# lost (a false loss), and how soon a hung one is.
#
#   bench/liveness_under_load.sh BUILD_DIR [ROUNDS] [HOGS]
#
# For each liveness mode (een-launch --liveness fixed, then adaptive; set
# MODES="default" to pass no --liveness flag, for a build from before it
# existed) and each round, HOGS busy loops run beside the job (default 4 on this 2-core
# machine) while:
#  - false losses: the mission's layout, `--ps 4 --workers 32 --replicas 2`
#    on fashion_mnist (1 epoch of 32000 images, batch 16), with one PS
#    SIGKILLed 8 s after the start (een-launch sees that exit: nobody has to
#    be declared lost by silence). Any "silent for" line names a live process
#    declared lost: a false loss (but for the warning that gives a process
#    still running on this host more time: slow, not lost; counted apart).
#    The round counts as failed if the job does not exit 0;
#  - detection: `--ps 2 --workers 2 --replicas 2`, ps 1 SIGSTOPped once the
#    job trains (hung, so only its silence tells): the time from the signal
#    to the coordinator's "silent for" line (log timestamps, ms).
# Prints each round, then per mode: false losses / rounds, failed jobs, and
# the median (min, max) detection time. Run as root, the heartbeat threads
# get a higher priority (nice -10); as another user (e.g. `setpriv --reuid
# nobody --regid nogroup --clear-groups bench/liveness_under_load.sh ...`)
# they run at the process's, as for most users.
set -euo pipefail
build=${1:?usage: liveness_under_load.sh BUILD_DIR [ROUNDS] [HOGS]}
rounds=${2:-5}
hogs=${3:-4}
work=$(mktemp -d)
hog_pids=()
stop_hogs() {
  for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  hog_pids=()
}
trap 'stop_hogs; rm -rf "$work"' EXIT

ms_of() {  # HH:MM:SS.mmm -> milliseconds since midnight
  local t=$1
  IFS=:. read -r h m s ms <<<"$t"
  echo $(( (10#$h * 3600 + 10#$m * 60 + 10#$s) * 1000 + 10#$ms ))
}
start_hogs() {
  for ((h = 0; h < hogs; h++)); do
    (while :; do :; done) &
    hog_pids+=($!)
  done
}

for mode in ${MODES:-fixed adaptive}; do
  flag=(--liveness "$mode")
  [ "$mode" = default ] && flag=()
  false_losses=0
  failed=0
  times=()
  for ((i = 1; i <= rounds; i++)); do
    log=$work/$mode-load-$i.log
    start_hogs
    "$build/bin/een-launch" --ps 4 --workers 32 --replicas 2 "${flag[@]}" -- \
      "$build/bin/fashion_mnist" --epochs 1 --train-limit 32000 --batch-size 16 >"$log" 2>&1 &
    job=$!
    sleep 8
    pid=$(grep -oP "registered ps 3 \(host [^,]+, pid \K[0-9]+" "$log" | head -1 || true)
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
    rc=0
    wait "$job" || rc=$?
    stop_hogs
    # A live process given more time ("... still runs on its host (a busy
    # machine?): it gets up to ...") is slow, not lost.
    n=$(grep "silent for" "$log" | grep -Fvc "(a busy machine?)" || true)
    slow=$(grep "silent for" "$log" | grep -Fc "(a busy machine?)" || true)
    [ "$n" -gt 0 ] && false_losses=$((false_losses + 1))
    [ "$rc" -ne 0 ] && failed=$((failed + 1))
    echo "$mode round $i: 4 PS x 32 workers, ps 3 killed: exit $rc, $n live process(es) declared lost, $slow given time as slow"
    grep "silent for" "$log" | grep -Fv "(a busy machine?)" | head -2 | cut -c1-220 || true
    [ "$rc" -ne 0 ] && grep "E coordinator\|job failed" "$log" | head -3 | cut -c1-300

    log=$work/$mode-stop-$i.log
    start_hogs
    "$build/bin/een-launch" --ps 2 --workers 2 --replicas 2 "${flag[@]}" \
      --progress-interval 200ms -- "$build/bin/fashion_mnist" --epochs 3 --train-limit 60000 \
      --batch-size 16 >"$log" 2>&1 &
    job=$!
    until grep -q "progress: step" "$log"; do sleep 0.05; done
    sleep "0.$((RANDOM % 9 + 1))"
    pid=$(grep -oP "registered ps 1 \(host [^,]+, pid \K[0-9]+" "$log" | head -1)
    at=$(date +%H:%M:%S.%3N)
    kill -STOP "$pid"
    lost_line() { grep "ps 1 .*silent for" "$log" | grep -Fv "(a busy machine?)" | head -1; }
    until [ -n "$(lost_line)" ] || ! kill -0 "$job" 2>/dev/null; do sleep 0.02; done
    seen=$(lost_line | grep -oP "\d\d:\d\d:\d\d\.\d\d\d" | head -1 || true)
    kill -KILL "$pid" 2>/dev/null || true
    stop_hogs
    kill -INT "$job" 2>/dev/null || true  # measured: no need to train on
    wait "$job" || true
    if [ -z "$seen" ]; then
      echo "$mode round $i: the hung ps 1 was never declared lost"
      continue
    fi
    d=$(( $(ms_of "$seen") - $(ms_of "$at") ))
    times+=("$d")
    echo "$mode round $i: hung ps 1 declared lost $d ms after SIGSTOP"
  done
  sorted=($(printf '%s\n' "${times[@]}" | sort -n))
  n=${#sorted[@]}
  echo "== $mode, $hogs hogs: false losses in $false_losses of $rounds jobs, $failed failed;" \
       "detection of a hung PS: median ${sorted[$((n / 2))]} ms (min ${sorted[0]}, max ${sorted[$((n - 1))]}) over $n"
done
