#!/usr/bin/env bash
# tools/pipeline_jitter.py on synthetic timelines: constant, equal stage times give exactly the
# (P-1)/(M+P-1) theory both at the medians and with drawn durations; jittered times give more;
# an operation run beside the other stage's compute is told apart from one run alone
# (contention); a timeline without a 2-stage pipeline is refused with a message.
set -euo pipefail
TOOL=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp" <<'PY'
import json, random, sys
tmp = sys.argv[1]
def timeline(path, steps, m, dur):
    ev, ts = [], 0
    for step in range(steps):
        for stage in (0, 1):
            for i in range(m):
                for name in ("forward", "backward"):
                    ev.append({"ph": "X", "cat": "compute", "pid": stage, "tid": 0, "name": name, "ts": ts, "dur": dur(name)})
                    ts += 1000
    json.dump({"traceEvents": ev}, open(path, "w"))
timeline(f"{tmp}/flat.json", 3, 4, lambda n: 1000 if n == "forward" else 2000)
rng = random.Random(3)
timeline(f"{tmp}/jitter.json", 6, 4, lambda n: (1000 if n == "forward" else 2000) * rng.choice([0.5, 1.0, 1.5]))
json.dump({"traceEvents": []}, open(f"{tmp}/empty.json", "w"))
# Each operation once alone and once beside the same operation of the other stage, 1.7x slower.
ev = []
for stage in (0, 1):
    for name, base, alone_at in (("forward", 10, 0 if stage == 0 else 400), ("backward", 20, 200 if stage == 0 else 500)):
        ev.append({"ph": "X", "cat": "compute", "pid": stage, "name": name, "ts": alone_at * 1000, "dur": base * 1000})
        ev.append({"ph": "X", "cat": "compute", "pid": stage, "name": name, "ts": (100 if name == "forward" else 300) * 1000,
                   "dur": base * 1700})
json.dump({"traceEvents": ev}, open(f"{tmp}/shared.json", "w"))
PY
flat=$(/usr/bin/python3 "$TOOL" "$tmp/flat.json" --micro 4 | tail -1)
jitter=$(/usr/bin/python3 "$TOOL" "$tmp/jitter.json" --micro 4 --draws 500 | tail -1)
/usr/bin/python3 - "$flat" "$jitter" <<'PY'
import json, sys
flat, jitter = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert abs(flat["theory"] - 0.2) < 1e-12, flat
assert abs(flat["bubble_medians"] - 0.2) < 1e-12 and abs(flat["bubble_with_jitter"] - 0.2) < 1e-12, flat
assert jitter["bubble_with_jitter"] > jitter["bubble_medians"] + 0.01, jitter
PY
shared=$(/usr/bin/python3 "$TOOL" "$tmp/shared.json" --micro 1 --skip-steps 0 --draws 10 | tail -1)
/usr/bin/python3 - "$shared" <<'PY'
import json, sys
c = json.loads(sys.argv[1])["contention"]
assert sorted(c) == ["stage 0 backward", "stage 0 forward", "stage 1 backward", "stage 1 forward"], c
for k, v in c.items():
    base = 10 if "forward" in k else 20
    assert abs(v["alone_ms"] - base) < 1e-9 and abs(v["both_ms"] - 1.7 * base) < 1e-9, (k, v)
    assert v["alone_spans"] == 1 and v["both_spans"] == 1, (k, v)
PY
if /usr/bin/python3 "$TOOL" "$tmp/empty.json" --micro 4 > "$tmp/out" 2>&1; then echo "FAIL: empty timeline accepted"; exit 1; fi
grep -q "2-stage pipeline run with --timeline" "$tmp/out" || { cat "$tmp/out"; echo "FAIL: no message"; exit 1; }
echo "pipeline_jitter: passed"
