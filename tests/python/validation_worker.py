"""One rank of test_validation.py: sizes, offsets, ranks and tags from Python that the lowcomm
backend must refuse before they reach a buffer. argv[1] picks the case; prints {"errors": [...]}."""
import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import lowcomm.torch as lt
from lowcomm import _C

CASE = sys.argv[1]
dist.init_process_group("lowcomm", timeout=timedelta(seconds=30))
RANK, WORLD = dist.get_rank(), dist.get_world_size()
errors = []


def expect_error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test reads the type and text
        kind = "ValueError" if isinstance(e, ValueError) else type(e).__name__  # ConfigError is one
        errors.append(f"{kind}: {e}")
        return
    errors.append("no error")


def all_to_all(out_splits, in_splits, rows=4):
    out, inp = torch.zeros(rows), torch.arange(float(rows))
    dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)


if CASE == "splits":
    # Negative sizes whose sum is still dim 0: the offsets walk off the heap buffers.
    expect_error(lambda: all_to_all([-2, 6], [-2, 6]))
    expect_error(lambda: all_to_all([2, 2], [6, -2]))
    expect_error(lambda: all_to_all([2, 2], [1, 1]))
elif CASE == "p2p":
    peer = 1 - RANK
    t = torch.ones(2)

    def post(tag):
        w = dist.isend(t, peer, tag=tag) if RANK == 0 else dist.irecv(t, peer, tag=tag)
        w.wait()

    expect_error(lambda: post(-1))
    expect_error(lambda: dist.broadcast(t, src=WORLD))
    expect_error(lambda: dist.isend(t, -1))
elif CASE == "hooks":
    comp = _C.Compressor({"codec": "powersgd", "rank": 1, "min_numel": 0, "start_step": 0})
    pg = dist.distributed_c10d._get_default_group()
    bucket = torch.ones(10)
    # Negative dimensions whose product is the segment's size.
    expect_error(lambda: comp.reduce(pg, bucket, 0, [("w", [-2, -5], 0, 10)]).wait())
    # Sizes that wrap around 2**64 so that the segments seem to cover the bucket.
    expect_error(lambda: comp.reduce(pg, bucket, 1, [("a", [10], 0, 10), ("b", [1], 10, 2**64 - 5),
                                                     ("c", [5], 5, 5)]).wait())
    expect_error(lambda: comp.reduce(pg, bucket, -1, [("w", [10], 0, 10)]).wait())
elif CASE == "create":
    store = dist.distributed_c10d._get_default_store()
    expect_error(lambda: lt._create(store, WORLD, WORLD, timedelta(seconds=5)))
    expect_error(lambda: lt._create(store, 0, 0, timedelta(seconds=5)))
    expect_error(lambda: lt._create(store, 0, WORLD, timedelta(seconds=-5)))
# Every refusal above was local: the group still works.
out = torch.zeros(4)
dist.all_to_all_single(out, torch.arange(4.0) + 10 * RANK)
errors.append(f"after: {out.tolist()}")
print(json.dumps({"errors": errors}))
sys.stdout.flush()
dist.destroy_process_group()
