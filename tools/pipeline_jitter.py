#!/usr/bin/python3
"""What compute-time jitter does to a 2-stage 1F1B pipeline's bubble, from a real run's timeline.

usage: tools/pipeline_jitter.py TIMELINE --micro M [--skip-steps 1] [--draws 4000] [--seed 1]

TIMELINE is `lowcomm train ... --set parallel.pp=2 --set parallel.schedule=1f1b --timeline T`
(dp = tp = 1: process 0 is stage 0, process 1 stage 1). From its "forward" and "backward"
compute spans (the first --skip-steps steps dropped), the 1F1B step is replayed with pipeline.cpp's
dependencies and free communication: stage 0 runs one warm-up forward, then each exchange
(activation i+1 down, gradient i up) starts when both stages reach it; stage 1 starts with
forward 0 once stage 0 has run it; stage 0 ends with the last backward. Prints the bubble
(1 - compute / step time, mean of the two stages) with every duration at its median, and the
mean over --draws steps whose durations are drawn from the measured ones, next to the theory
1 / (M + 1). Equal medians give the theory; the gap between the two numbers is what jitter costs.
It also prints each operation's median time when it ran alone and when it ran beside the other
stage's compute ("contention"): two processes on cores that share execution units slow each other.
"""
import argparse
import json
import random
import statistics
import sys


def spans(path):
    t = json.load(open(path))
    events = t["traceEvents"] if isinstance(t, dict) else t
    out = {}
    for stage in (0, 1):
        for name in ("forward", "backward"):
            d = sorted((e["ts"], e["dur"] / 1000.0) for e in events
                       if e.get("ph") == "X" and e.get("cat") == "compute" and e.get("pid") == stage and e.get("name") == name)
            out[(stage, name)] = d
    return out


def overlap(span, others):
    """Fraction of `span` (ts in us, dur in ms) during which one of `others` runs."""
    a, b = span[0], span[0] + span[1] * 1000.0
    return sum(max(0.0, min(b, t + d * 1000.0) - max(a, t)) for t, d in others) / max(b - a, 1e-9)


def contention(timed):
    """Median duration of each operation run alone (the other stage computing < 10 % of it) and
    beside the other stage's compute (> 90 %): on cores that share execution units the second is
    slower, which the theory (one independent processor per stage) does not have."""
    out = {}
    for s in (0, 1):
        other = sorted(timed[(1 - s, "forward")] + timed[(1 - s, "backward")])
        for n in ("forward", "backward"):
            alone = [d for t, d in timed[(s, n)] if overlap((t, d), other) < 0.1]
            both = [d for t, d in timed[(s, n)] if overlap((t, d), other) > 0.9]
            if alone and both:
                out[f"stage {s} {n}"] = {"alone_ms": statistics.median(alone), "both_ms": statistics.median(both),
                                         "alone_spans": len(alone), "both_spans": len(both)}
    return out


def step_bubble(m, draw):
    f0 = [draw(0, "forward") for _ in range(m)]
    b0 = [draw(0, "backward") for _ in range(m)]
    f1 = [draw(1, "forward") for _ in range(m)]
    b1 = [draw(1, "backward") for _ in range(m)]
    s1 = f0[0] + f1[0] + b1[0]                    # stage 1: forward 0 after stage 0's, then backward 0
    s0 = f0[0] + (f0[1] if m > 1 else 0.0)        # stage 0: warm-up forward 0, forward 1
    for i in range(m - 1):                        # exchange i: activation i+1 down, gradient i up
        r = max(s0, s1)
        s0 = r + b0[i] + (f0[i + 2] if i + 2 < m else 0.0)
        s1 = r + f1[i + 1] + b1[i + 1]
    end = max(s0, s1) + b0[m - 1]
    return 1.0 - (sum(f0) + sum(b0) + sum(f1) + sum(b1)) / (2.0 * end)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("timeline")
    ap.add_argument("--micro", type=int, required=True)
    ap.add_argument("--skip-steps", type=int, default=1)
    ap.add_argument("--draws", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    m = a.micro
    if m < 1:
        sys.exit("--micro must be >= 1")
    timed = {k: v[a.skip_steps * m:] for k, v in spans(a.timeline).items()}
    d = {k: [x for _, x in v] for k, v in timed.items()}
    for k, v in d.items():
        if len(v) < m:
            sys.exit(f"{a.timeline}: stage {k[0]} has {len(v)} {k[1]} spans after skipping {a.skip_steps} steps "
                     f"(need a 2-stage pipeline run with --timeline and at least {m} micro-batches)")
    rng = random.Random(a.seed)
    medians = step_bubble(m, lambda s, n: statistics.median(d[(s, n)]))
    drawn = statistics.mean(step_bubble(m, lambda s, n: rng.choice(d[(s, n)])) for _ in range(a.draws))
    for s in (0, 1):
        for n in ("forward", "backward"):
            v = d[(s, n)]
            print(f"stage {s} {n}: median {statistics.median(v):.1f} ms, stdev {statistics.pstdev(v):.1f} ms, "
                  f"range {min(v):.1f}-{max(v):.1f} ms ({len(v)} spans)")
    c = contention(timed)
    for k, v in c.items():
        print(f"{k}: median {v['alone_ms']:.1f} ms alone ({v['alone_spans']} spans), {v['both_ms']:.1f} ms beside the "
              f"other stage's compute ({v['both_spans']} spans): x{v['both_ms'] / v['alone_ms']:.2f}")
    print(json.dumps({"micro_batches": m, "theory": 1.0 / (m + 1), "bubble_medians": medians,
                      "bubble_with_jitter": drawn, "contention": c}))


if __name__ == "__main__":
    main()
