"""checkpoint_train: a checkpoint with optimizer state, taken in an EEN job
and trained on in plain PyTorch (tests/python/test_checkpoint.py).
  under een-launch: N steps of the MLP (every worker its rows of each global
  batch, the PS apply the optimizer); after step --save-at every worker takes
  dp.state_dict() and rank 0 writes it with torch.save to --checkpoint (and
  rank 1 checks it got the same); rank 0 writes the final parameters to --out.
  with --plain: one process without EEN loads --checkpoint into the model and
  a torch.optim optimizer made with other hyper-parameters (the file's must
  win), trains steps --save-at..N with the mean of the workers' gradients,
  and writes its final parameters to --out."""
import argparse
import sys

import torch

from train_mlp import Mlp, global_batch, save

KINDS = ("sgd", "adam", "adamw", "adagrad")


def een_optimizer(een, kind, lr):
    return {"sgd": lambda: een.SGD(lr, momentum=0.9, weight_decay=1e-3),
            "adam": lambda: een.Adam(lr=lr, weight_decay=1e-3),
            "adamw": lambda: een.AdamW(lr=lr),
            "adagrad": lambda: een.Adagrad(lr=lr, initial_accumulator_value=0.1)}[kind]()


def torch_optimizer(kind, parameters):
    # Deliberately other hyper-parameters: load_state_dict must bring the job's.
    return {"sgd": lambda: torch.optim.SGD(parameters, lr=1.0, momentum=0.5),
            "adam": lambda: torch.optim.Adam(parameters, lr=1.0),
            "adamw": lambda: torch.optim.AdamW(parameters, lr=1.0),
            "adagrad": lambda: torch.optim.Adagrad(parameters, lr=1.0)}[kind]()


def rows_of(rank, batch):
    return slice(rank * batch, (rank + 1) * batch)


def plain(args):
    model = Mlp()
    optimizer = torch_optimizer(args.optimizer, model.parameters())
    checkpoint = torch.load(args.checkpoint)
    model.load_state_dict(checkpoint["model"])
    if args.fresh_optimizer:  # only the learning rate: what a checkpoint without state gives
        for group in optimizer.param_groups:
            group.update({k: v for k, v in checkpoint["optimizer"]["param_groups"][0].items()
                          if k != "params"})
    else:
        optimizer.load_state_dict(checkpoint["optimizer"])
    for step in range(args.save_at, args.steps):
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
        rows = rows_of(dp.rank, args.batch)
        while dp.global_step < args.steps:
            if dp.global_step == args.save_at:
                checkpoint = dp.state_dict()
                if dp.rank == 0:
                    torch.save(checkpoint, args.checkpoint)
                    print("checkpoint of step %d written" % dp.global_step, flush=True)
            x, y = global_batch(dp.global_step, dp.world_size * args.batch)
            loss = torch.nn.functional.mse_loss(dp(x[rows]), y[rows])
            loss.backward()
            dp.step(loss.item(), args.batch)
        if dp.rank == 0:
            save(model, args.out)
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--optimizer", choices=KINDS, default="adam")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--save-at", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8, help="per-worker batch")
    parser.add_argument("--workers", type=int, default=2, help="workers the plain run stands for")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--fresh-optimizer", action="store_true",
                        help="--plain without the checkpoint's optimizer state")
    args = parser.parse_args()
    torch.manual_seed(7)
    return plain(args) if args.plain else distributed(args)


if __name__ == "__main__":
    sys.exit(main())
