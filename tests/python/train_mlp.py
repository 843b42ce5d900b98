"""train_mlp: the same training steps of a small MLP two ways, for the Python
tests (tests/python/test_*.py).
  under een-launch: every worker takes its rows of each step's global batch,
  the parameter servers apply the optimizer (een.SGD / een.Adam);
  with --reference: one process, the whole global batch, torch.optim.
Both write the final parameters (float32, named_parameters order) to --out."""
import argparse
import sys

import torch


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 64)
        self.fc2 = torch.nn.Linear(64, 32)
        self.fc3 = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


def global_batch(step, rows):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(rows, 20, generator=g)
    return x, torch.sin(x[:, :4]) + 0.1 * torch.randn(rows, 4, generator=g)


def save(model, path):
    with open(path, "wb") as out:
        for p in model.parameters():
            out.write(p.detach().contiguous().numpy().tobytes())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8, help="per-worker batch")
    parser.add_argument("--workers", type=int, default=4, help="workers the reference stands for")
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--fail-rank", type=int, default=-1,
                        help="this worker raises an exception at --fail-step (a bug)")
    parser.add_argument("--fail-step", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(7)
    model = Mlp()
    if args.reference:
        opt = (torch.optim.SGD(model.parameters(), lr=args.lr) if args.optimizer == "sgd"
               else torch.optim.Adam(model.parameters(), lr=args.lr))
        for step in range(args.steps):
            x, y = global_batch(step, args.workers * args.batch)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        save(model, args.out)
        return 0

    import een
    with een.DataParallel(model, optimizer=een.SGD(args.lr) if args.optimizer == "sgd"
                          else een.Adam(lr=args.lr)) as dp:
        rows = slice(dp.rank * args.batch, (dp.rank + 1) * args.batch)
        # No zero_grad(): dp.step() clears .grad, after a rollback too.
        while dp.global_step < args.steps:
            if dp.rank == args.fail_rank and dp.global_step == args.fail_step:
                raise ValueError("a bug in worker %d at step %d" % (dp.rank, dp.global_step))
            x, y = global_batch(dp.global_step, dp.world_size * args.batch)
            loss = torch.nn.functional.mse_loss(dp(x[rows]), y[rows])
            loss.backward()
            try:
                dp.step(loss.item(), args.batch)
            except een.RolledBack as back:
                print("rolled back to step %d" % back.step, flush=True)
        if dp.rank == 0:
            save(model, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
