#!/usr/bin/python3
"""Compute time per step by training phase, from `lowcomm train --timeline` traces.

usage: tools/timeline_phases.py TRACE.json [TRACE.json ...] [--rank R] [--markdown]
                                [--png OUT.png] [--steps N]

Every step of a trace is one "phase" event (lane 2: ddp, ab-warmup, ab, full-rank, ...). Its
compute is the forward, backward and optimizer events (cat "compute") inside it. Per trace and
phase this prints the number of steps and the median compute, forward, backward and step time in
ms (rank R's; default 0), so a DDP trace and an AB trace from the same config compare side by
side. --png draws N steps (default 3) from the middle of each phase, back to back, as a Gantt chart
(compute lane and communication lane), one row per trace and phase, on one time scale.
"""
import argparse
import json
import statistics
import sys


def load(path, rank):
    try:
        events = json.load(open(path))["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"timeline_phases: cannot read {path}: {e}")
    mine = [e for e in events if e.get("ph") == "X" and e.get("pid") == rank]
    if not mine:
        sys.exit(f"timeline_phases: {path} has no events of rank {rank}")
    steps = sorted((e for e in mine if e.get("cat") == "phase"), key=lambda e: e["ts"])
    if not steps:
        sys.exit(f"timeline_phases: {path} has no phase events (a trace from before phases were recorded?)")
    work = sorted((e for e in mine if e.get("cat") != "phase"), key=lambda e: e["ts"])
    out, j = [], 0
    for s in steps:
        end = s["ts"] + s["dur"]
        inside = []
        while j < len(work) and work[j]["ts"] < end:
            if work[j]["ts"] >= s["ts"]:
                inside.append(work[j])
            j += 1
        out.append({"phase": s["name"], "ts": s["ts"], "dur": s["dur"], "events": inside})
    return out


def total(step, name=None, cat="compute"):
    return sum(e["dur"] for e in step["events"] if e.get("cat") == cat and (name is None or e["name"] == name))


def rows(path, steps):
    phases = list(dict.fromkeys(s["phase"] for s in steps))
    for p in phases:
        mine = [s for s in steps if s["phase"] == p]
        med = lambda f: statistics.median(f(s) for s in mine) / 1000.0
        yield {"trace": path, "phase": p, "steps": len(mine), "compute_ms": med(total),
               "forward_ms": med(lambda s: total(s, "forward")), "backward_ms": med(lambda s: total(s, "backward")),
               "step_ms": med(lambda s: s["dur"])}


def draw(traces, n, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green"}
    lanes = []
    for path, steps in traces:
        for p in dict.fromkeys(s["phase"] for s in steps):
            mine = [s for s in steps if s["phase"] == p]
            pick = mine[len(mine) // 2: len(mine) // 2 + n]  # from the middle of the phase: no start-up
            lanes.append((f"{path.split('/')[-1]}: {p}", pick))
    fig, ax = plt.subplots(figsize=(11, 0.9 * len(lanes) + 1.2))
    for i, (label, pick) in enumerate(lanes):
        at = 0.0  # the picked steps drawn back to back (a phase's steps need not be consecutive)
        for s in pick:
            ax.barh(i, s["dur"] / 1000, left=at, height=0.8, color="none", edgecolor="gray")
            for e in s["events"]:
                y, h = (i - 0.2, 0.35) if e.get("cat") == "compute" else (i + 0.2, 0.35)
                c = colors.get(e["name"], "tab:red" if e.get("cat") == "comm" else "tab:gray")
                ax.barh(y, e["dur"] / 1000, left=at + (e["ts"] - s["ts"]) / 1000, height=h, color=c)
            at += s["dur"] / 1000
    ax.set_yticks(range(len(lanes)), [l for l, _ in lanes])
    ax.invert_yaxis()
    ax.set_xlabel(f"ms ({n} steps from the middle of each phase, back to back; upper half compute, lower half "
                  "communication and waiting)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in list(colors.values()) + ["tab:red", "tab:gray"]]
    ax.legend(handles, list(colors) + ["communication", "wait/other"], loc="upper left", bbox_to_anchor=(1.0, 1.0),
              fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--png")
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    traces = [(p, load(p, a.rank)) for p in a.traces]
    table = [r for p, s in traces for r in rows(p, s)]
    cols = ["trace", "phase", "steps", "compute_ms", "forward_ms", "backward_ms", "step_ms"]
    if a.markdown:
        print("| " + " | ".join(c.replace("_ms", " (ms, median)") for c in cols) + " |")
        print("|---|---|" + "---:|" * (len(cols) - 2))
        for r in table:
            print("| " + " | ".join(f"{r[c]:.1f}" if c.endswith("_ms") else str(r[c]) for c in cols) + " |")
    else:
        for r in table:
            print(json.dumps(r))
    if a.png:
        draw(traces, a.steps, a.png)


if __name__ == "__main__":
    main()
