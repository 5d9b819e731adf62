#!/usr/bin/python3
"""Plot lowcomm training runs from their metrics JSONL: a 2x2 figure of training loss and test
accuracy, each against step and against MB sent (cumulative bytes_sent / 2^20).

usage: tools/plot.py RUN.jsonl [RUN2.jsonl ...] -o OUT.png [--labels a,b] [--title T] [--smooth N]
       tools/plot.py --e2e E2E.json -o OUT.png [--title T]
       tools/plot.py --sites-lm SITES_LM.json -o OUT.png [--title T]

  -o OUT.png    output image (Agg backend, no display needed)
  --labels a,b  one legend label per run (default: each file's stem)
  --title T     figure title
  --smooth N    trailing moving average of the loss over N step lines (default 1 = none)

  --e2e FILE    instead: bench/e2e's result file; one row of panels per setting, test accuracy
                against wall time and against wire MB per rank (each evaluation's payload
                bytes x the run's measured wire/payload ratio; payload where no wire was measured)

  --sites-lm FILE  instead: bench/sites_lm's result file; validation bits per byte against
                tokens, wall time and inter-site MB (all ranks, log), one colour per strategy

A language model's eval lines carry "bits_per_byte": those runs plot validation bits per byte
instead of test accuracy (runs of both kinds in one figure are an error).
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
    """Return (steps, evals, metric): lists of tuples of STEP_KEYS / EVAL_KEYS values, in file
    order; a language model's evals (lines with "bits_per_byte") hold that instead of
    test_accuracy, and metric names which one."""
    runs = {"step": [], "eval": []}
    kinds = {}
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
            if kind == "eval":
                lm = "bits_per_byte" in row
                if lm:
                    keys = ("step", "bits_per_byte", "bytes_sent")
                if kinds.setdefault("lm", lm) != lm:
                    fail(f"{path}:{n}: eval lines with and without bits_per_byte in one run")
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
    metric = "validation bits per byte" if kinds.get("lm") else "test accuracy"
    return runs["step"], runs["eval"], metric


def smooth(ys, n):
    """Trailing moving average over up to n points (shorter window at the start)."""
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= n:
            acc -= ys[i - n]
        out.append(acc / min(i + 1, n))
    return out


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail(f"matplotlib is not available to {sys.executable} (Debian: apt install python3-matplotlib)")
    return plt


def save(fig, out, title, dpi=100):
    """Title, layout and the PNG; a write error is a clear message, not a traceback."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=dpi)
    except OSError as e:
        fail(f"cannot write {out}: {e.strerror}")


def strategy_colours(rows):
    """One colour per strategy, the same in every setting's panels (tab20: up to 20 distinct)."""
    import matplotlib
    cmap = matplotlib.colormaps["tab20"] if hasattr(matplotlib, "colormaps") else matplotlib.cm.get_cmap("tab20")
    order = list(dict.fromkeys(r["strategy"] for r in rows))
    return {s: cmap(i % 20) for i, s in enumerate(order)}


def plot_e2e(path, out, title):
    """bench/e2e rows: accuracy vs wall time and vs wire bytes, one row of panels per setting."""
    try:
        doc = json.loads(pathlib.Path(path).read_text())
        rows, target = doc["rows"], doc["target"]
        settings = list(dict.fromkeys(r["setting"] for r in rows))
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"{path}: not a bench/e2e result file ({e})")
    if not rows:
        fail(f"{path}: no rows")
    plt = pyplot()
    colour = strategy_colours(rows)
    fig, axes = plt.subplots(len(settings), 2, figsize=(12, 4.2 * len(settings)), squeeze=False)
    for (ax_t, ax_w), setting in zip(axes, settings):
        for r in (x for x in rows if x["setting"] == setting):
            ev = r.get("evals") or []
            if not ev:
                continue
            scale = r.get("wire_over_payload") or 1.0
            acc = [e["accuracy"] for e in ev]
            kw = dict(color=colour[r["strategy"]], ms=3, label=r["strategy"])
            ax_t.plot([e["time_s"] for e in ev], acc, "o-", **kw)
            ax_w.plot([max(e["bytes_sent"] * scale, 1) / 1e6 for e in ev], acc, "o-", **kw)
        wired = any(r.get("wire_over_payload") for r in rows if r["setting"] == setting)
        for ax, xlabel in ((ax_t, "wall time (s)"),
                           (ax_w, ("wire" if wired else "payload") + " MB per rank (log)")):
            ax.axhline(target, color="grey", ls=":", lw=1)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("test accuracy")
            ax.set_title(setting)
            ax.grid(True, alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=8)
        ax_w.set_xscale("log")
    save(fig, out, title)


def plot_sites_lm(path, out, title):
    """bench/sites_lm rows: bits per byte against tokens, wall time and inter-site bytes."""
    try:
        rows = json.loads(pathlib.Path(path).read_text())["rows"]
        series = [(r["strategy"], r["tokens_per_step"], r["evals"]) for r in rows if r["evals"]]
        for _, _, ev in series:
            for e in ev:
                e["step"], e["time_s"], e["bits_per_byte"], e["inter_site_bytes"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"{path}: not a bench/sites_lm result file ({e!r})")
    if not rows:
        fail(f"{path}: no rows")
    plt = pyplot()
    colour = strategy_colours(rows)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    for name, tokens, ev in series:
        kw = dict(color=colour[name], ms=3, label=name)
        bpb = [e["bits_per_byte"] for e in ev]
        axes[0].plot([e["step"] * tokens / 1e6 for e in ev], bpb, "o-", **kw)
        axes[1].plot([e["time_s"] for e in ev], bpb, "o-", **kw)
        axes[2].plot([max(e["inter_site_bytes"], 1) / 1e6 for e in ev], bpb, "o-", **kw)
    for ax, xlabel in zip(axes, ("tokens (millions)", "wall time (s)", "inter-site MB, all ranks (log)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("validation bits per byte")
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    axes[2].set_xscale("log")
    save(fig, out, title)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", metavar="RUN.jsonl")
    ap.add_argument("--e2e", metavar="E2E.json")
    ap.add_argument("--sites-lm", metavar="SITES_LM.json")
    ap.add_argument("-o", "--out", required=True, metavar="OUT.png")
    ap.add_argument("--labels", help="comma-separated, one per run")
    ap.add_argument("--title")
    ap.add_argument("--smooth", type=int, default=1, metavar="N")
    a = ap.parse_args()
    if a.e2e:
        if a.runs:
            fail("--e2e takes no RUN.jsonl arguments")
        return plot_e2e(a.e2e, a.out, a.title)
    if a.sites_lm:
        if a.runs:
            fail("--sites-lm takes no RUN.jsonl arguments")
        return plot_sites_lm(a.sites_lm, a.out, a.title)
    if not a.runs:
        fail("no RUN.jsonl given")
    if a.smooth < 1:
        fail(f"--smooth must be >= 1, got {a.smooth}")
    labels = a.labels.split(",") if a.labels else [pathlib.Path(p).stem for p in a.runs]
    if len(labels) != len(a.runs):
        fail(f"--labels has {len(labels)} labels for {len(a.runs)} runs")
    data = [load(p) for p in a.runs]
    metrics = {m for steps, evals, m in data if evals}
    if len(metrics) > 1:
        fail("the runs mix language models (bits per byte) and classifiers (test accuracy)")
    metric = metrics.pop() if metrics else "test accuracy"
    data = [(steps, evals) for steps, evals, _ in data]

    plt = pyplot()
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
                               (acc_step, metric, "step"), (acc_mb, metric, "MB sent")):
        ax.set_xlabel(xlabel + (" (log)" if xlabel == "MB sent" and log_bytes else ""))
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both" if xlabel == "MB sent" and log_bytes else "major", alpha=0.3)
        if xlabel == "MB sent" and log_bytes:
            ax.set_xscale("log", nonpositive="mask")
        if ax.lines:
            ax.legend()
        else:
            ax.text(0.5, 0.5, "no eval lines", ha="center", va="center", transform=ax.transAxes)
    save(fig, a.out, a.title, dpi=110)


if __name__ == "__main__":
    main()
