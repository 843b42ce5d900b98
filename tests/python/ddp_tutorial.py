"""ddp_tutorial: PyTorch's own DDP tutorial ("Getting Started with Distributed
Data Parallel", the torchrun variant), unchanged but for arguments: it reads
nothing of EEN. Each rank prints "rank R of N: done, checksum C" (C: the sum
of the first layer's weights, all-reduced; the same on every rank).
  --backend NAME: gloo (default) or een.
  --fail-rank R --fail-step S: rank R raises SystemExit at step S."""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(args):
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    torch.manual_seed(100 + rank)
    for step in range(args.steps):
        if rank == args.fail_rank and step == args.fail_step:
            raise SystemExit("rank %d gives up at step %d" % (rank, step))
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        loss_fn(outputs, torch.randn(20, 5)).backward()
        optimizer.step()
    checksum = model.net1.weight.detach().sum().reshape(1)
    dist.all_reduce(checksum)
    print("rank %d of %d: done, checksum %.6f" % (rank, dist.get_world_size(), checksum.item()),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=-1)
    demo_basic(parser.parse_args())
