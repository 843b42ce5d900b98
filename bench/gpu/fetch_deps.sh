#!/usr/bin/env bash
# fetch_deps.sh: downloads (here, on Debian 12, with apt) the Debian packages
# EEN builds with, for a GPU machine that has a CUDA LibTorch but neither
# these libraries nor a network: bench/gpu/run.sh unpacks them there.
#   bench/gpu/fetch_deps.sh [DIR]     (default: build-gpu-deps; ~40 MB of .deb)
# Then carry DIR with the working tree (the device tool's `carry`).
set -euo pipefail
dir=${1:-build-gpu-deps}
mkdir -p "$dir/debs"
# What EEN's CMakeLists.txt finds, the tests' GoogleTest (bench/gpu builds
# test programs), and cmake, make and pkg-config in case the machine lacks them.
wanted="libzmq3-dev libsodium-dev cppzmq-dev capnproto libcapnp-dev librocksdb-dev libgflags-dev
  libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  zlib1g-dev libgtest-dev libgmock-dev pkgconf cmake make"
# Every dependency, less what any glibc system has (and must keep its own of).
base='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libgcc-s1|libstdc\+\+6|gcc-12-base|perl.*|libperl.*|dpkg|tar|usrmerge|usr-is-merged|init-system-helpers|procps|libproc2-0|libselinux1|libsystemd0|libelogind0|libcrypt1|libcrypt-dev|libacl1|libcap2|libpcre2-8-0|libtinfo6|libncursesw6|libdb5.3|libgdbm.*|lib.*-perl|libicu.*|icu-devtools|libxml2.*|libnsl.*|libtirpc.*|rpcsvc-proto|libkrb5-dev|krb5-multidev|comerr-dev|libgssrpc4|libkadm5.*|libkdb5-10|catch2)$'
# shellcheck disable=SC2086
apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances $wanted | grep '^[a-z0-9]' | sort -u | grep -Ev "$base" \
  > "$dir/packages.txt"
(cd "$dir/debs" && xargs apt-get download -q < ../packages.txt)
echo "$(wc -l < "$dir/packages.txt") packages, $(du -sh "$dir/debs" | cut -f1) in $dir/debs"
