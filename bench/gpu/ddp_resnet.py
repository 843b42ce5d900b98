"""ddp_resnet.py: ResNet-50 training steps under torch DDP on one machine,
the reference bench/gpu/run.sh measures EEN against, in the same run, with
the same model (the layers of bench/gpu/resnet_step.cc, torchvision's
resnet50), synthetic data, batch and Adam.
  python3 ddp_resnet.py --backend nccl|gloo|none --world 4 [--device cuda]
--backend none: the same processes, each training alone with no
communication at all (the compute-only baseline under the same sharing of
the GPU). Prints one line per rank: median step time and peak GPU memory."""
import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Bottleneck(nn.Module):
    def __init__(self, inp, width, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.downsample = None
        if stride != 1 or inp != width * 4:
            self.downsample = nn.Sequential(nn.Conv2d(inp, width * 4, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(width * 4))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, inp = [], 64
        for i, blocks in enumerate([3, 4, 6, 3]):
            width = 64 << i
            layer = []
            for b in range(blocks):
                layer.append(Bottleneck(inp, width, 2 if b == 0 and i > 0 else 1))
                inp = width * 4
            layers.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def run(rank, args, port):
    device = torch.device(args.device)
    if args.backend != "none":
        dist.init_process_group(args.backend, init_method="tcp://127.0.0.1:%d" % port,
                                rank=rank, world_size=args.world)
    torch.manual_seed(0)
    model = ResNet50().to(device)
    if args.backend != "none":
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index or 0] if device.type == "cuda" else None)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (args.batch,), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        sync()
        if step >= args.warmup:
            times.append(1000 * (time.perf_counter() - start))
    peak = torch.cuda.max_memory_allocated(device) / 1e6 if device.type == "cuda" else -1
    print("resnet50 ddp-%s rank %d of %d: step %.1f ms (median of %d), peak GPU memory allocated "
          "%.0f MB, batch %d, loss %.3f -> %.3f" % (args.backend, rank, args.world,
                                                    statistics.median(times), args.steps, peak,
                                                    args.batch, losses[0], losses[-1]), flush=True)
    if args.backend != "none":
        dist.barrier()
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["nccl", "gloo", "none"], required=True)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(args, port), nprocs=args.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
