"""One rank of test_errors.py. argv[1] picks the case; prints {"errors": [...], "elapsed": s}."""
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import lowcomm.torch as lt

CASE = sys.argv[1]
dist.init_process_group("lowcomm", timeout=timedelta(seconds=float(os.environ.get("TEST_TIMEOUT_S", "60"))))
RANK, WORLD = dist.get_rank(), dist.get_world_size()
errors = []


def expect_error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test reads the type and text
        errors.append(f"{type(e).__name__}: {e}")
        return
    errors.append("no error")


start = time.monotonic()
if CASE == "dead":
    dist.barrier()
    if RANK == 1:
        os._exit(3)  # dies without a word
    time.sleep(1)
    expect_error(lambda: dist.all_reduce(torch.ones(1 << 16)))
elif CASE == "mismatch":
    expect_error(lambda: dist.all_reduce(torch.ones(10 + RANK)))
elif CASE == "local":
    expect_error(lambda: dist.all_gather([torch.zeros(3)] * (WORLD + 1), torch.zeros(3)))
    expect_error(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int8)))
    expect_error(lambda: dist.all_reduce(torch.ones(4), dist.ReduceOp.PRODUCT))
    expect_error(lambda: dist.all_gather_into_tensor(torch.zeros(5), torch.zeros(3)))
    expect_error(lambda: dist.send(torch.ones(2), WORLD + 3))
    gloo = dist.new_group(backend="gloo")
    expect_error(lambda: lt.traffic(gloo))
    dist.barrier()  # the group still works after every rejected call
    t = torch.ones(3)
    dist.all_reduce(t)
    errors.append(f"after: {t.tolist()}")
print(json.dumps({"errors": errors, "elapsed": time.monotonic() - start}))
sys.stdout.flush()
os._exit(0)  # a rank whose peer died cannot shut its group down cleanly
