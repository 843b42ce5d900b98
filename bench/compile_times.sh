#!/usr/bin/env bash
# compile_times.sh BUILD_DIR [TOP] [-- TARGET...]: builds this checkout from
# scratch into BUILD_DIR (Release, tests on, as the README's test command
# does) through a compiler launcher that logs each translation unit's
# compile time, then prints the build's wall time, the summed compile time,
# the share of the units that include LibTorch headers, and the TOP slowest
# units (default 20). With targets after `--`, builds only those.
# BUILD_DIR is removed first: give a folder of its own (e.g. /tmp/ct).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [TOP] [-- TARGET...]" >&2
  exit 2
fi
build=$1
shift
top=20
if [[ $# -gt 0 && $1 != "--" ]]; then
  top=$1
  shift
fi
targets=()
if [[ $# -gt 0 && $1 == "--" ]]; then
  shift
  for t in "$@"; do targets+=(--target "$t"); done
fi
source_dir=$(cd "$(dirname "$0")/.." && pwd)
case $build in
  "" | / | "$source_dir" | "$source_dir"/*)
    echo "$0: BUILD_DIR must be a folder of its own outside the checkout" >&2
    exit 2
    ;;
esac
rm -rf "$build"
mkdir -p "$build"
build=$(cd "$build" && pwd)
log=$build/compile-times.log
launcher=$build/time-compile.sh
# The launcher: runs the compiler and appends "SECONDS OUTPUT [torch]".
cat > "$launcher" <<'EOF'
#!/usr/bin/env bash
out="" prev=""
for a in "$@"; do
  [[ $prev == "-o" ]] && out=$a
  prev=$a
done
start=$(date +%s%N)
"$@"
rc=$?
end=$(date +%s%N)
torch=""
[[ -f $out.d ]] && grep -q "torch/csrc\|/ATen/" "$out.d" && torch=" torch"
echo "$(( (end - start) / 1000000 )) $out$torch" >> "${EEN_COMPILE_LOG:?}"
exit $rc
EOF
chmod +x "$launcher"
export EEN_COMPILE_LOG=$log
start=$(date +%s)
cmake -S "$source_dir" -B "$build" -DCMAKE_BUILD_TYPE=Release -DEEN_BUILD_TESTS=ON \
  -DEEN_WERROR=ON -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" > "$build/configure.log"
cmake --build "$build" -j2 "${targets[@]}" > "$build/build.log"
end=$(date +%s)
awk -v wall=$((end - start)) '
  { total += $1; if ($3 == "torch") { torch += $1; nt++ } }
  END {
    printf "build (configure and compile, -j2): %d s wall\n", wall
    printf "compiling: %d units, %.0f s in all; the %d that include LibTorch headers: %.0f s (%.0f %%)\n",
           NR, total / 1000, nt, torch / 1000, total ? 100 * torch / total : 0
  }' "$log"
sort -rn "$log" | head -n "$top" | awk '{ printf "%6.1f s  %s\n", $1 / 1000, $2 }'
