#!/usr/bin/python3
"""Markdown table from `lowcomm bench collectives --json` rows, with each row's speed relative
to the c10d-gloo baseline of the same op and size measured in the same run.

usage: tools/bench_table.py ROWS.json [--ops allreduce,...]
"""
import argparse
import json
import sys


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows")
    ap.add_argument("--ops", default="")
    a = ap.parse_args()
    try:
        rows = json.load(open(a.rows))
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"bench_table: cannot read {a.rows}: {e}")
    ops = set(a.ops.split(",")) if a.ops else None
    base = {(r["op"], r["bytes"]): r for r in rows if r["backend"] == "c10d-gloo"}
    print("| op | size | world | algo | backend | time (us) | busbw (GB/s) | vs c10d-gloo | wrong |")
    print("|---|---:|---:|---|---|---:|---:|---:|---:|")
    for r in rows:
        if ops and r["op"] not in ops:
            continue
        b = base.get((r["op"], r["bytes"]))
        ratio = f"{b['time_us'] / r['time_us']:.2f}x" if b else "-"
        print(f"| {r['op']} | {human(r['bytes'])} | {r['world']} | {r['algo']} | {r['backend']} | "
              f"{r['time_us']:.1f} | {r['busbw_GBps']:.3f} | {ratio} | {r['wrong']} |")


if __name__ == "__main__":
    main()
