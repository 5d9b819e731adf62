#!/usr/bin/python3
"""Markdown table from `lowcomm train --summary` files of runs that differ in compress.codec:
accuracy and traffic of each codec against the uncompressed run ("none") of the same set.

usage: tools/compress_table.py SUMMARY.json...
"""
import json
import os
import sys

ORDER = ["none", "fp16", "bf16", "int8", "qsgd", "terngrad", "signsgd", "signum", "efsignsgd",
         "onebit", "topk", "randomk", "threshold", "dgc", "powersgd", "auto"]


def load(path):
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"compress_table: cannot read {path}: {e}")
    for key in ("test_accuracy", "bytes_sent_per_rank", "wall_s", "steps"):
        if key not in s:
            sys.exit(f"compress_table: {path} has no '{key}' (not a lowcomm train summary)")
    s.setdefault("codec", os.path.splitext(os.path.basename(path))[0])
    # Gradient traffic of rank 0 (the "grad" phase); evaluation and setup traffic excluded.
    s["grad_bytes"] = s.get("bytes_by_phase", {}).get("grad", {}).get("sent", s["bytes_sent_per_rank"])
    return s


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip())
    runs = [load(p) for p in sys.argv[1:]]
    runs.sort(key=lambda s: ORDER.index(s["codec"]) if s["codec"] in ORDER else len(ORDER))
    base = next((s for s in runs if s["codec"] == "none"), None)
    if len({s["steps"] for s in runs}) > 1:
        sys.exit("compress_table: runs have different step counts: " +
                 ", ".join(f"{s['codec']}={s['steps']}" for s in runs))
    print("| codec | memory | test accuracy | vs none (pp) | gradient bytes sent (rank 0) | fewer than none |"
          " codec ratio | wall (s) | codec time (s) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in runs:
        c = s.get("compression", {})
        acc = 100 * s["test_accuracy"]
        delta = f"{acc - 100 * base['test_accuracy']:+.2f}" if base else "n/a"
        fewer = f"{base['grad_bytes'] / max(1, s['grad_bytes']):.1f}x" if base else "n/a"
        print(f"| {s['codec']} | {c.get('memory', 'none')} | {acc:.2f} % | {delta} | {s['grad_bytes']:,} |"
              f" {fewer} | {c.get('ratio', 1.0):.1f} | {s['wall_s']:.0f} | {c.get('codec_s', 0.0):.1f} |")


if __name__ == "__main__":
    main()
