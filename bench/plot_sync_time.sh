#!/bin/bash
# Sync time per step against layout (PS x workers) and wire dtype, for one
# trace, through the runtime only (een-bench replay --no-references), then
# a plot with gnuplot (Debian: apt-get install gnuplot-nox).
#
#   bench/plot_sync_time.sh BUILD_DIR [TRACE] [OUT_DIR]
#
# Writes OUT_DIR/sync_time.dat (ps workers dtype median_ms p10_ms p90_ms)
# and OUT_DIR/sync_time.svg. Defaults: samples/traces/resnet50.trace, bench/.
set -euo pipefail
build=${1:?usage: plot_sync_time.sh BUILD_DIR [TRACE] [OUT_DIR]}
here=$(cd "$(dirname "$0")" && pwd)
trace=${2:-$here/../samples/traces/resnet50.trace}
out=${3:-$here}
layouts=${LAYOUTS:-"1x1 1x2 2x2 2x4 4x4"}
dtypes=${DTYPES:-"fp32 bf16"}
steps=${STEPS:-8}
dat=$out/sync_time.dat
echo "# ps workers dtype median_ms p10_ms p90_ms  ($(basename "$trace"), $steps steps, $(date -u +%F))" > "$dat"
for layout in $layouts; do
  ps=${layout%x*}; workers=${layout#*x}
  for dtype in $dtypes; do
    line=$("$build/bin/een-bench" replay "$trace" --ps "$ps" --workers "$workers" --steps "$steps" \
             --warmup 2 --dtype "$dtype" --no-references | grep '^een push+pull')
    read -r _ _ median p10 p90 _ <<< "$line"
    echo "$ps $workers $dtype $median $p10 $p90" | tee -a "$dat"
  done
done
command -v gnuplot > /dev/null || { echo "gnuplot not found: apt-get install gnuplot-nox"; exit 1; }
# One data block per dtype (gnuplot's index), x = the layout's label.
blocks=$(mktemp)
trap 'rm -f "$blocks"' EXIT
for dtype in $dtypes; do
  awk -v d="$dtype" '$3 == d { print $1 "x" $2, $4, $5, $6 }' "$dat" >> "$blocks"
  printf '\n\n' >> "$blocks"
done
titles=($dtypes)
gnuplot <<PLOT
set terminal svg size 720,420 dynamic font "sans,12"
set output "$out/sync_time.svg"
set title "een push+pull sync time per step, $(basename "$trace" .trace) (median, p10-p90)"
set ylabel "ms per step"
set xlabel "PS x workers"
set yrange [0:*]
set key top left
titles = "${titles[*]}"
plot for [i=0:${#titles[@]}-1] "$blocks" index i using 0:2:3:4:xticlabels(1) \
     with yerrorlines title word(titles, i+1)
PLOT
echo "wrote $dat and $out/sync_time.svg"
