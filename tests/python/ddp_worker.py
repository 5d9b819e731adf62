"""One rank of test_ddp.py: PyTorch's standard MNIST CNN example (pytorch/examples mnist/main.py:
two convs, dropout, two linears, Adadelta lr 1.0), unmodified DDP, trained on Fashion-MNIST with the
same seeds on the default Gloo group and on a "lowcomm" group in turn. argv: steps, per-rank batch.
Prints both runs' test accuracy and final parameters' checksums, and their largest difference."""
import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import fmnist
import lowcomm.torch as lt


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


def train(group, steps, batch, rank, world, xs, ys, xt, yt):
    torch.manual_seed(0)
    model = DDP(Net(), process_group=group, bucket_cap_mb=1)  # several buckets, overlapped with backward
    torch.manual_seed(1 + rank)  # dropout differs per rank, alike across the two runs
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    model.train()
    for step in range(steps):
        lo = (step * world + rank) * batch % (len(xs) - batch)
        opt.zero_grad()
        F.nll_loss(model(xs[lo:lo + batch]), ys[lo:lo + batch]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean().item()
    params = torch.cat([p.detach().flatten() for p in model.module.parameters()])
    return acc, params


def main():
    steps, batch = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    low = dist.new_group(backend="lowcomm", timeout=timedelta(seconds=120))
    xs, ys = fmnist.load("train", 8192)
    xt, yt = fmnist.load("t10k", 1000)
    acc_g, p_g = train(dist.group.WORLD, steps, batch, rank, world, xs, ys, xt, yt)
    lt.reset_traffic(low)
    acc_l, p_l = train(low, steps, batch, rank, world, xs, ys, xt, yt)
    t = lt.traffic(low)
    print(json.dumps({"acc_gloo": acc_g, "acc_lowcomm": acc_l, "max_abs_diff": (p_g - p_l).abs().max().item(),
                      "identical": bool(torch.equal(p_g, p_l)), "params": p_g.numel(),
                      "bytes_sent": t["total"]["bytes_sent"], "allreduce_bytes": t["by_op"].get("allreduce", {}).get("bytes_sent", 0)}))


main()
