"""restart_train: a DDP script written for torchrun's restarts, as its
elastic examples are: rank 0 saves the model, the optimizer and the step
after every step (atomically), and every rank starts from that checkpoint
when there is one. Each step's batch depends only on the step and the rank,
so a run that restarted ends where an undisturbed one does.
  --backend gloo|een  --steps N  --checkpoint PATH  --out PATH
  --fail-rank R --fail-step S: rank R exits 1 at step S in the first attempt
  (TORCHELASTIC_RESTART_COUNT=0) only; with --fail-how stop it stops itself
  (SIGSTOP: a hung process, lost by its silence) instead.
Rank 0 writes the final parameters to --out and prints "done at step N,
attempt A, checksum C" (C: a hash of the parameters' bytes)."""
import argparse
import hashlib
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="gloo")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--fail-step", type=int, default=-1)
    p.add_argument("--fail-how", choices=["exit", "stop"], default="exit")
    args = p.parse_args()
    if args.backend == "een":
        import een  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    step = 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        print("rank %d attempt %d resumes at step %d" % (rank, attempt, step), flush=True)
    ddp = DDP(model)
    while step < args.steps:
        if rank == args.fail_rank and step == args.fail_step and attempt == 0:
            if args.fail_how == "stop":
                print("rank %d stops itself at step %d" % (rank, step), flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            sys.exit("rank %d fails at step %d" % (rank, step))
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(8, 6, generator=gen)
        y = x.sum(1, keepdim=True)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
        step += 1
        if rank == 0:
            tmp = args.checkpoint + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, args.checkpoint)
        dist.barrier()  # nobody runs ahead of the checkpoint it may restart from
    if rank == 0:
        torch.save(model.state_dict(), args.out)
        digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                         for p in model.parameters())).hexdigest()[:16]
        print("done at step %d, attempt %d, checksum %s" % (step, attempt, digest), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
