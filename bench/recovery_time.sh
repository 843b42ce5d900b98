#!/bin/bash
# Time from losing a PS to training again, with two replicas of each shard.
#
#   bench/recovery_time.sh BUILD_DIR [ROUNDS] [kill|stop]
#
# Each round starts `een-launch --ps 3 --workers 2 --replicas 2` on the
# equivalence model, waits until it trains, then at a random moment either
# SIGKILLs ps 1 (een-launch sees the exit and starts a replacement, whose
# registration triggers the failover at once) or SIGSTOPs it (nobody sees an
# exit: the coordinator must notice the silence, failover threshold 500 ms;
# the stopped process is killed afterwards). The time is from the signal to
# the first worker's "new primaries" log line (log timestamps, ms), i.e.
# until the workers send the step's gradients to the promoted backups.
# Prints each round and the median.
set -euo pipefail
build=${1:?usage: recovery_time.sh BUILD_DIR [ROUNDS] [kill|stop]}
rounds=${2:-10}
mode=${3:-kill}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ms_of() {  # HH:MM:SS.mmm -> milliseconds since midnight
  local t=$1
  IFS=:. read -r h m s ms <<<"$t"
  echo $(( (10#$h * 3600 + 10#$m * 60 + 10#$s) * 1000 + 10#$ms ))
}

times=()
for ((i = 1; i <= rounds; i++)); do
  log=$work/job-$i.log
  "$build/bin/een-launch" --ps 3 --workers 2 --replicas 2 --progress-interval 200ms -- \
    "$build/bin/equivalence_train" --optimizer adam --steps 6000 --out "$work/out-$i.bin" \
    >"$log" 2>&1 &
  job=$!
  until grep -q "progress: step" "$log"; do sleep 0.05; done
  sleep "0.$((RANDOM % 9 + 1))"
  pid=$(grep -oP "registered ps 1 \(host [^,]+, pid \K[0-9]+" "$log" | head -1)
  at=$(date +%H:%M:%S.%3N)
  if [ "$mode" = stop ]; then kill -STOP "$pid"; else kill -KILL "$pid"; fi
  until grep -q "new primaries" "$log"; do sleep 0.02; done
  [ "$mode" = stop ] && kill -KILL "$pid"
  resumed=$(grep -m1 "new primaries" "$log" | grep -oP "\d\d:\d\d:\d\d\.\d\d\d" | head -1)
  d=$(( $(ms_of "$resumed") - $(ms_of "$at") ))
  times+=("$d")
  wait "$job" || { echo "round $i: the job failed"; tail -20 "$log"; exit 1; }
  cmp -s "$work/out-1.bin" "$work/out-$i.bin" || { echo "round $i: parameters differ"; exit 1; }
  echo "round $i ($mode): training again after $d ms"
done
sorted=($(printf '%s\n' "${times[@]}" | sort -n))
n=${#sorted[@]}
echo "median over $n rounds ($mode): ${sorted[$((n / 2))]} ms (min ${sorted[0]}, max ${sorted[$((n - 1))]})"
