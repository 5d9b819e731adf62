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
# Each line in one write(2): ranks may share the test's pipe, and print() may write a text and its
# newline separately (unbuffered stdout), so two ranks' lines could interleave ("26882ready ...").
sys.stdout.flush()
os.write(1, (json.dumps({"sum": t[0].item()}) + "\n").encode())
if len(sys.argv) > 1 and sys.argv[1] == "wait":
    os.write(1, f"ready {os.getpid()}\n".encode())
    time.sleep(60)
dist.destroy_process_group()
