#!/usr/bin/python3
"""Plot lowcomm training runs from their metrics JSONL: a 2x2 figure of training loss and test
accuracy, each against step and against MB sent (cumulative bytes_sent / 2^20).

usage: tools/plot.py RUN.jsonl [RUN2.jsonl ...] -o OUT.png [--labels a,b] [--title T] [--smooth N]

  -o OUT.png    output image (Agg backend, no display needed)
  --labels a,b  one legend label per run (default: each file's stem)
  --title T     figure title
  --smooth N    trailing moving average of the loss over N step lines (default 1 = none)

Only lines with "type": "step" or "eval" are read; other types and unknown keys are ignored. A run
needs at least one step line; a run without eval lines just has no line in the accuracy panels.
The MB axes are logarithmic when the runs' total bytes sent differ by more than 20x.
Needs matplotlib (Debian: python3-matplotlib, i.e. run with /usr/bin/python3 if another python3
comes first on PATH).
"""
import argparse
import json
import pathlib
import sys

MB = float(1 << 20)
STEP_KEYS = ("step", "loss", "bytes_sent")
EVAL_KEYS = ("step", "test_accuracy", "bytes_sent")


def fail(msg):
    sys.exit(f"plot: {msg}")


def load(path):
    """Return (steps, evals): lists of tuples of STEP_KEYS / EVAL_KEYS values, in file order."""
    runs = {"step": [], "eval": []}
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line.rstrip())
            except json.JSONDecodeError as e:
                fail(f"{path}:{n}: invalid JSON: {e.msg} (column {e.colno})")
            if not isinstance(row, dict):
                fail(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
            kind = row.get("type")
            if kind not in runs:
                continue
            keys = STEP_KEYS if kind == "step" else EVAL_KEYS
            vals = []
            for k in keys:
                v = row.get(k)
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    got = f"got {v!r}" if k in row else "missing"
                    fail(f"{path}:{n}: {kind} line needs a number for '{k}' ({got})")
                vals.append(float(v))
            runs[kind].append(tuple(vals))
    if not runs["step"]:
        fail(f"{path}: no step lines (lines with \"type\": \"step\")")
    return runs["step"], runs["eval"]


def smooth(ys, n):
    """Trailing moving average over up to n points (shorter window at the start)."""
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= n:
            acc -= ys[i - n]
        out.append(acc / min(i + 1, n))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="RUN.jsonl")
    ap.add_argument("-o", "--out", required=True, metavar="OUT.png")
    ap.add_argument("--labels", help="comma-separated, one per run")
    ap.add_argument("--title")
    ap.add_argument("--smooth", type=int, default=1, metavar="N")
    a = ap.parse_args()
    if a.smooth < 1:
        fail(f"--smooth must be >= 1, got {a.smooth}")
    labels = a.labels.split(",") if a.labels else [pathlib.Path(p).stem for p in a.runs]
    if len(labels) != len(a.runs):
        fail(f"--labels has {len(labels)} labels for {len(a.runs)} runs")
    data = [load(p) for p in a.runs]

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail(f"matplotlib is not available to {sys.executable} (Debian: apt install python3-matplotlib)")

    totals = [max(r[2] for r in steps + evals) for steps, evals in data]
    log_bytes = min(totals) > 0 and max(totals) / min(totals) > 20
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    (loss_step, loss_mb), (acc_step, acc_mb) = axes
    loss_name = "training loss" + (f" (moving avg {a.smooth})" if a.smooth > 1 else "")
    for i, ((steps, evals), label) in enumerate(zip(data, labels)):
        color = f"C{i % 10}"
        loss = smooth([r[1] for r in steps], a.smooth)
        loss_step.plot([r[0] for r in steps], loss, color=color, label=label)
        loss_mb.plot([r[2] / MB for r in steps], loss, color=color, label=label)
        if evals:
            acc = [r[1] for r in evals]
            acc_step.plot([r[0] for r in evals], acc, "o-", color=color, ms=3, label=label)
            acc_mb.plot([r[2] / MB for r in evals], acc, "o-", color=color, ms=3, label=label)
    for ax, ylabel, xlabel in ((loss_step, loss_name, "step"), (loss_mb, loss_name, "MB sent"),
                               (acc_step, "test accuracy", "step"), (acc_mb, "test accuracy", "MB sent")):
        ax.set_xlabel(xlabel + (" (log)" if xlabel == "MB sent" and log_bytes else ""))
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both" if xlabel == "MB sent" and log_bytes else "major", alpha=0.3)
        if xlabel == "MB sent" and log_bytes:
            ax.set_xscale("log", nonpositive="mask")
        if ax.lines:
            ax.legend()
        else:
            ax.text(0.5, 0.5, "no eval lines", ha="center", va="center", transform=ax.transAxes)
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    try:
        fig.savefig(a.out, dpi=110)
    except OSError as e:
        fail(f"cannot write {a.out}: {e.strerror}")


if __name__ == "__main__":
    main()
