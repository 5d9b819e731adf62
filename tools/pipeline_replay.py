#!/usr/bin/python3
"""Replays a pipeline run's schedule with its own measured compute times and free communication:
the bubble the schedule leaves when every stage runs on its own, undisturbed processor.

usage: tools/pipeline_replay.py TIMELINE --stages P --micro M [--schedule gpipe|1f1b|interleaved]
                                [--virtual V] [--skip-steps 1] [--draws 2000] [--seed 1]

TIMELINE is `lowcomm train ... --set parallel.pp=P --set parallel.micro_batches=M
--set parallel.schedule=S [--set parallel.virtual_stages=V] --timeline T` with dp = tp = 1
(process s is stage s). Each stage's "forward" and "backward" compute spans are assigned, step by
step, to the operation the schedule runs at that position (pipeline.h: GPipe, 1F1B, or interleaved
1F1B with forward step k on chunk (k mod P V) / P, micro-batch (k / P V) P + k mod P). The replay
runs every stage's operations in the schedule's order, each starting when the stage is free and
its input exists (the previous chunk's forward of the same micro-batch; for a backward the next
chunk's backward, or its own forward on the last chunk), messages taking no time. Prints the
bubble (1 - compute / step time, mean over stages) with every operation at its median duration
(per stage, chunk and direction), and the mean over --draws steps whose durations are drawn from
the measured ones, next to the theory (P - 1) / (V M + P - 1). The measured bubble of the run
itself is in its summary (parallel.pipeline.bubble_fraction).
"""
import argparse
import json
import random
import statistics
import sys


def schedule(kind, p, v, m, s):
    """Stage s's operations in order: (direction 'F' | 'B', local chunk, micro-batch)."""
    if kind == "gpipe":
        return [("F", 0, i) for i in range(m)] + [("B", 0, i) for i in range(m)]
    if kind == "1f1b":
        w = min(p - s - 1, m)
        ops = [("F", 0, i) for i in range(w)]
        for i in range(m - w):
            ops += [("F", 0, w + i), ("B", 0, i)]
        return ops + [("B", 0, i) for i in range(m - w, m)]
    total = m * v
    chunk = lambda k, fwd: (k % (p * v)) // p if fwd else v - 1 - (k % (p * v)) // p
    micro = lambda k: (k // (p * v)) * p + k % p
    w = min(2 * (p - s - 1) + (v - 1) * p, total)
    ops = [("F", chunk(k, True), micro(k)) for k in range(w)]
    for k in range(total - w):
        ops += [("F", chunk(w + k, True), micro(w + k)), ("B", chunk(k, False), micro(k))]
    return ops + [("B", chunk(k, False), micro(k)) for k in range(total - w, total)]


def durations(path, kind, p, v, m, skip):
    """{(stage, direction, chunk): [ms, ...]} from the timeline's compute spans."""
    t = json.load(open(path))
    events = t["traceEvents"] if isinstance(t, dict) else t
    out = {}
    for s in range(p):
        ops = schedule(kind, p, v, m, s)
        for d, name in (("F", "forward"), ("B", "backward")):
            spans = sorted((e["ts"], e["dur"] / 1000.0) for e in events if e.get("ph") == "X" and
                           e.get("cat") == "compute" and e.get("pid") == s and e.get("name") == name)
            chunks = [c for (dd, c, _) in ops if dd == d]
            if len(spans) % len(chunks):
                sys.exit(f"stage {s}: {len(spans)} {name} spans are not whole steps of {len(chunks)}")
            for i, (_, ms) in enumerate(spans[skip * len(chunks):]):
                out.setdefault((s, d, chunks[i % len(chunks)]), []).append(ms)
    return out


def replay(kind, p, v, m, dur):
    """Bubble of one step whose operation (stage, direction, chunk) takes dur(...) ms."""
    g = p * v
    done, free, busy = {}, [0.0] * p, [0.0] * p
    queues = [list(schedule(kind, p, v, m, s)) for s in range(p)]
    while any(queues):
        moved = False
        for s in range(p):
            while queues[s]:
                d, c, i = queues[s][0]
                gc = c * p + s
                dep = (("F", gc - 1, i) if gc > 0 else None) if d == "F" else \
                      (("F", gc, i) if gc == g - 1 else ("B", gc + 1, i))
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep else 0.0)
                t = dur(s, d, c)
                free[s] = done[(d, gc, i)] = start + t
                busy[s] += t
                queues[s].pop(0)
                moved = True
        if not moved:
            sys.exit("the schedule deadlocks")
    end = max(free)
    return statistics.mean(1 - b / end for b in busy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("timeline")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--micro", type=int, required=True)
    ap.add_argument("--schedule", default="1f1b", choices=("gpipe", "1f1b", "interleaved"))
    ap.add_argument("--virtual", type=int, default=1)
    ap.add_argument("--skip-steps", type=int, default=1)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    p, v, m = a.stages, (a.virtual if a.schedule == "interleaved" else 1), a.micro
    d = durations(a.timeline, a.schedule, p, v, m, a.skip_steps)
    med = {k: statistics.median(x) for k, x in d.items()}
    rng = random.Random(a.seed)
    median_bubble = replay(a.schedule, p, v, m, lambda s, dd, c: med[(s, dd, c)])
    drawn = statistics.mean(replay(a.schedule, p, v, m, lambda s, dd, c: rng.choice(d[(s, dd, c)]))
                            for _ in range(a.draws))
    theory = (p - 1) / (v * m + p - 1)
    print(f"{a.schedule} P={p} V={v} M={m}: theory {theory:.3f}, replay with medians {median_bubble:.3f}, "
          f"with drawn durations {drawn:.3f} ({a.draws} steps)")
    for k in sorted(med):
        print(f"  stage {k[0]} chunk {k[2]} {'forward ' if k[1] == 'F' else 'backward'}: median {med[k]:.1f} ms "
              f"({len(d[k])} spans)")


if __name__ == "__main__":
    main()
