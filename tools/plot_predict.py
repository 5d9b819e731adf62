#!/usr/bin/python3
"""Scaling curves from `lowcomm simulate predict --json` files: step time, throughput and the
exposed-communication share of the step against the number of ranks, one line per file.

usage: tools/plot_predict.py LABEL=PREDICT.json [LABEL=PREDICT.json ...] [-o OUT.png] [--markdown] [--title T]

  -o OUT.png   the figure (Agg backend, no display needed; needs python3-matplotlib)
  --markdown   print a Markdown table: one row per file, one column per rank count, each cell the
               step time in ms and, in brackets, the throughput relative to the file's smallest
               size per rank (1.00 = linear scaling)
At least one of -o and --markdown. Every file must hold rows of one platform sweep (as written by
one `simulate predict` call); a file that is not one is an error naming it.
"""
import argparse
import json
import pathlib
import sys

KEYS = ("ranks", "predicted_step_s", "samples_per_s", "compute_s", "exposed_comm_s")


def fail(msg):
    print(f"plot_predict: {msg}", file=sys.stderr)
    sys.exit(2)


def load(spec):
    label, sep, path = spec.partition("=")
    if not sep or not label or not path:
        fail(f"'{spec}': expected LABEL=PREDICT.json")
    try:
        rows = json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError) as e:
        fail(f"{path}: cannot read ({e})")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and all(k in r for k in KEYS) for r in rows):
        fail(f"{path}: not a `lowcomm simulate predict --json` file (rows with {', '.join(KEYS)})")
    return label, sorted(rows, key=lambda r: r["ranks"])


def efficiency(rows, r):
    """Throughput per rank relative to the smallest size's (1.0 = linear scaling)."""
    base = rows[0]
    if not base["samples_per_s"] or not r["samples_per_s"]:
        return base["predicted_step_s"] / r["predicted_step_s"]
    return (r["samples_per_s"] / r["ranks"]) / (base["samples_per_s"] / base["ranks"])


def markdown(runs):
    sizes = sorted({r["ranks"] for _, rows in runs for r in rows})
    print("| run | " + " | ".join(f"{n} ranks" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for label, rows in runs:
        by = {r["ranks"]: r for r in rows}
        cells = [f"{by[n]['predicted_step_s'] * 1e3:.1f} ms ({efficiency(rows, by[n]):.2f})" if n in by else "–"
                 for n in sizes]
        print(f"| {label} | " + " | ".join(cells) + " |")


def plot(runs, out, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail(f"matplotlib is not available to {sys.executable} (Debian: apt install python3-matplotlib)")
    fig, (ax_t, ax_s, ax_c) = plt.subplots(1, 3, figsize=(16, 4.8))
    for label, rows in runs:
        n = [r["ranks"] for r in rows]
        ax_t.plot(n, [r["predicted_step_s"] * 1e3 for r in rows], "o-", label=label)
        ax_s.plot(n, [r["samples_per_s"] for r in rows], "o-", label=label)
        ax_c.plot(n, [r["exposed_comm_s"] / r["predicted_step_s"] for r in rows], "o-", label=label)
    for ax, ylabel in ((ax_t, "step time (ms)"), (ax_s, "samples / s"), (ax_c, "exposed communication / step")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks (log)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax_s.set_yscale("log")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        fail(f"cannot write {out}: {e.strerror}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="LABEL=PREDICT.json")
    ap.add_argument("-o", "--out", metavar="OUT.png")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--title")
    a = ap.parse_args()
    if not a.out and not a.markdown:
        fail("nothing to do: give -o OUT.png and/or --markdown")
    runs = [load(s) for s in a.runs]
    if a.markdown:
        markdown(runs)
    if a.out:
        plot(runs, a.out, a.title)


if __name__ == "__main__":
    main()
