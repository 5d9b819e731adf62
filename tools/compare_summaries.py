#!/usr/bin/env python3
"""Side-by-side table of `lowcomm train` summaries (summary.json files).

usage: compare_summaries.py LABEL=SUMMARY.json [LABEL=SUMMARY.json ...] [--markdown] [--json OUT]

The first summary is the baseline: "bytes vs first" is its total bytes sent divided by each
run's ("3.4x" = 3.4 times fewer bytes), "saved" the fraction of its bytes a run did not send,
and "acc vs first" the accuracy difference in percentage points. AB-training runs also show
their compression metric (parameters / full-rank parameters, as N:1) and steps per phase.
"""
import argparse
import json
import sys


def load(spec):
    if "=" not in spec:
        sys.exit(f"compare_summaries.py: expected LABEL=FILE, got '{spec}'")
    label, path = spec.split("=", 1)
    try:
        with open(path) as f:
            s = json.load(f)
    except OSError as e:
        sys.exit(f"compare_summaries.py: cannot read '{path}': {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"compare_summaries.py: '{path}' is not JSON: {e}")
    for key in ("test_accuracy", "bytes_sent", "wall_s", "steps"):
        if key not in s:
            sys.exit(f"compare_summaries.py: '{path}' is not a lowcomm summary (no '{key}')")
    return label, s


def mb(v):
    return "-" if v is None else f"{v / 2**20:,.1f} MB"


def ab_reference(ab):
    """The reference's compression metric as N:1 (summaries before it existed: our parameter ratio)."""
    return ab.get("compression_reference_n_to_1", ab.get("compression_n_to_1", 0.0))


def rows(runs):
    base_label, base = runs[0]
    out = []
    for label, s in runs:
        ab = s.get("ab")
        codec = s.get("compression", {}).get("codec", s.get("codec", "none"))
        out.append({
            "run": label,
            "strategy": s.get("strategy", "?") + ("" if codec == "none" else f"+{codec}"),
            "steps": s["steps"],
            "test accuracy": f"{100 * s['test_accuracy']:.2f} %",
            "acc vs first": f"{100 * (s['test_accuracy'] - base['test_accuracy']):+.2f} pp",
            "bytes sent": f"{s['bytes_sent'] / 2**20:,.1f} MB",
            "bytes vs first": f"{base['bytes_sent'] / max(1, s['bytes_sent']):.2f}x",
            "saved": f"{100 * (1 - s['bytes_sent'] / max(1, base['bytes_sent'])):.1f} %",
            "AB compression (ref.)": f"{ab_reference(ab):.2f}:1" if ab else "-",
            "codec ratio": f"{s.get('compression_ratio', 1.0):.2f}",
            "inter-node": mb(s.get("bytes_sent_by_link", {}).get("inter-node")),
            "wire": mb(s.get("wire", {}).get("tx_bytes")),
            "wall": f"{s['wall_s']:.0f} s",
        })
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="LABEL=summary.json; the first is the baseline")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args()
    table = rows([load(r) for r in a.runs])
    cols = list(table[0].keys())
    if a.markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + "|".join("---" for _ in cols) + "|")
        for r in table:
            print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    else:
        width = {c: max(len(c), *(len(str(r[c])) for r in table)) for c in cols}
        print("  ".join(c.ljust(width[c]) for c in cols))
        for r in table:
            print("  ".join(str(r[c]).ljust(width[c]) for c in cols))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table, f, indent=2)


if __name__ == "__main__":
    main()
