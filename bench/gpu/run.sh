#!/usr/bin/env bash
# bench/gpu/run.sh: the GPU check of issue 16 in one call, on a machine with
# an NVIDIA GPU, a Python whose torch has CUDA (its LibTorch is what EEN
# builds against) and a C++ compiler, but none of EEN's Debian libraries and
# no network. Here, beforehand: bench/gpu/fetch_deps.sh build-gpu-deps; carry
# build-gpu-deps with the working tree. There:
#   bench/gpu/run.sh build-gpu-deps OUT_DIR
# It unpacks the packages, builds EEN against the pip LibTorch (CUDA on:
# pinned buckets), and measures, writing everything under OUT_DIR:
#   1. equivalence on CUDA: 4 workers on the one GPU vs one process with the
#      global batch (SGD and Adam; the goal: max abs difference <= 1e-5);
#   2. ResNet-50 (synthetic data, batch 32 per worker, Adam), 4 workers on
#      the one GPU: EEN over shm and over tcp against torch DDP with NCCL and
#      gloo, and the same 4 processes with no communication (the baseline
#      the sync time per batch is taken against); a bf16 EEN run;
#   3. peak GPU memory per worker: EEN (Adam on the PS) vs DDP + torch Adam.
# EEN_GPU_CHECK_DEVICE=cpu runs the same flow on the CPU with tiny sizes (a
# check of the script itself, on a machine without a GPU).
set -euo pipefail
deps=$(cd "$1" && pwd) out=$(mkdir -p "$2" && cd "$2" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
device=${EEN_GPU_CHECK_DEVICE:-cuda}
python=${PYTHON:-python3}
work=${EEN_GPU_WORK:-/tmp/een-gpu-check}
jobs=$(nproc)
mkdir -p "$work" "$out/logs"
log() { echo "== $(date +%T) $*" | tee -a "$out/summary.txt"; }
exec > >(tee -a "$out/run.log") 2>&1

log "machine: $(nproc) cores; $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
$python -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" | tee -a "$out/summary.txt"
if [[ $device == cuda* ]] && ! $python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  log "FAIL: $python's torch sees no CUDA device"; exit 1
fi
torch_prefix=$($python -c 'import torch; print(torch.utils.cmake_prefix_path)')

log "unpacking $(ls "$deps"/debs/*.deb | wc -l) Debian packages"
root=$work/root
rm -rf "$root" && mkdir -p "$root"
$python "$src/bench/gpu/unpack_debs.py" "$deps/debs" "$root" >> "$out/logs/unpack.log"
# Only the carried libraries this system lacks go on LD_LIBRARY_PATH (its
# own libssl, krb5, ... stay its own).
missing=$work/missing-libs
rm -rf "$missing" && mkdir -p "$missing"
for lib in "$root"/usr/lib/x86_64-linux-gnu/lib*.so.* "$root"/lib/x86_64-linux-gnu/lib*.so.*; do
  [[ -e $lib ]] || continue
  name=$(basename "$lib")
  ldconfig -p 2>/dev/null | grep -q " $name " || ln -sf "$lib" "$missing/$name"
done
export LD_LIBRARY_PATH=$missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PATH:$root/usr/bin  # the system's cmake, make, pkg-config first; capnp from here
export PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_LIBDIR=$root/usr/lib/x86_64-linux-gnu/pkgconfig:$root/usr/share/pkgconfig
cmake_version=$(cmake --version 2>/dev/null | head -1 | grep -o '[0-9][0-9.]*' || echo 0)
log "cmake $cmake_version ($(command -v cmake)), $(c++ --version | head -1), nvcc: $(command -v nvcc || echo none)"

log "configuring EEN against $torch_prefix"
build=$work/build
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix;$root/usr" \
  -DEEN_WITH_PYTHON=OFF -DEEN_BUILD_TESTS=ON -DEEN_BUILD_SAMPLES=ON \
  -DCapnProto_DIR="$root/usr/lib/x86_64-linux-gnu/cmake/CapnProto" \
  -DCAPNP_EXECUTABLE="$root/usr/bin/capnp" -DCAPNPC_CXX_EXECUTABLE="$root/usr/bin/capnpc-c++" \
  -DCAPNP_INCLUDE_DIRECTORY="$root/usr/include" \
  -DCMAKE_CXX_FLAGS="-idirafter $root/usr/include/x86_64-linux-gnu" \
  > "$out/logs/configure.log" 2>&1 || { tail -40 "$out/logs/configure.log"; log "FAIL: configure"; exit 1; }
grep "EEN:" "$out/logs/configure.log" | tee -a "$out/summary.txt"
log "building"
cmake --build "$build" -j"$jobs" --target een-launch een-ps een-coordinator equivalence_train \
  resnet_step gradient_stager_test > "$out/logs/build.log" 2>&1 \
  || { grep -E "error|Error" "$out/logs/build.log" | head -30; log "FAIL: build"; exit 1; }
bin=$build/bin
"$bin/gradient_stager_test" > "$out/logs/gradient_stager_test.log" 2>&1 \
  && log "gradient_stager_test: passed" || log "gradient_stager_test: FAILED (logs/gradient_stager_test.log)"

if [[ $device == cpu ]]; then sizes=(--batch 2 --steps 2 --warmup 1); else sizes=(--batch 32 --steps 20 --warmup 5); fi
launch=("$bin/een-launch" --ps 2 --workers 4 --progress-interval 10s)

log "1. equivalence on $device: 4 workers on one device vs one process with the global batch"
for opt in sgd adam; do
  "${launch[@]}" -- "$bin/equivalence_train" --device "$device" --optimizer "$opt" \
    --out "$work/eq-$opt.bin" > "$out/logs/equivalence-$opt.log" 2>&1 || { log "FAIL: equivalence job ($opt)"; continue; }
  "$bin/equivalence_train" --reference --workers 4 --device "$device" --optimizer "$opt" \
    --out "$work/ref-$opt.bin" >> "$out/logs/equivalence-$opt.log" 2>&1
  $python - "$work/eq-$opt.bin" "$work/ref-$opt.bin" "$opt" <<'PY' | tee -a "$out/summary.txt"
import sys, numpy
a, b = (numpy.fromfile(p, dtype=numpy.float32) for p in sys.argv[1:3])
d = float(numpy.abs(a - b).max()) if a.size == b.size and a.size else float("inf")
print("   %s: max abs difference %.3e over %d parameters: %s" % (sys.argv[3], d, a.size, "PASS" if d <= 1e-5 else "FAIL"))
PY
done

log "2./3. ResNet-50 on $device, 4 processes: EEN (shm, tcp, bf16) vs DDP (nccl, gloo) vs no communication"
figures() {  # the figure lines of the logs; none is no error (the failure was said)
  grep -h "resnet50 .* rank" "$@" | sed 's/^\[worker [0-9]*\] //' || true
}
run_een() {  # label, transport, extra options
  local label=$1 transport=$2; shift 2
  "${launch[@]}" --transport "$transport" -- "$bin/resnet_step" --device "$device" --label "$label" \
    "${sizes[@]}" "$@" > "$out/logs/$label.log" 2>&1 || log "FAIL: $label (logs/$label.log): $(tail -1 "$out/logs/$label.log")"
  figures "$out/logs/$label.log" | tee -a "$out/summary.txt"
}
run_ddp() {  # backend
  timeout 300 $python "$src/bench/gpu/ddp_resnet.py" --backend "$1" --world 4 --device "$device" \
    "${sizes[@]}" > "$out/logs/ddp-$1.log" 2>&1 || log "ddp $1 failed: $(grep -m1 -iE 'error|duplicate' "$out/logs/ddp-$1.log" | cut -c1-300)"
  figures "$out/logs/ddp-$1.log" | tee -a "$out/summary.txt"
}
run_ddp none
run_een een-shm shm
run_een een-tcp tcp
run_ddp nccl
run_ddp gloo
[[ $device == cpu ]] || run_een een-shm-bf16 shm --dtype bfloat16  # bf16 parameters: on a GPU only
"$bin/resnet_step" --device "$device" --local --label local-adam "${sizes[@]}" > "$out/logs/local.log" 2>&1 || true
figures "$out/logs/local.log" | tee -a "$out/summary.txt"

log "sync time per batch: median step minus the no-communication baseline's (rank medians)"
$python - "$out/summary.txt" <<'PY' | tee -a "$out/summary.txt"
import re, sys, statistics
steps, memory = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"\s*resnet50 (\S+) rank \d+ of \d+: step ([0-9.]+) ms.*peak GPU memory allocated (-?[0-9]+) MB", line)
    if m:
        steps.setdefault(m[1], []).append(float(m[2]))
        memory.setdefault(m[1], []).append(float(m[3]))
base = statistics.median(steps["ddp-none"]) if "ddp-none" in steps else None
for label in sorted(steps):
    step = statistics.median(steps[label])
    sync = "%.1f ms" % (step - base) if base is not None and label not in ("ddp-none", "local-adam") else "-"
    print("   %-14s step %7.1f ms   sync per batch %10s   peak GPU memory per worker %6.0f MB" % (label, step, sync, max(memory[label])))
PY
log "done: $out/summary.txt"
