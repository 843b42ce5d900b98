"""ddp_step: one worker of a DDP job whose model has ResNet-50's parameter
shapes (samples/models/resnet50.tsv, 25.6 M float32) and next to no compute
(the loss is linear in every parameter), so a step's time is DDP's gradient
synchronisation: its 25 MB buckets allreduced by the backend while backward
runs. Each rank first times the same step without DDP (the compute, all
ranks at once as in the job), then the DDP step; rank 0 prints
"step median MS ms, compute median MS ms, sync MS ms (N steps)", sync being
the difference of the two medians: the part the issue's goal is about.
  --backend gloo|een  --steps N  --warmup N"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

try:
    import een  # noqa: F401  (the een backend)
except ImportError:
    pass

HERE = os.path.dirname(os.path.abspath(__file__))


class Shapes(nn.Module):
    def __init__(self, path):
        super().__init__()
        shapes = []
        with open(path) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                shapes.append([int(d) for d in line.split("\t")[1].split("x")])
        self.weights = nn.ParameterList(nn.Parameter(torch.zeros(s)) for s in shapes)

    def forward(self, x):
        return sum((w * x).sum() for w in self.weights)


def timed_steps(model, x, args):
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        model(x).backward()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    local = Shapes(os.path.join(HERE, "..", "samples", "models", "resnet50.tsv"))
    x = torch.tensor(1.0 + dist.get_rank())
    dist.barrier()
    compute = timed_steps(local, x, args)
    dist.barrier()
    model = DDP(local)
    times = timed_steps(model, x, args)  # backward returns once every bucket is allreduced
    # Every rank's gradient is the mean of 1..world: a wrong sum shows here.
    world = dist.get_world_size()
    expect = (world + 1) / 2
    grad = model.module.weights[0].grad
    if not torch.allclose(grad, torch.full_like(grad, expect)):
        raise SystemExit("the gradients are not the mean: %s" % grad.flatten()[:3])
    if dist.get_rank() == 0:
        step, work = statistics.median(times), statistics.median(compute)
        print("step median %.1f ms, compute median %.1f ms, sync %.1f ms (%d steps)"
              % (1000 * step, 1000 * work, 1000 * (step - work), len(times)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
