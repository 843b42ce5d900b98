#!/usr/bin/env bash
# python_step_time: the Python sample's time per step against the C++
# sample's, measured in the same run: the same network, data order and
# settings (Fashion-MNIST, Adam on 2 PS, 4 workers x batch 32, 3 epochs),
# run alternately RUNS times each under een-launch. Prints every run, the
# medians and their ratio (Python / C++; the goal is <= 1.10).
#   bench/python_step_time.sh [BUILD_DIR] [RUNS] [extra sample options...]
set -euo pipefail
build=${1:-build} runs=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
run() {  # prints "MS ACCURACY" of one job
  local out
  out=$("$build/bin/een-launch" --ps 2 --workers 4 -- "$@" 2>&1) || { echo "$out" >&2; exit 1; }
  echo "$(sed -n 's/.*mean step time: \([0-9.]*\) ms.*/\1/p' <<<"$out") \
$(sed -n 's/.*test accuracy: \([0-9.]*%\).*/\1/p' <<<"$out")"
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
cpp=() py=()
for ((i = 1; i <= runs; i++)); do
  read -r ms acc < <(run "$build/bin/fashion_mnist" "$@")
  echo "run $i  C++    ${ms} ms/step  test accuracy ${acc}"; cpp+=("$ms")
  read -r ms acc < <(run "$python" "$root/samples/python/fashion_mnist.py" "$@")
  echo "run $i  Python ${ms} ms/step  test accuracy ${acc}"; py+=("$ms")
done
c=$(printf '%s\n' "${cpp[@]}" | median) p=$(printf '%s\n' "${py[@]}" | median)
echo "median: C++ ${c} ms/step, Python ${p} ms/step, Python / C++ = $(awk "BEGIN {printf \"%.3f\", $p / $c}")"
