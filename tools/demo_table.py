#!/usr/bin/env python3
"""The table scripts/demo ends with: one row per training run it made, in words a newcomer reads.

usage: tools/demo_table.py SUMMARY.json E2E.json [COLLECTIVES.json]

SUMMARY.json is a `lowcomm train --summary` file (the demo's first run, on this machine); E2E.json
is `bench/e2e`'s result (its rows: DDP and AB on the emulated cluster, or locally). Per run: the
strategy, the network, epochs, final test accuracy, wall time, when it first reached the DDP
run's final accuracy (bench/e2e rows), and bytes sent per rank: the wire bytes the cluster's links
carried when there is a cluster, else the payload our traffic meter counted. COLLECTIVES.json
(`lowcomm bench collectives --json`) adds a line on the largest allreduce against c10d-gloo.
"""
import json
import re
import sys

STRATEGY_NAMES = {  # bench/e2e strategy name -> words
    "ddp": "DDP (plain data parallel)",
    "ab_tuned_powersgd_3ep": "AB-training + PowerSGD",
    "ab_tuned_powersgd": "AB-training + PowerSGD",
    "ab": "AB-training",
    "topk": "DDP + top-k",
    "powersgd": "DDP + PowerSGD",
    "auto": "DDP + auto codec",
}


def network(row):
    if row["rate"] == "loopback":
        return f"1 machine, {row['world']} processes"
    m = re.fullmatch(r"([\d.]+)(k|m|g)?bit", row["rate"])
    rate = f"{m[1]} {(m[2] or '').upper()}bit/s" if m else row["rate"]
    return f"{row['nodes']} nodes x {row['procs_per_node']} processes, {rate} links"


def mb(b):
    return "-" if b is None else f"{b / 1e6:,.1f} MB"


def rows(summary, e2e):
    s = summary
    out = [{"strategy": STRATEGY_NAMES.get(s["strategy"], s["strategy"]), "network": f"1 machine, {s['world']} processes",
            "epochs": s["epochs"], "accuracy": s["test_accuracy"], "wall_s": s["wall_s"], "to_ddp": None,
            "bytes": s["bytes_sent"] / s["world"], "bytes_kind": "payload"}]
    ddp = next((r for r in e2e["rows"] if r["strategy"] == "ddp"), None)
    for r in e2e["rows"]:
        to_ddp = None
        if ddp:
            to_ddp = next((e["time_s"] for e in r["evals"] if e["accuracy"] >= ddp["final_accuracy"]), None)
        wire = r.get("wire_bytes_per_rank")
        out.append({"strategy": STRATEGY_NAMES.get(r["strategy"], r["strategy"]), "network": network(r),
                    "epochs": r.get("epochs"), "accuracy": r["final_accuracy"],
                    "wall_s": r["wall_s"], "to_ddp": to_ddp,
                    "bytes": wire if wire is not None else r["payload_bytes_per_rank"],
                    "bytes_kind": "wire" if wire is not None else "payload"})
    return out


def table(rs, ddp_accuracy):
    head = ["run", "strategy", "network", "epochs", "test accuracy", "time",
            f"time to {100 * ddp_accuracy:.2f} %" if ddp_accuracy else "time to DDP's accuracy", "sent per rank"]
    lines = []
    for i, r in enumerate(rs, 1):
        to = "-" if i == 1 else ("not reached" if r["to_ddp"] is None else f"{r['to_ddp']:.0f} s")
        epochs = "-" if r["epochs"] is None else f"{r['epochs']:.2g}"
        lines.append([str(i), r["strategy"], r["network"], epochs, f"{100 * r['accuracy']:.2f} %",
                      f"{r['wall_s']:.0f} s", to, f"{mb(r['bytes'])} ({r['bytes_kind']})"])
    width = [max(len(x) for x in col) for col in zip(head, *lines)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, width)).rstrip()
    return "\n".join([fmt(head), fmt(["-" * w for w in width])] + [fmt(l) for l in lines])


def collectives_line(path):
    rows_ = [r for r in json.load(open(path)) if r["op"] == "allreduce" and not r.get("wrong")]
    if not rows_:
        return None
    size = max(r["bytes"] for r in rows_)
    ours = [r for r in rows_ if r["bytes"] == size and r["backend"] == "lowcomm"]
    gloo = [r for r in rows_ if r["bytes"] == size and r["backend"] == "c10d-gloo"]
    if not ours or not gloo:
        return None
    best = max(ours, key=lambda r: r["busbw_GBps"])
    return (f"allreduce of {size / 2**20:.0f} MiB on 4 processes: lowcomm ({best['algo']}) {best['busbw_GBps']:.2f} GB/s, "
            f"PyTorch's Gloo {gloo[0]['busbw_GBps']:.2f} GB/s ({best['busbw_GBps'] / gloo[0]['busbw_GBps']:.1f}x)")


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    summary, e2e = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    rs = rows(summary, e2e)
    ddp = next((r for r in e2e["rows"] if r["strategy"] == "ddp"), None)
    print("\n== What the demo measured")
    print(table(rs, ddp["final_accuracy"] if ddp else None))
    print("(time: wall time of the whole run, evaluations included; sent per rank: wire = bytes on the emulated "
          "links, payload = what lowcomm sent, where there are no links)")
    if len(sys.argv) == 4:
        line = collectives_line(sys.argv[3])
        if line:
            print(line)


if __name__ == "__main__":
    main()
