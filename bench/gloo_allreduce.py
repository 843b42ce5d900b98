#!/usr/bin/python3
"""PyTorch's own answer, for een-bench: torch.distributed all_reduce with the
gloo backend of a trace's gradients, DDP-style (25 MB buckets in backward
order), with P processes on this machine.

    gloo_allreduce.py TRACE PROCESSES STEPS WARMUP [MASTER_ADDR:PORT FIRST_RANK COUNT]

With the last three, only ranks FIRST_RANK .. FIRST_RANK+COUNT-1 of the
PROCESSES run here, meeting the others at MASTER_ADDR:PORT (rank 0's host):
one such command per host (bench/across_hosts.sh).
Prints one line per measured step and process: "step MICROS".
Needs Debian's python3-torch (/usr/bin/python3).
"""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BUCKET_BYTES = 25 * 1024 * 1024


def read_trace(path):
    sizes = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, numel = line.split()
            sizes.append(int(numel))
    return sizes  # backward order


def buckets_of(sizes):
    buckets, current = [], 0
    for numel in sizes:
        if current and (current + numel) * 4 > BUCKET_BYTES:
            buckets.append(current)
            current = 0
        current += numel
    if current:
        buckets.append(current)
    return buckets


def run(rank, world, master, sizes, steps, warmup, queue):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master.rsplit(":", 1)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    tensors = [torch.ones(n) for n in buckets_of(sizes)]
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        for t in tensors:
            dist.all_reduce(t)
        if step >= warmup:
            times.append((time.perf_counter() - start) * 1e6)
    dist.destroy_process_group()
    queue.put(times)


def main():
    trace, world, steps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    sizes = read_trace(trace)
    if len(sys.argv) > 5:  # a share of the ranks, on one of several hosts
        master, first, count = sys.argv[5], int(sys.argv[6]), int(sys.argv[7])
    else:
        with socket.socket() as s:  # a free port for the rendezvous
            s.bind(("127.0.0.1", 0))
            master = f"127.0.0.1:{s.getsockname()[1]}"
        first, count = 0, world
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, world, master, sizes, steps, warmup, queue))
             for r in range(first, first + count)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit(1)
    for times in results:
        for t in times:
            print(f"step {t:.0f}")


if __name__ == "__main__":
    main()
