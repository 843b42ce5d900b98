"""checkpoint_train: checkpoints with optimizer state between EEN jobs and
plain PyTorch (tests/python/test_checkpoint.py). Trains the MLP to step
--steps, each step on the global batch of --workers x --batch rows.
  under een-launch: every worker its rows, the PS apply the optimizer.
    --load FILE: dp.load_state_dict(torch.load(FILE)) first (every worker);
    with --gate G, each worker says "ready to load" and loads once file G
    exists (a test kills a PS then);
    --save FILE: at step --save-at every worker takes dp.state_dict() and
    rank 0 writes it with torch.save. Rank 0 writes the final parameters.
    --pull-every K: every worker takes dp.state_dict() every K steps too
    (with --save, rank 0 writes the last one at the end instead).
  with --plain: one process, torch.optim, the workers' mean gradients
    (each worker's rows, summed in rank order). --load FILE starts from a
    checkpoint (into an optimizer made with other hyper-parameters: the
    file's must win; --fresh-optimizer takes only the model and the learning
    rate); --save FILE writes {"model", "optimizer"} at step --save-at.
Both write the final parameters (float32, named_parameters order) to --out."""
import argparse
import os
import sys
import time

import torch

from train_mlp import Mlp, global_batch, save

KINDS = ("sgd", "adam", "adamw", "adagrad")


def een_optimizer(een, kind, lr):
    return {"sgd": lambda: een.SGD(lr, momentum=0.9, weight_decay=1e-3),
            "adam": lambda: een.Adam(lr=lr, weight_decay=1e-3),
            "adamw": lambda: een.AdamW(lr=lr),
            "adagrad": lambda: een.Adagrad(lr=lr, initial_accumulator_value=0.1)}[kind]()


def torch_optimizer(kind, parameters, lr):
    return {"sgd": lambda: torch.optim.SGD(parameters, lr=lr, momentum=0.9, weight_decay=1e-3),
            "adam": lambda: torch.optim.Adam(parameters, lr=lr, weight_decay=1e-3),
            "adamw": lambda: torch.optim.AdamW(parameters, lr=lr),
            "adagrad": lambda: torch.optim.Adagrad(parameters, lr=lr,
                                                   initial_accumulator_value=0.1)}[kind]()


def rows_of(rank, batch):
    return slice(rank * batch, (rank + 1) * batch)


def plain(args):
    model = Mlp()
    first = 0
    if args.load:
        checkpoint = torch.load(args.load)
        model.load_state_dict(checkpoint["model"])
        lr = checkpoint["optimizer"]["param_groups"][0]["lr"]
        optimizer = torch_optimizer(args.optimizer, model.parameters(), 1.0)
        if args.fresh_optimizer:  # what a checkpoint without optimizer state gives
            for group in optimizer.param_groups:
                group["lr"] = lr
        else:
            optimizer.load_state_dict(checkpoint["optimizer"])
        first = args.save_at
    else:
        optimizer = torch_optimizer(args.optimizer, model.parameters(), args.lr)
    for step in range(first, args.steps):
        if args.save and step == args.save_at:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                       args.save)
        x, y = global_batch(step, args.workers * args.batch)
        grads = []
        for rank in range(args.workers):  # each worker's mean gradient, summed in rank order
            model.zero_grad(set_to_none=True)
            rows = rows_of(rank, args.batch)
            torch.nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            total = grads[0][i]
            for g in grads[1:]:
                total = total + g[i]
            p.grad = total / args.workers
        optimizer.step()
    save(model, args.out)
    return 0


def distributed(args):
    import een
    model = Mlp()
    with een.DataParallel(model, optimizer=een_optimizer(een, args.optimizer, args.lr)) as dp:
        if args.load:
            if args.gate:
                print("worker %d ready to load" % dp.rank, flush=True)
                deadline = time.monotonic() + 120
                while not os.path.exists(args.gate) and time.monotonic() < deadline:
                    time.sleep(0.01)
            loaded = dp.load_state_dict(torch.load(args.load))
            print("checkpoint loaded: %s, at step %d" % (loaded, dp.global_step), flush=True)
        rows = rows_of(dp.rank, args.batch)
        last = None
        while dp.global_step < args.steps:
            if args.pull_every and dp.global_step % args.pull_every == 0:
                last = dp.state_dict()
                if dp.rank == 0 and dp.global_step % 50 == 0:
                    print("pulled the checkpoint of step %d" % dp.global_step, flush=True)
            elif args.save and dp.global_step == args.save_at:
                checkpoint = dp.state_dict()
                if dp.rank == 0:
                    torch.save(checkpoint, args.save)
                    print("checkpoint of step %d written" % dp.global_step, flush=True)
            x, y = global_batch(dp.global_step, dp.world_size * args.batch)
            loss = torch.nn.functional.mse_loss(dp(x[rows]), y[rows])
            loss.backward()
            dp.step(loss.item(), args.batch)
        if dp.rank == 0:
            save(model, args.out)
            if args.pull_every and args.save:
                torch.save(last, args.save)
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--optimizer", choices=KINDS, default="adam")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--save-at", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8, help="per-worker batch")
    parser.add_argument("--workers", type=int, default=2, help="workers the plain run stands for")
    parser.add_argument("--save", help="write a checkpoint at --save-at")
    parser.add_argument("--load", help="start from this checkpoint")
    parser.add_argument("--gate", help="with --load: load once this file exists")
    parser.add_argument("--pull-every", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--fresh-optimizer", action="store_true",
                        help="--plain --load without the checkpoint's optimizer state")
    args = parser.parse_args()
    torch.manual_seed(7)
    return plain(args) if args.plain else distributed(args)


if __name__ == "__main__":
    sys.exit(main())
