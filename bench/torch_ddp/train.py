#!/usr/bin/python3
"""One rank of bench/torch_ddp: PyTorch's standard MNIST CNN example (pytorch/examples
mnist/main.py: two convs, dropout, two linears; Adadelta lr 1.0, StepLR gamma 0.7) under unmodified
DDP on Fashion-MNIST (Debian's dataset-fashion-mnist), with the backend and comm hook the command
line names. Rank 0 writes {"epoch_s": [...], "test_accuracy", "steps", ...} to --out.

    train.py --backend gloo|lowcomm [--hook none|fp16|powersgd|lowcomm:CODEC] [--epochs 1] [--batch 32]
"""
import argparse
import gzip
import json
import os
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

DATA = "/usr/share/datasets/fashion-mnist"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def load(split):
    with gzip.open(os.path.join(DATA, f"{split}-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16)
    with gzip.open(os.path.join(DATA, f"{split}-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = torch.from_numpy(x.copy()).float().div_(255).view(-1, 1, 28, 28)
    return (x - 0.2860) / 0.3530, torch.from_numpy(y.copy()).long()


def register_hook(model, hook):
    if hook == "none":
        return None
    if hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return None
    if hook == "powersgd":  # PyTorch's own, with its documented defaults
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                            start_powerSGD_iter=10)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return None
    if hook.startswith("lowcomm:"):
        import lowcomm.hooks
        codec, *opts = hook[len("lowcomm:"):].split(",")
        options = {k: float(v) if "." in v else int(v) for k, v in (o.split("=") for o in opts)}
        state = lowcomm.hooks.state(codec, model=model, **options)
        model.register_comm_hook(state, lowcomm.hooks.compress)
        return state
    raise SystemExit(f"--hook: unknown '{hook}'")


def write_json(path, obj):
    """Whole or not at all: a temporary file renamed over PATH; a PATH that exists and is not a
    regular file (/dev/null, a FIFO) is written in place, never replaced (as root, a rename over
    /dev/null turns the device into a file)."""
    if os.path.exists(path) and not os.path.isfile(path):
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)
        return
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True)
    p.add_argument("--hook", default="none")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="stop each epoch after this many steps (smoke tests)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    sharing = int(os.environ.get("LOWCOMM_PROCS_ON_HOST", os.environ.get("LOCAL_WORLD_SIZE", "1")))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // sharing))
    if a.backend == "lowcomm":
        import lowcomm.torch  # noqa: F401  registers the backend
    dist.init_process_group(a.backend, timeout=timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    xs, ys = load("train")
    xt, yt = load("t10k")
    torch.manual_seed(a.seed)
    model = DDP(Net())
    hook_state = register_hook(model, a.hook)
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    steps_per_epoch = len(xs) // (a.batch * world)
    if a.max_steps:
        steps_per_epoch = min(steps_per_epoch, a.max_steps)
    epoch_s, losses = [], []
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(a.seed * 1000 + epoch)
        perm = torch.randperm(len(xs), generator=g)  # the same on every rank; rank r takes every world-th batch
        model.train()
        dist.barrier()
        t0 = time.perf_counter()
        for s in range(steps_per_epoch):
            idx = perm[(s * world + rank) * a.batch:(s * world + rank + 1) * a.batch]
            opt.zero_grad()
            loss = F.nll_loss(model(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            if s % 50 == 0:
                losses.append(loss.item())
        dist.barrier()
        epoch_s.append(time.perf_counter() - t0)
        sched.step()
    model.eval()
    with torch.no_grad():
        acc = sum((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item() for i in range(0, len(xt), 1000))
    acc /= len(xt)
    if rank == 0:
        row = {"backend": a.backend, "hook": a.hook, "world": world, "epochs": a.epochs, "batch_per_rank": a.batch,
               "steps": steps_per_epoch * a.epochs, "epoch_s": epoch_s, "test_accuracy": acc, "losses": losses}
        if hook_state is not None:
            row["hook_stats"] = hook_state.stats()
            row["hook_decisions"] = hook_state.decisions()
        if a.backend == "lowcomm":
            import lowcomm.torch
            row["traffic_total"] = lowcomm.torch.traffic()["total"]
        write_json(a.out, row)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
