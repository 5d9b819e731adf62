#!/usr/bin/env bash
# tools/pipeline_jitter.py on synthetic timelines: constant, equal stage times give exactly the
# (P-1)/(M+P-1) theory both at the medians and with drawn durations; jittered times give more;
# a timeline without a 2-stage pipeline is refused with a message.
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
if /usr/bin/python3 "$TOOL" "$tmp/empty.json" --micro 4 > "$tmp/out" 2>&1; then echo "FAIL: empty timeline accepted"; exit 1; fi
grep -q "2-stage pipeline run with --timeline" "$tmp/out" || { cat "$tmp/out"; echo "FAIL: no message"; exit 1; }
echo "pipeline_jitter: passed"
