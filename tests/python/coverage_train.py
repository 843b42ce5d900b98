"""A plain PyTorch loop with no elastic code, as a user writes it (a
DataLoader over een.DistributedSampler, one dp.step() a batch), that
records every sample id it trains: before each step "try EPOCH STEP id id
...", where EPOCH is the epoch of the data the step trains (een.step_data_at;
under ssp/async the loop's, as the sampler deals each epoch's batches), and
"done STEP" once it was taken (a process killed in between may or may not
have delivered its gradients: the job's log says which steps of a lost
worker were not trained); after a rollback to a snapshot, "undo STEP": its
steps from STEP on were undone (they come again). One file per process in
--out."""
import argparse
import os
import time

import torch
import torch.nn.functional as F
import torch.utils.data

import een

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=960)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--give-batch-size", action="store_true")
parser.add_argument("--step-ms", type=float, default=0)
parser.add_argument("--short-ms", type=float, default=0,
                    help="each step's pause while a worker is missing (time for a replacement)")
parser.add_argument("--slow-rank", type=int, default=-1,
                    help="this rank pauses --slow-factor times as long")
parser.add_argument("--slow-factor", type=float, default=4)
parser.add_argument("--evaluate", action="store_true",
                    help="after each epoch, a pass over an evaluation loader of its own sampler")
parser.add_argument("--out", required=True)
args = parser.parse_args()

torch.manual_seed(0)
features = torch.randn(args.samples, 8)
labels = (features.sum(1) > 0).long()
dataset = torch.utils.data.TensorDataset(torch.arange(args.samples), features, labels)
model = torch.nn.Linear(8, 2)
dp = een.DataParallel(model, optimizer=een.SGD(0.05))
sampler = een.DistributedSampler(dataset,
                                 batch_size=args.batch if args.give_batch_size else None)
loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, sampler=sampler)
held_out = torch.utils.data.TensorDataset(torch.arange(300))
evaluation = torch.utils.data.DataLoader(
    held_out, batch_size=10, sampler=een.DistributedSampler(held_out, shuffle=False))
record = open(os.path.join(args.out, "rank%d-pid%d.log" % (dp.rank, os.getpid())), "w")
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for ids, x, y in loader:
        step = dp.global_step
        data_epoch, _, _ = een.step_data_at(step, dp.world_size, dp.membership_changes,
                                            args.samples, args.batch)
        if dp.consistency != "bsp":  # each worker takes its own steps: the loop's epoch
            data_epoch = epoch
        record.write("try %d %d %s\n" % (data_epoch, step, " ".join(str(int(i)) for i in ids)))
        record.flush()
        loss = F.cross_entropy(dp(x), y)
        loss.backward()
        dp.step(loss)
        if dp.global_step == step + 1:
            record.write("done %d\n" % step)
        else:
            record.write("undo %d\n" % dp.global_step)
        record.flush()
        if dp.rank == 0:
            print("epoch %d step %d" % (epoch, dp.global_step), flush=True)
        short = dp.live_count < dp.world_size
        pause = (args.short_ms if short else args.step_ms) / 1000
        time.sleep(args.slow_factor * pause if dp.rank == args.slow_rank else pause)
    if args.evaluate:
        with torch.no_grad():
            seen = sum(len(ids) for (ids,) in evaluation)
        print("worker %d evaluated %d samples after epoch %d" % (dp.rank, seen, epoch), flush=True)
dp.finish()
