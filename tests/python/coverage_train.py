"""A plain PyTorch loop with no elastic code, as a user writes it (a
DataLoader over een.DistributedSampler, one dp.step() a batch), that
records every sample id it trains: before each step "try EPOCH STEP id id
...", where EPOCH is the epoch of the data the step trains (een.step_data_at;
under ssp/async the loop's, as the sampler deals each epoch's batches; with
--loader-workers, which draw ahead, the sampler's data_epoch() at the draw), and
"done STEP" once it was taken (a process killed in between may or may not
have delivered its gradients: the job's log says which steps of a lost
worker were not trained); after a rollback to a snapshot, "undo STEP": its
steps from STEP on were undone (they come again). One file per process in
--out."""
import argparse
import collections
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
parser.add_argument("--loader-workers", type=int, default=0,
                    help="the DataLoader's num_workers (> 0: it draws batches ahead)")
parser.add_argument("--own-batching", action="store_true",
                    help="batches of the program's own (not torch's BatchSampler): the sampler "
                         "cannot see the batch size and learns it from the loop")
parser.add_argument("--out", required=True)
args = parser.parse_args()

torch.manual_seed(0)
features = torch.randn(args.samples, 8)
labels = (features.sum(1) > 0).long()
dataset = torch.utils.data.TensorDataset(torch.arange(args.samples), features, labels)
model = torch.nn.Linear(8, 2)
dp = een.DataParallel(model, optimizer=een.SGD(0.05))


class Recording(een.DistributedSampler):
    """Notes the data epoch of each index as it is drawn (a loader with
    workers draws ahead of the batch the loop trains)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.drawn = collections.deque()

    def __iter__(self):
        for index in super().__iter__():
            self.drawn.append((index, self.data_epoch()))
            yield index


class Batches:
    """Batches of --batch indices, as a program that batches by itself."""

    def __init__(self, indices, size):
        self.indices, self.size = indices, size

    def __iter__(self):
        batch = []
        for index in self.indices:
            batch.append(index)
            if len(batch) == self.size:
                yield batch
                batch = []
        if batch:
            yield batch


sampler = Recording(dataset, batch_size=args.batch if args.give_batch_size else None)
if args.own_batching:
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=Batches(sampler, args.batch),
                                         num_workers=args.loader_workers)
else:
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, sampler=sampler,
                                         num_workers=args.loader_workers)
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
        drawn = [sampler.drawn.popleft() for _ in range(len(ids))]
        assert [i for i, _ in drawn] == [int(i) for i in ids], "the loader keeps the order drawn"
        if args.loader_workers > 0:  # drawn ahead: the epoch each index was drawn of
            data_epoch = drawn[0][1]
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
