"""torchrun_env: a worker that uses torch.distributed the way torchrun users
do, beside een.DataParallel: init_process_group("gloo") from torchrun's
environment (env://), an all_reduce of an evaluation metric, and its
torchrun variables printed as "worker R: NAME=VALUE" lines.
  --fail-first: worker 1's first process exits 3 before anything else (its
  replacement then reads TORCHELASTIC_RESTART_COUNT=1)."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

NAMES = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
         "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR",
         "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
         "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-first", action="store_true")
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "-1"))
    for name in NAMES:
        print("worker %d: %s=%s" % (rank, name, os.environ.get(name, "<unset>")), flush=True)
    if args.fail_first and rank == 1 and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        return 3
    if not args.fail_first:
        dist.init_process_group("gloo")
        metric = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(metric)
        print("worker %d: gloo all_reduce %g of %d ranks" % (rank, metric.item(),
                                                              dist.get_world_size()), flush=True)
    import een
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    with een.DataParallel(model, optimizer=een.SGD(0.1)) as dp:
        for _ in range(3):
            model(torch.ones(2, 4)).sum().backward()
            dp.step(None, 2)
    if not args.fail_first:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
