#!/usr/bin/env python3
"""What AB-training's truncation would keep of an already trained full-rank model.

Reads a gathered full-rank model (RUN_DIR/model_state.pt of any run, e.g. the DDP baseline),
and for every layer AB-training factorises (every weight of 2 or more dimensions except the
model's first layer "stem." and its classifier "head.", as `LowRankModel` chooses them; a conv
weight [out, in, kh, kw] is the matrix out x (in kh kw)) takes the singular values and keeps the
rank AB's truncation would keep: the number of singular values above CUTOFF x the largest. It
prints per layer the shape, that rank, the smallest and median singular value over the largest,
A + B's parameters at that rank, and the reference's compression metric (docs/ab-training.md:
current parameters / full-rank parameters, a factorised layer's numerator counting its bias and
A + B, its denominator the full weight only) of the model truncated that way.

It answers "how far could AB's truncation go on this model, if its spectra were these": a bound
from the baseline's own weights, not an AB result.

usage: tools/truncation_bound.py MODEL_STATE.pt [--cutoff 0.15] [--markdown] [--json FILE]
"""
import argparse
import json
import os
import sys


def factorised(name, tensor):
    module = name.rsplit(".", 1)[0]
    return (name.endswith(".weight") and tensor.dim() >= 2 and not module.startswith("stem")
            and not module.startswith("head"))


def analyse(state, cutoff):
    import torch
    layers, num, den = [], 0, 0
    fact_modules = {k.rsplit(".", 1)[0] for k, v in state.items() if factorised(k, v)}
    for name, t in state.items():
        module = name.rsplit(".", 1)[0]
        if factorised(name, t):
            w = t.detach().to(torch.float64).reshape(t.shape[0], -1)
            s = torch.linalg.svdvals(w)
            rank = int((s > cutoff * s[0]).sum()) if s[0] > 0 else 0
            rows, cols = w.shape
            ab = rank * (rows + cols)
            num += ab
            den += rows * cols
            layers.append({"layer": module, "rows": rows, "cols": cols, "full_rank": len(s), "rank": rank,
                           "s_min": float(s[-1] / s[0]) if s[0] > 0 else 0.0,
                           "s_median": float(s[len(s) // 2] / s[0]) if s[0] > 0 else 0.0,
                           "params_full": rows * cols, "params_ab": ab})
        elif module in fact_modules:  # a factorised layer's bias: numerator only
            num += t.numel()
        else:
            num += t.numel()
            den += t.numel()
    if not layers:
        sys.exit("truncation_bound: the state has no layer AB-training would factorise")
    return layers, num, den


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("state")
    ap.add_argument("--cutoff", type=float, default=0.15)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not 0 < a.cutoff < 1:
        sys.exit(f"truncation_bound: --cutoff must be in (0, 1), got {a.cutoff}")
    if not os.path.isfile(a.state):
        sys.exit(f"truncation_bound: no {a.state}")
    import torch
    try:
        state = torch.load(a.state)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same clear message
        sys.exit(f"truncation_bound: {a.state} is not a torch.load-able state dict ({type(e).__name__})")
    if not isinstance(state, dict) or not all(hasattr(v, "dim") for v in state.values()):
        sys.exit(f"truncation_bound: {a.state} is not a state dict of tensors")
    layers, num, den = analyse(state, a.cutoff)
    ratio = den / num
    head = ["layer", "shape", "full rank", f"rank > {a.cutoff} s_max", "s_min / s_max", "s_median / s_max",
            "params full", "params A+B"]
    rows = [[l["layer"], f"{l['rows']}x{l['cols']}", l["full_rank"], l["rank"], f"{l['s_min']:.3f}",
             f"{l['s_median']:.3f}", l["params_full"], l["params_ab"]] for l in layers]
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|---|---|" + "---:|" * (len(head) - 2))
        for r in rows:
            print("| " + " | ".join(str(c) for c in r) + " |")
    else:
        print("  ".join(head))
        for r in rows:
            print("  ".join(str(c) for c in r))
    print(f"reference compression metric if truncated at {a.cutoff}: {ratio:.2f}:1 "
          f"({num} of {den} parameters)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cutoff": a.cutoff, "layers": layers, "params": num, "params_full": den,
                       "compression_reference_n_to_1": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
