#!/usr/bin/env python3
"""Per-layer AB-training table: kept rank and parameters after every SVD of one run.

Reads RUN_DIR/summary.json (the "ab.layers" shapes) and RUN_DIR/metrics.jsonl (the "ab" events:
"svd" after warmup, then every "truncate") and prints, per factorised layer, its shape, full
rank, full parameters (rows x cols) and the kept rank after each event, then the parameters of
A and B after the last one. The last lines give the reference's compression metric after each
event (docs/ab-training.md) and which layers hold most of the remaining parameters.

usage: tools/ab_layers.py RUN_DIR [--markdown] [--json FILE]
"""
import argparse
import json
import os
import sys


def load(run):
    summary_path, metrics_path = os.path.join(run, "summary.json"), os.path.join(run, "metrics.jsonl")
    for p in (summary_path, metrics_path):
        if not os.path.isfile(p):
            sys.exit(f"ab_layers: no {p}")
    summary = json.load(open(summary_path))
    if "ab" not in summary or "layers" not in summary["ab"]:
        sys.exit(f"ab_layers: {summary_path} is not an AB-training summary with per-layer data")
    events = []
    for n, line in enumerate(open(metrics_path), 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            sys.exit(f"ab_layers: {metrics_path}:{n} is not JSON")
        if rec.get("type") == "ab" and rec.get("event") in ("svd", "truncate"):
            events.append(rec)
    return summary, events


def table(summary, events):
    layers = summary["ab"]["layers"]
    head = ["layer", "shape", "full rank", "params full"] + [f"rank @{e['step']}" for e in events] + ["params A+B (last)", "share of last"]
    rows = []
    last_total = sum(l["params_factors"] for l in layers) or 1
    for l in layers:
        ranks = [e.get("ranks", {}).get(l["name"], "-") for e in events]
        rows.append([l["name"], f"{l['rows']}x{l['cols']}", l["full_rank"], l["params_full"]] + ranks +
                    [l["params_factors"], f"{100 * l['params_factors'] / last_total:.1f} %"])
    ref = ["compression (reference)", "", "", ""] + [f"{e.get('compression_reference_n_to_1', 0):.2f}:1" for e in events] + ["", ""]
    return head, rows + [ref]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="a lowcomm train output directory (logging.out_dir)")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--json", help="also write {head, rows} here")
    a = p.parse_args()
    summary, events = load(a.run)
    head, rows = table(summary, events)
    if a.json:
        json.dump({"head": head, "rows": rows}, open(a.json, "w"), indent=1)
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(str(x) for x in r) + " |")
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
        for r in [head] + rows:
            print("  ".join(str(x).rjust(w) for x, w in zip(r, widths)))


if __name__ == "__main__":
    main()
