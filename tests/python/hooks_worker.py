"""One rank of test_hooks.py. argv[1] picks the case; prints one JSON line."""
import copy
import io
import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import fmnist
import lowcomm.hooks as hooks
import lowcomm.torch as lt

CASE, BACKEND = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
dist.init_process_group(BACKEND, timeout=timedelta(seconds=120))
RANK, WORLD = dist.get_rank(), dist.get_world_size()
XS, YS = fmnist.load("train", 4096)
XT, YT = fmnist.load("t10k", 1000)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))


def batch(step, size=32):
    lo = (step * WORLD + RANK) * size % (len(XS) - size)
    return XS[lo:lo + size], YS[lo:lo + size]


def step_once(model, opt, step):
    x, y = batch(step)
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def accuracy(model):
    with torch.no_grad():
        return (model(XT).argmax(1) == YT).float().mean().item()


def same_on_every_rank(model):
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, 0)
    return bool(torch.equal(flat, ref))


def codecs():
    """Every codec trains a small MLP for 60 steps under DDP with the hook."""
    out = {}
    for codec in hooks.CODECS:
        model = DDP(mlp())
        st = hooks.state(codec, model=model, **({"start_step": 5} if codec == "powersgd" else {}))
        model.register_comm_hook(st, hooks.compress)
        # Sign codecs step by lr per coordinate (their scale is 1): a smaller rate.
        opt = torch.optim.SGD(model.parameters(), lr=0.002 if codec in ("signsgd", "signum") else 0.1)
        losses = [step_once(model, opt, s) for s in range(60)]
        out[codec] = {"first": sum(losses[:5]) / 5, "last": sum(losses[-5:]) / 5, "acc": accuracy(model),
                      "same": same_on_every_rank(model), "ratio": st.stats()["compression_ratio"],
                      "side_group": st.side_group}
    return out


def invariant():
    """Error feedback loses nothing: sum of the hook's outputs + mean residual = mean of the
    sum of the gradients fed in (top-k, residual memory, every value compressed)."""
    model = DDP(mlp())
    st = hooks.state("topk", ratio=0.05, memory="residual", skip_1d=False, model=model)
    fed, got = {}, {}

    def spy(state, bucket):
        # In the compressor's (canonical) order, where its residual lives.
        lay = state.layout(bucket)
        grads = bucket.gradients()
        canonical = lambda: torch.cat([grads[j].reshape(-1) for j in lay.order])
        fed[lay.id] = fed.get(lay.id, 0) + canonical()

        def keep(fut):
            got[lay.id] = got.get(lay.id, 0) + canonical()
            return fut.value()
        return hooks.compress(state, bucket).then(keep)

    model.register_comm_hook(st, spy)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for s in range(25):
        step_once(model, opt, s)
    worst = 0.0
    residuals = st.state_dict()["compressor"]
    for i in fed:
        e = torch.frombuffer(bytearray(residuals[f"mem.e.{i}"]), dtype=torch.float32)
        # e_{t+1} = g_t + e_t - C_t on each rank and out_t = mean_r C_t, so
        # sum_t out_t + mean_r e_T = mean_r sum_t g_t.
        mean_e, mean_fed = e.clone(), fed[i].clone()
        dist.all_reduce(mean_e, group=st.process_group)
        dist.all_reduce(mean_fed, group=st.process_group)
        lhs, rhs = got[i] + mean_e / WORLD, mean_fed / WORLD
        worst = max(worst, ((lhs - rhs).abs().max() / rhs.abs().max()).item())
    return {"worst_rel": worst, "residual_norm": e.norm().item(), "buckets": len(fed), "residual_keys": sorted(k for k in residuals if k.startswith("mem.e."))}


def resume(codec, **options):
    """10 steps, checkpoint through torch.save, 10 more; against a fresh model, optimizer and hook
    state loaded from that checkpoint running the same 10 steps."""
    def build():
        model = DDP(mlp())
        st = hooks.state(codec, model=model, **options)
        model.register_comm_hook(st, hooks.compress)
        return model, st, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    model, st, opt = build()
    for s in range(10):
        step_once(model, opt, s)
    buf = io.BytesIO()
    torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "hook": st.state_dict()}, buf)
    for s in range(10, 20):
        step_once(model, opt, s)
    a = torch.cat([p.detach().flatten() for p in model.parameters()])
    buf.seek(0)
    ck = torch.load(buf)
    model2, st2, opt2 = build()
    model2.module.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["opt"])
    st2.load_state_dict(ck["hook"])
    for s in range(10, 20):
        step_once(model2, opt2, s)
    b = torch.cat([p.detach().flatten() for p in model2.parameters()])
    # Without the hook state the run differs (the residual matters): a control that can fail.
    model3, st3, opt3 = build()
    model3.module.load_state_dict(ck["model"])
    opt3.load_state_dict(ck["opt"])
    for s in range(10, 20):
        step_once(model3, opt3, s)
    c = torch.cat([p.detach().flatten() for p in model3.parameters()])
    return {"identical": bool(torch.equal(a, b)), "differs_without_state": not bool(torch.equal(a, c))}


def powersgd_long():
    model = DDP(mlp())
    st = hooks.state("powersgd", rank=2, start_step=10, model=model)
    model.register_comm_hook(st, hooks.compress)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = [step_once(model, opt, s) for s in range(1000)]
    return {"steps": len(losses), "finite": all(l == l and abs(l) < 1e9 for l in losses),
            "last": sum(losses[-20:]) / 20, "acc": accuracy(model), "same": same_on_every_rank(model),
            "ratio": st.stats()["compression_ratio"]}


if CASE == "codecs":
    result = codecs()
elif CASE == "invariant":
    result = invariant()
elif CASE.startswith("resume-"):
    result = {"topk": lambda: resume("topk", ratio=0.05, memory="residual"), "powersgd": lambda: resume("powersgd", rank=2, start_step=3), "auto": lambda: resume("auto", auto_trial_steps=1)}[CASE[7:]]()
elif CASE == "powersgd1000":
    result = powersgd_long()
print(json.dumps(result))
