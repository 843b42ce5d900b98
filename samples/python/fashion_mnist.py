"""fashion_mnist.py: the C++ sample (samples/fashion_mnist) in Python: the
same small CNN, data order and settings, trained data-parallel through EEN.

    een-launch --ps 2 --workers 4 -- python3 samples/python/fashion_mnist.py

(with EEN built: PYTHONPATH=build/python, or an installed EEN). With no
arguments: 3 epochs, batch 32 per worker, Adam lr 2e-3 on the parameter
servers. Rank 0 prints the mean step time and `test accuracy: NN.N%`.
Under `een-launch --dynamic-slicing auto` each worker takes its
dp.batch_slice() of every step's global batch.
Data: Debian's dataset-fashion-mnist, or $EEN_FASHION_MNIST_DIR."""
import argparse
import gzip
import os
import sys
import time

import numpy
import torch
import torch.nn.functional as F

import een


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 5)
        self.conv2 = torch.nn.Conv2d(16, 32, 5)
        self.fc1 = torch.nn.Linear(512, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def read_idx(path):
    """A gzipped IDX file of unsigned bytes as a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise ValueError("%s is not an IDX file of unsigned bytes" % path)
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    return numpy.frombuffer(data, dtype=numpy.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def load(train, limit=0):
    """Images [N, 1, 28, 28] float32, normalised as the C++ sample does; labels int64."""
    folder = os.environ.get("EEN_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    prefix = "train" if train else "t10k"
    images = read_idx(os.path.join(folder, prefix + "-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(folder, prefix + "-labels-idx1-ubyte.gz"))
    n = len(images) if limit <= 0 else min(limit, len(images))
    x = torch.from_numpy(images[:n].copy()).float().div_(255.0).sub_(0.2860).div_(0.3530)
    return x.unsqueeze(1), torch.from_numpy(labels[:n].astype(numpy.int64))


def evaluate(net, images, labels):
    net.eval()
    with torch.no_grad():
        correct = sum(int((net(images[i:i + 1000]).argmax(1) == labels[i:i + 1000]).sum())
                      for i in range(0, len(images), 1000))
    net.train()
    return 100.0 * correct / len(images)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--train-limit", type=int, default=0)
    parser.add_argument("--test-limit", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-every", type=int, default=100)
    args = parser.parse_args()
    batch = args.batch_size

    torch.manual_seed(args.seed)
    net = Net()
    optimizer = (een.Adam(lr=args.lr) if args.optimizer == "adam"
                 else een.SGD(args.lr, momentum=args.momentum))
    dp = een.DataParallel(net, optimizer=optimizer)
    images, labels = load(True, args.train_limit)
    n = len(images)
    sampler = een.DistributedSampler(n, dp.world_size, dp.rank, shuffle=True, seed=args.seed)
    if dp.rank == 0:
        print("training on %d images, %d workers x batch %d, %d epochs, %s lr %g, "
              "%d torch thread(s) per worker" % (n, dp.world_size, batch, args.epochs,
                                                 args.optimizer, args.lr,
                                                 torch.get_num_threads()), flush=True)
    start = time.monotonic()
    first_step = dp.global_step  # after --resume: the snapshot's step
    # Each step the live workers take the next live_count * batch positions of
    # the epoch's order; after a lost worker the others share the rest, and a
    # worker that starts mid-job finds its place from global_step. A lost PS
    # (with snapshots) raises een.RolledBack: start again from global_step.
    done = False
    while not done:
        try:
            first_epoch, position = een.position_after(dp.global_step, dp.world_size,
                                                       dp.membership_changes, n, batch)
            for epoch in range(first_epoch, args.epochs):
                sampler.set_epoch(epoch)
                position = position if epoch == first_epoch else 0
                epoch_loss, steps = 0.0, 0
                while position < n:
                    live = dp.live_count  # read before step(): a change applies from it
                    if dp.dynamic_slicing:  # een-launch --dynamic-slicing auto
                        offset, count = dp.batch_slice(batch)
                        mine = torch.tensor(sampler.slice(position, offset, count))
                    else:
                        mine = torch.tensor(sampler.batch(position, dp.live_index, live, batch))
                    loss = F.cross_entropy(dp(images.index_select(0, mine)),
                                           labels.index_select(0, mine))
                    loss.backward()
                    value = loss.item()
                    dp.step(value, len(mine))
                    position += live * batch
                    epoch_loss += value
                    steps += 1
                    if dp.rank == 0 and args.log_every > 0 and dp.global_step % args.log_every == 0:
                        print("epoch %d step %d loss %.4f" % (epoch + 1, dp.global_step, value),
                              flush=True)
                if dp.rank == 0:
                    print("epoch %d done: mean loss %.4f, %.1f s elapsed"
                          % (epoch + 1, epoch_loss / max(steps, 1), time.monotonic() - start),
                          flush=True)
            if dp.consistency != "bsp":  # ssp/async: every worker's gradients in, then pull
                dp.barrier()
                if dp.rank == 0:
                    dp.pull_parameters()
            done = True
        except een.RolledBack as back:
            if dp.rank == 0:
                print(back, flush=True)
    if dp.rank == 0:
        seconds = time.monotonic() - start
        steps_here = dp.global_step - first_step  # this run's (resumed: the rest)
        print("mean step time: %.3f ms over %d steps" % (1000 * seconds / max(steps_here, 1),
                                                        steps_here))
        test_images, test_labels = load(False, args.test_limit)
        print("test accuracy: %.1f%%" % evaluate(net, test_images, test_labels), flush=True)
    dp.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
