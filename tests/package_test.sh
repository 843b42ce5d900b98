#!/usr/bin/env bash
# The installed package as a user meets it: `cmake --install` into a
# temporary prefix, then, using only that prefix,
#   1. a user's program (tests/package) with its five-line CMakeLists.txt
#      (find_package(EEN), EEN::worker) and 2. with pkg-config (een.pc);
#   3. the samples, built out of tree from PREFIX/share/een/samples;
#   4. `import een` from PREFIX's Python folder;
# each run as a job under the installed een-launch.
# Usage: package_test.sh BUILD_DIR SOURCE_DIR PYTHON
set -euo pipefail
build=$1 source=$2 python=${3:-python3}
work=$(mktemp -d /tmp/een-package-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo "== $*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
launch=("$prefix/bin/een-launch" --ps 1 --workers 2 --)
expect_agreement() {  # the workers' result lines: two, and equal but for the rank
  local lines; lines=$(grep -o 'worker [0-9]: w .*' "$1" | sed 's/worker [0-9]: //' | sort -u)
  if [[ $(grep -c 'worker [0-9]: w ' "$1") != 2 || $(wc -l <<<"$lines") != 1 ]]; then
    echo "FAIL: the two workers did not both finish with the same parameters:"; cat "$1"; exit 1
  fi
  echo "   both workers: $lines"
}

step "a user's program: find_package(EEN) (tests/package/CMakeLists.txt)"
cmake -S "$source/tests/package" -B "$work/user" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/user.log"
cmake --build "$work/user" >>"$work/user.log"
"${launch[@]}" "$work/user/train" >"$work/user.out" 2>&1 || { cat "$work/user.out"; exit 1; }
expect_agreement "$work/user.out"

step "the same program with pkg-config --cflags --libs een"
pcdir=$(dirname "$(find "$prefix" -name een.pc)")
# shellcheck disable=SC2046
c++ -O0 "$source/tests/package/train.cc" -o "$work/train-pc" \
  $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs een)
"${launch[@]}" "$work/train-pc" >"$work/pc.out" 2>&1 || { cat "$work/pc.out"; exit 1; }
expect_agreement "$work/pc.out"

step "the samples, out of tree from $prefix/share/een/samples"
cmake -S "$prefix/share/een/samples" -B "$work/samples" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/samples.log"
cmake --build "$work/samples" --target fashion_mnist >>"$work/samples.log"
"${launch[@]}" "$work/samples/bin/fashion_mnist" --epochs 1 --train-limit 2000 \
  --test-limit 500 >"$work/sample.out" 2>&1 || { cat "$work/sample.out"; exit 1; }
grep -q 'test accuracy: ' "$work/sample.out" || { cat "$work/sample.out"; exit 1; }
grep 'test accuracy' "$work/sample.out"

if [[ -n "$(find "$prefix" -name '_een*.so')" ]]; then
  step "import een from the installed Python folder"
  pydir=$(dirname "$(dirname "$(find "$prefix" -name '_een*.so')")")
  PYTHONPATH=$pydir "${launch[@]}" "$python" "$source/tests/python/train_mlp.py" --steps 5 \
    --workers 2 --out "$work/py.bin" >"$work/py.out" 2>&1 || { cat "$work/py.out"; exit 1; }
  [[ $(stat -c %s "$work/py.bin") -gt 4000 ]] || { echo "FAIL: no parameters"; exit 1; }
  grep -q 'job finished: 2 of 2 workers succeeded' "$work/py.out"
  echo "   the Python job finished"
fi
step "cpack -G DEB: the Debian package holds the same files, for /usr"
cpack -G DEB -B "$work/deb" --config "$build/CPackConfig.cmake" >"$work/cpack.log" \
  || { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/deb/een_*.deb)
contents=$(dpkg-deb -c "$deb")
for file in usr/bin/een-launch usr/bin/een-ps usr/bin/een-coordinator usr/bin/een-c10d-store usr/bin/eenctl usr/bin/een-export \
            usr/include/een/data_parallel.h usr/lib/cmake/EEN/EENConfig.cmake \
            usr/lib/pkgconfig/een.pc usr/lib/libeen_worker.so \
            usr/share/een/samples/CMakeLists.txt; do
  grep -q " ./$file\$" <<<"$contents" || { echo "FAIL: $(basename "$deb") lacks /$file"; exit 1; }
done
dpkg-deb -f "$deb" Depends | grep -q 'libtorch-dev' \
  || { echo "FAIL: $(basename "$deb") does not depend on libtorch-dev"; exit 1; }
echo "   $(basename "$deb"): $(grep -c . <<<"$contents") entries, depends on $(dpkg-deb -f "$deb" Depends | cut -c1-60)..."
echo "PASS"
