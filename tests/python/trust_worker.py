"""One rank of test_trust.py: joins the job through init_process_group("lowcomm"), all_reduces
ones and prints {"sum": ...}; with argv[1] == "wait" it then prints "ready PID" and sleeps (the
launcher-death test kills its launcher meanwhile)."""
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import lowcomm.torch  # noqa: F401 - registers the backend

dist.init_process_group("lowcomm", timeout=timedelta(seconds=float(os.environ.get("TEST_TIMEOUT_S", "30"))))
t = torch.ones(4)
dist.all_reduce(t)
print(json.dumps({"sum": t[0].item()}), flush=True)
if len(sys.argv) > 1 and sys.argv[1] == "wait":
    print(f"ready {os.getpid()}", flush=True)
    time.sleep(60)
dist.destroy_process_group()
