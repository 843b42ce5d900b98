"""een_collectives: every collective of the `een` backend against gloo's, in
one job (bfloat16, AVG and reduce_scatter, which gloo lacks in torch 1.13,
against the answer computed here). The default group is een; a gloo group of the same ranks gives the
reference. Each rank's inputs follow from its rank, so every rank also knows
what the answer must be. Prints "rank R: collectives agree with gloo (N
checks)", or raises naming the first disagreement."""
import torch
import torch.distributed as dist

import een  # noqa: F401  (registers the backend)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]
FOLD = {"SUM": torch.add, "PRODUCT": torch.mul, "MIN": torch.minimum, "MAX": torch.maximum}
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX}


def inputs(rank, dtype, numel):
    g = torch.Generator().manual_seed(1000 + rank)
    if dtype.is_floating_point:
        # Products of many ranks stay finite: values near 1.
        return (torch.rand(numel, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    return torch.randint(-50, 50, (numel,), generator=g).to(dtype)


def main():
    dist.init_process_group("een")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    checks = 0

    def same(a, b, what):
        nonlocal checks
        checks += 1
        if a.dtype.is_floating_point:
            ok = torch.allclose(a.double(), b.double(), rtol=1e-2 if a.element_size() == 2 else 1e-6,
                                atol=0)
        else:
            ok = torch.equal(a, b)
        if not ok:
            raise SystemExit("rank %d: %s differs: een %s, gloo %s" % (rank, what, a[:4], b[:4]))

    # allreduce: every op, every dtype, small (one PS) and large (split over the PS).
    for numel in (7, 70000):
        for dtype in DTYPES:
            for name, op in OPS.items():
                if name == "PRODUCT" and numel > 7:
                    continue  # large products leave the float range
                mine = inputs(rank, dtype, numel)
                a, b = mine.clone(), mine.clone()
                dist.all_reduce(a, op=op)
                if dtype == torch.bfloat16:  # gloo in torch 1.13 has none: in rank order here
                    b = inputs(0, dtype, numel)
                    for r in range(1, size):
                        b = FOLD[name](b, inputs(r, dtype, numel))
                else:
                    dist.all_reduce(b, op=op, group=gloo)
                same(a, b, "all_reduce %s of %d %s" % (name, numel, dtype))
    # AVG (floating types; gloo in torch 1.13 has none): the sum / size.
    for dtype in (torch.float32, torch.float64):
        mine = inputs(rank, dtype, 1000)
        a, b = mine.clone(), mine.clone()
        dist.all_reduce(a, op=dist.ReduceOp.AVG)
        dist.all_reduce(b, group=gloo)
        same(a, b / size, "all_reduce AVG of %s" % dtype)
    # broadcast from each rank.
    for root in range(size):
        a = inputs(rank, torch.float32, 100000)
        dist.broadcast(a, src=root)
        same(a, inputs(root, torch.float32, 100000), "broadcast from %d" % root)
    # all_gather, and the flat form.
    for numel in (5, 40000):
        mine = inputs(rank, torch.float32, numel)
        outs = [torch.empty(numel) for _ in range(size)]
        dist.all_gather(outs, mine)
        for r in range(size):
            same(outs[r], inputs(r, torch.float32, numel), "all_gather of %d, rank %d's" % (numel, r))
        flat = torch.empty(numel * size)
        dist._all_gather_base(flat, mine)
        same(flat, torch.cat(outs), "_all_gather_base of %d" % numel)
    # reduce_scatter (gloo in torch 1.13 has none): each rank's slice of the sum.
    pieces = [inputs(rank * size + r, torch.float64, 3000) for r in range(size)]
    out = torch.empty(3000, dtype=torch.float64)
    dist.reduce_scatter(out, pieces)
    expect = sum(inputs(r * size + rank, torch.float64, 3000) for r in range(size))
    same(out, expect, "reduce_scatter")
    # reduce, gather and scatter to rank 0.
    a = inputs(rank, torch.float32, 1000)
    dist.reduce(a, dst=0)
    if rank == 0:
        same(a, sum(inputs(r, torch.float32, 1000) for r in range(size)), "reduce")
    gathered = [torch.empty(10) for _ in range(size)] if rank == 0 else None
    dist.gather(inputs(rank, torch.float32, 10), gathered, dst=0)
    if rank == 0:
        for r in range(size):
            same(gathered[r], inputs(r, torch.float32, 10), "gather, rank %d's" % r)
    piece = torch.empty(10)
    dist.scatter(piece, [inputs(100 + r, torch.float32, 10) for r in range(size)] if rank == 0
                 else None, src=0)
    same(piece, inputs(100 + rank, torch.float32, 10), "scatter")
    # The object collectives, and a barrier.
    objects = [None] * size
    dist.all_gather_object(objects, {"rank": rank, "name": "w%d" % rank})
    if objects != [{"rank": r, "name": "w%d" % r} for r in range(size)]:
        raise SystemExit("rank %d: all_gather_object gave %s" % (rank, objects))
    checks += 1
    box = [("from rank 0", 42)] if rank == 0 else [None]
    dist.broadcast_object_list(box, src=0)
    if box != [("from rank 0", 42)]:
        raise SystemExit("rank %d: broadcast_object_list gave %s" % (rank, box))
    checks += 1
    dist.barrier()
    # A subgroup of the first two ranks: its own keys, the others absent.
    pair = dist.new_group(ranks=[0, 1])
    if rank < 2:
        a = inputs(rank, torch.float32, 9)
        dist.all_reduce(a, group=pair)
        same(a, inputs(0, torch.float32, 9) + inputs(1, torch.float32, 9), "subgroup all_reduce")
    dist.barrier()
    print("rank %d: collectives agree with gloo (%d checks)" % (rank, checks), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
