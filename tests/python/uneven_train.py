"""uneven_train: workers with uneven data (tests/python/test_api.py). Worker
r trains --steps + r * --extra steps of the MLP, then dp.finish() (with
--leave-at-once: dp.finish(final_values=False)); every worker writes the
parameters it ends with to --out.RANK."""
import argparse
import sys

import torch

from train_mlp import Mlp, global_batch, save


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--extra", type=int, default=4, help="more steps per rank")
    parser.add_argument("--leave-at-once", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import een
    torch.manual_seed(7)
    model = Mlp()
    dp = een.DataParallel(model, optimizer=een.Adam(lr=0.01))
    mine = args.steps + dp.rank * args.extra
    while dp.global_step < mine:
        x, y = global_batch(dp.global_step + 100 * dp.rank, 8)
        loss = torch.nn.functional.mse_loss(dp(x), y)
        loss.backward()
        dp.step(loss.item(), 8)
    dp.finish(final_values=not args.leave_at_once)
    print("worker %d finished at step %d" % (dp.rank, dp.global_step), flush=True)
    save(model, "%s.%d" % (args.out, dp.rank))
    return 0


if __name__ == "__main__":
    sys.exit(main())
