#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SEEDS ARTIFACTS SECONDS [SEED]
# Runs every input in SEEDS once (the seeds and the regression inputs: each
# crash found so far is kept there), then fuzzes for SECONDS from them. New
# inputs go to a scratch folder, never into SEEDS. Exits non-zero on any
# crash, leak, sanitizer report, hang (10 s per input) or allocation over
# 1 GiB; the input that did it is left as ARTIFACTS/NAME-crash-... (add it to
# SEEDS, with a regression test, once fixed).
set -euo pipefail
fuzzer=$1 seeds=$2 artifacts=$3 seconds=$4 seed=${5:-0}
name=$(basename "$fuzzer")
mkdir -p "$artifacts"
# The targets that keep files (RocksDB, configs) keep them in memory if they can.
if [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$fuzzer" -seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 -malloc_limit_mb=1024 \
  -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "$scratch" "$seeds"
