#!/usr/bin/python3
"""How much communication a `lowcomm train --timeline` trace hides behind computation.

usage: tools/timeline_overlap.py TIMELINE.json

For each rank: total time of communication events (cat "comm"), the part of it that overlaps
computation events on the same rank (cat "compute": forward, backward, optimizer), and the
time the training thread waited (cat "wait").
"""
import json
import sys


def merged(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap(a, merged_b):
    total = 0.0
    for s, e in a:
        for bs, be in merged_b:
            total += max(0.0, min(e, be) - max(s, bs))
    return total


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        events = json.load(open(sys.argv[1]))["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"timeline_overlap: cannot read {sys.argv[1]}: {e}")
    ranks = sorted({e["pid"] for e in events if e.get("ph") == "X"})
    print("| rank | comm (s) | hidden behind compute (s) | hidden | waited (s) |")
    print("|---:|---:|---:|---:|---:|")
    for r in ranks:
        ev = [e for e in events if e.get("ph") == "X" and e["pid"] == r]
        comm = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["cat"] == "comm"]
        compute = merged([(e["ts"], e["ts"] + e["dur"]) for e in ev if e["cat"] == "compute"])
        wait = sum(e["dur"] for e in ev if e["cat"] == "wait")
        c = sum(e - s for s, e in comm)
        h = overlap(comm, compute)
        print(f"| {r} | {c / 1e6:.2f} | {h / 1e6:.2f} | {100 * h / c if c else 0:.0f} % | {wait / 1e6:.2f} |")


if __name__ == "__main__":
    main()
