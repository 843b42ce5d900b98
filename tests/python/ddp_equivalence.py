"""ddp_equivalence: a DDP training script with what real ones have (BatchNorm,
a branch unused on some steps with find_unused_parameters=True, no_sync()
accumulation, gradient clipping, SGD or Adam), the same under any backend.
Rank 0 saves every parameter and buffer after --steps steps to --out
(torch.save of a dict); the test compares backends.
  --backend gloo|een  --optimizer sgd|adam  --steps N  --out FILE"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

try:
    import een  # noqa: F401  (the een backend; not needed for gloo)
except ImportError:
    pass


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)  # as before any BatchNorm
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8 * 8 * 8, 10)
        self.extra = nn.Linear(8 * 8 * 8, 10)  # used on even steps only

    def forward(self, x, use_extra):
        h = torch.relu(self.bn(self.conv(x))).flatten(1)
        out = self.head(h)
        return out + self.extra(h) if use_extra else out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Net(), find_unused_parameters=True)
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(1 + rank)
    for step in range(args.steps):
        x = torch.randn(16, 3, 8, 8, generator=data)
        y = torch.randint(0, 10, (16,), generator=data)
        use_extra = step % 2 == 0
        if step % 5 == 4:  # accumulate one micro-batch locally first
            with model.no_sync():
                nn.functional.cross_entropy(model(x[:8], use_extra), y[:8]).backward()
            nn.functional.cross_entropy(model(x[8:], use_extra), y[8:]).backward()
        else:
            nn.functional.cross_entropy(model(x, use_extra), y).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    if rank == 0:
        state = {k: v.detach().double().clone() for k, v in model.module.state_dict().items()}
        torch.save(state, args.out)
    print("rank %d: trained %d steps with %s" % (rank, args.steps, args.backend), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
