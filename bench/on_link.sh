#!/usr/bin/env bash
# Runs a command (een-bench replay, usually) in a network namespace of its
# own whose loopback is limited to RATE by a token-bucket filter (tc tbf),
# so every process of the run talks over a bandwidth-bound link, as on a
# real network, instead of memory-bound loopback. Every role and every
# reference of the run shares that one link in both directions.
#
#   bench/on_link.sh 10gbit build/bin/een-bench replay samples/traces/resnet50.trace --ps 1 --workers 1
#
# Needs root (unshare -n) and iproute2's tc (Debian: iproute2).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 RATE COMMAND [ARGS...]   (RATE as tc writes it: 10gbit, 25gbit, 800mbit)" >&2
  exit 2
fi
rate=$1
shift
command -v tc > /dev/null || { echo "$0: needs tc (apt-get install iproute2)" >&2; exit 2; }
exec unshare --net -- bash -c '
  set -euo pipefail
  ip link set lo up
  tc qdisc add dev lo root tbf rate "$0" burst 4mb latency 50ms
  echo "link: loopback in a new network namespace, $(tc qdisc show dev lo | head -1)"
  exec "$@"' "$rate" "$@"
