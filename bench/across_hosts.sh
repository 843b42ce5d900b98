#!/usr/bin/env bash
# EEN across hosts on bandwidth-bound links, against gloo on the same links,
# in one run. Three simulated hosts (network namespaces on a bridge in a
# "switch" namespace); each host's link is limited to RATE in both
# directions by a token-bucket filter (tc tbf on its side and on the
# switch's port), like a NIC of that speed. Then, one after the other:
#  - EEN: a per-node een-launch on each host, 2 PS + 4 workers in all
#    (node-rank-major: host 0 runs PS 0 and workers 0-1, host 1 PS 1 and
#    worker 2, host 2 worker 3), each worker een-bench-worker replaying the
#    trace's gradients; encrypted (CURVE, the default beyond loopback),
#    per pair (the default: the workers of host 0 reach PS 0 through shared
#    memory, every other pair over tcp);
#  - the same with --transport tcp (every pair over tcp), for what the
#    per-pair choice gains;
#  - the same with --insecure (no encryption), for the cost of encryption;
#  - gloo all_reduce (torch.distributed, DDP's 25 MB buckets) with 6
#    processes, 2 per host, as many as the EEN job has.
# Prints each one's median step time and the ratios.
#
#   sudo bench/across_hosts.sh [RATE] [STEPS] [TRACE]     (default 10gbit 20 resnet50)
#
# Needs root, iproute2 (tc), a Release build in build/, and for gloo
# Debian's python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-10gbit}
steps=${2:-20}
trace=${3:-samples/traces/resnet50.trace}
warmup=3
bin=$PWD/build/bin
tag=eenx$(($$ % 100000))
subnet=10.78.$(($$ % 250))
work=$(mktemp -d /tmp/een-across-hosts-XXXXXX)
hosts=(0 1 2)

cleanup() {
  for h in "${hosts[@]}"; do
    pids=$(ip netns pids "${tag}h$h" 2> /dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2> /dev/null || true
    ip netns del "${tag}h$h" 2> /dev/null || true
  done
  ip netns del "${tag}sw" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "${tag}sw"
ip -n "${tag}sw" link add br0 type bridge
ip -n "${tag}sw" link set br0 up
for h in "${hosts[@]}"; do
  ns=${tag}h$h
  ip netns add "$ns"
  ip -n "${tag}sw" link add "port$h" type veth peer name eth0 netns "$ns"
  ip -n "${tag}sw" link set "port$h" master br0 up
  ip -n "$ns" addr add "$subnet.$((h + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # Both directions of the host's link: its own side, and the switch's port.
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 4mb latency 50ms
  ip netns exec "${tag}sw" tc qdisc add dev "port$h" root tbf rate "$rate" burst 4mb latency 50ms
done
echo "3 hosts, each link $rate both ways; trace $trace; $steps steps after $warmup warm-up"

median() { sort -n | awk '{v[NR] = $1} END {if (NR == 0) print 0; else print v[int((NR + 1) / 2)]}'; }

# EEN, with extra een-launch flags ($@): prints the median step time (us).
run_een() {
  local report=$work/een-$RANDOM
  mkdir -p "$report"
  "$bin/een-launch" --new-secret "$report/secret" > /dev/null
  local pids=()
  for h in "${hosts[@]}"; do
    ip netns exec "${tag}h$h" "$bin/een-launch" --nnodes 3 --node-rank "$h" \
      --rdzv "$subnet.1:29500" --ps 2 --workers 4 --secret-file "$report/secret" "$@" -- \
      "$bin/een-bench-worker" "$trace" --steps "$steps" --warmup "$warmup" --report "$report" \
      > "$report/node$h.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "EEN run failed:" >&2; tail -5 "$report"/node*.log >&2; exit 1; }; done
  cat "$report"/worker-*.txt | awk '$1 == "step" {print $2}' | median
}

run_gloo() {
  local out=$work/gloo
  mkdir -p "$out"
  local pids=()
  for h in "${hosts[@]}"; do
    ip netns exec "${tag}h$h" env GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 bench/gloo_allreduce.py \
      "$trace" 6 "$steps" "$warmup" "$subnet.1:29600" $((2 * h)) 2 > "$out/host$h.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "gloo failed:" >&2; tail -5 "$out"/host*.txt >&2; return 1; }; done
  cat "$out"/host*.txt | awk '$1 == "step" {print $2}' | median
}

encrypted=$(run_een)
tcp_only=$(run_een --transport tcp)
insecure=$(run_een --insecure)
gloo=0
if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  gloo=$(run_gloo || echo 0)
else
  echo "gloo: skipped (needs /usr/bin/python3 with torch: apt-get install python3-torch)"
fi
awk -v e="$encrypted" -v t="$tcp_only" -v i="$insecure" -v g="$gloo" 'BEGIN {
  printf "een 2 PS + 4 workers, encrypted (CURVE): median step %.1f ms\n", e / 1000
  printf "een, encrypted, --transport tcp:         median step %.1f ms\n", t / 1000
  printf "een 2 PS + 4 workers, --insecure:        median step %.1f ms\n", i / 1000
  if (g > 0) printf "gloo all_reduce x6 (2 per host):         median step %.1f ms\n", g / 1000
  printf "ratios: per pair / tcp only = %.2fx, encrypted / insecure = %.2fx", e / t, e / i
  if (g > 0) printf ", een (encrypted) / gloo = %.2fx, een (insecure) / gloo = %.2fx", e / g, i / g
  printf "\n"
}'
