#!/usr/bin/env bash
# Test for bench/e2e's report, without training: synthetic kept runs (summary.json, run/metrics.jsonl)
# of a local2 setting are collected into e2e.json / e2e.md / e2e.png; the wire columns of a cluster
# setting are checked by calling the script's functions (cluster settings need root and tools/cluster);
# a run that is not kept goes to the (fake) binary; argument errors; plot.py --e2e's error cases.
# usage: test_e2e_report.sh PATH/TO/bench/e2e PATH/TO/plot.py
#        (interpreter: $PYTHON, else the first python3 with matplotlib)
# KEEP_TMP=1 keeps the temp dir (with the produced report) for a look.
set -u
E2E=${1:?usage: test_e2e_report.sh PATH/TO/bench/e2e PATH/TO/plot.py}
PLOT=${2:?usage: test_e2e_report.sh PATH/TO/bench/e2e PATH/TO/plot.py}

. "$(dirname "$0")/plot_python.sh"  # PY, TMP, pass, fail

# Synthetic run directories shaped like real ones (summary.json as `lowcomm train --summary` writes
# it, run/metrics.jsonl with step lines every 50 steps and eval lines, wire.json as
# `--wire-json` writes it). Eval bytes_sent is rank 0's cumulative payload, as in real runs.
cat > "$TMP/mkrun.py" <<'PYEOF'
import json, pathlib

def make_run(d, strategy, world, steps, wall, compute, comm, wait, bytes_sent, ratio, final_acc, evals, wire=None):
    """evals: [(time_s, test_accuracy)], spread evenly over the steps."""
    d = pathlib.Path(d)
    (d / "run").mkdir(parents=True, exist_ok=True)
    codec = {"ddp": "none"}.get(strategy, strategy)
    summary = {
        "buckets": 1, "bytes_by_phase": {"grad": {"recv": bytes_sent // 2, "sent": bytes_sent // 2}},
        "bytes_sent": bytes_sent, "bytes_sent_per_rank": bytes_sent // world, "codec": codec,
        "comm_hidden_fraction": 0.0, "comm_s": comm, "compression": {"codec": codec},
        "compression_ratio": ratio, "compute_s": compute, "dataset": "fashion-mnist", "epochs": 2.0,
        "model": "cnn", "parameters": 824458, "samples_per_s": 32 * world * steps / wall, "steps": steps,
        "straggler_rank": 0, "strategy": "ddp", "test_accuracy": final_acc, "test_loss": 0.3,
        "wait_s": wait, "wait_s_by_rank": [wait] * world, "wall_s": wall, "world": world,
    }
    (d / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    per_rank = bytes_sent / world
    lines = []
    every = steps // len(evals)
    for s in range(50, steps + 1, 50):
        lines.append({"bytes_sent": int(per_rank * s / steps), "comm_s": comm / steps * 50, "compute_s": compute / steps,
                      "compression_ratio": ratio, "epoch": 1 + s * 2 // (steps + 1), "loss": 2.3 / (1 + s / 50),
                      "lr": 0.01, "samples_per_s": 800.0, "step": s, "time_s": wall * s / steps, "type": "step",
                      "wait_s": wait / steps})
    for i, (t, acc) in enumerate(evals, 1):
        s = i * every
        lines.append({"bytes_sent": int(per_rank * s / steps), "epoch": 1 + s * 2 // (steps + 1), "samples": 10000,
                      "step": s, "test_accuracy": acc, "test_loss": 0.4, "time_s": t, "type": "eval"})
    lines.sort(key=lambda r: (r["step"], r["type"] == "eval"))
    (d / "run" / "metrics.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))
    if wire is not None:
        tx, packets = wire
        (d / "wire.json").write_text(json.dumps({
            "cluster": "e2e", "rate": "1gbit", "rate_bps": 1000000000, "iface": "eth0", "nproc": world,
            "procs_per_node": 1, "wall_s": wall + 4, "tx_bytes": tx, "rx_bytes": tx + 1000,
            "tx_packets": packets, "rx_packets": packets + 10,
            "nodes": [{"node": n, "netns": f"e2e-n{n}", "address": f"198.18.0.{n + 1}", "ranks": [n],
                       "tx_bytes": tx // world, "rx_bytes": tx // world, "tx_packets": packets // world,
                       "rx_packets": packets // world} for n in range(world)]}, indent=1))

# local2: ddp reaches 0.90 at 100 s (the eval before is just below, a later one passes too); topk at
# exactly 0.90 at 25 s (>= is inclusive); auto never reaches it (0.8999 at the end).
LOCAL = {
    "ddp": dict(world=2, steps=250, wall=150.0, compute=100.0, comm=30.0, wait=10.0, bytes_sent=2469000000,
                ratio=1.0, final_acc=0.915, evals=[(30.0, 0.85), (60.0, 0.8999), (100.0, 0.9012), (140.0, 0.915)]),
    "topk": dict(world=2, steps=250, wall=50.0, compute=40.0, comm=5.0, wait=2.5, bytes_sent=8000000,
                 ratio=100.0, final_acc=0.93, evals=[(10.0, 0.87), (20.0, 0.8995), (25.0, 0.9), (40.0, 0.93)]),
    "auto": dict(world=2, steps=250, wall=120.0, compute=90.0, comm=20.0, wait=5.0, bytes_sent=246800000,
                 ratio=3.2, final_acc=0.8999, evals=[(30.0, 0.8), (60.0, 0.88), (110.0, 0.8999)]),
}
PYEOF

"$PY" - "$TMP" <<'PYEOF' || fail "creating the synthetic runs"
import sys
sys.path.insert(0, sys.argv[1])
from mkrun import make_run, LOCAL
for out in ("out", "rerun", "failrun"):
    for strategy, kw in LOCAL.items():
        make_run(f"{sys.argv[1]}/{out}/local2/{strategy}", strategy, **kw)
PYEOF

# A fake lowcomm: records its arguments in MARKER. FAKE_FAIL=1: writes a summary, prints a log and
# exits 3 (the summary must be removed); else writes the summary and run/metrics.jsonl like a run.
MARKER=$TMP/lowcomm_calls
cat > "$TMP/fake_lowcomm" <<PYEOF
#!$PY
import json, os, pathlib, sys
sys.path.insert(0, "$TMP")
from mkrun import make_run, LOCAL
a = sys.argv[1:]
with open("$MARKER", "a") as f:
    f.write(" ".join(a) + "\n")
summary = pathlib.Path(a[a.index("--summary") + 1])
out_dir = pathlib.Path(next(a[i + 1].split("=", 1)[1] for i, x in enumerate(a)
                            if x == "--set" and a[i + 1].startswith("logging.out_dir=")))
if os.environ.get("FAKE_FAIL"):
    summary.write_text("{}")
    print("fake lowcomm: rank 1 died")
    sys.exit(3)
make_run(out_dir.parent, "fp16", **dict(LOCAL["ddp"], bytes_sent=1234500000, ratio=2.0))
assert out_dir == summary.parent / "run"
print("[rank 0] epoch 1  step 10/250  loss 2.1000  lr 0.01  800 samples/s  sent 1.0 MB  ETA 2m", flush=True)
print("[rank 0] step 117: test accuracy 90.12 %, test loss 0.3000", flush=True)
PYEOF
chmod +x "$TMP/fake_lowcomm"

# --- 1. the kept local2 runs: e2e.json, e2e.md, e2e.png; the binary is never called -----------------
OUT=$TMP/out
"$PY" "$E2E" "$OUT" --settings local2:ddp+topk+auto --target 0.9 --lowcomm "$TMP/fake_lowcomm" >"$TMP/run.out" 2>&1
rc=$?
if [ "$rc" -eq 0 ]; then pass "bench/e2e on kept runs: exit 0"
else fail "bench/e2e on kept runs: exit $rc"; cat "$TMP/run.out"; fi
if [ ! -e "$MARKER" ]; then pass "kept runs were not rerun (fake lowcomm never called)"
else fail "kept runs were rerun: $(cat "$MARKER")"; fi
if [ "$(grep -c '(kept: ' "$TMP/run.out")" -eq 3 ]; then pass "three '(kept: ...)' lines"
else fail "expected three '(kept: ...)' lines in: $(cat "$TMP/run.out")"; fi

"$PY" - "$OUT/e2e.json" >"$TMP/py.out" 2>&1 <<'PYEOF'
import json, math, sys
fails = 0
def check(name, ok, detail=""):
    global fails
    print(("ok   - " if ok else "FAIL - ") + name + ("" if ok else f": {detail}"))
    fails += not ok
def close(a, b):
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)

doc = json.load(open(sys.argv[1]))
rows = doc["rows"]
check("e2e.json: target 0.9, default --set keys", doc["target"] == 0.9 and doc["sets"] == [
    "data.batch_size=32", "schedule.epochs=2", "logging.eval_every=117"], {k: doc[k] for k in ("target", "sets")})
check("e2e.json: 3 rows in order ddp, topk, auto", [r["strategy"] for r in rows] == ["ddp", "topk", "auto"],
      [r.get("strategy") for r in rows])
by = {r["strategy"]: r for r in rows}
exp = {  # strategy: time to target, final acc, wall, payload/rank, codec ratio, step ms compute/comm/wait/total
    "ddp": (100.0, 0.915, 150.0, 1234500000.0, 1.0, (400.0, 120.0, 40.0, 600.0)),
    "topk": (25.0, 0.93, 50.0, 4000000.0, 100.0, (160.0, 20.0, 10.0, 200.0)),
    "auto": (None, 0.8999, 120.0, 123400000.0, 3.2, (360.0, 80.0, 20.0, 480.0)),
}
for s, (ttt, acc, wall, payload, ratio, ms) in exp.items():
    r = by.get(s)
    if r is None:
        check(f"{s}: row present", False, list(by)); continue
    check(f"{s}: setting fields", (r["setting"], r["nodes"], r["procs_per_node"], r["rate"], r["world"], r["steps"],
                                   r["target"]) == ("local2", 1, 2, "loopback", 2, 250, 0.9), r)
    got = r["time_to_target_s"]
    check(f"{s}: time_to_target_s = {ttt} (first eval >= target)", got == ttt if ttt is None else close(got, ttt), got)
    check(f"{s}: final_accuracy, wall_s", close(r["final_accuracy"], acc) and close(r["wall_s"], wall),
          (r["final_accuracy"], r["wall_s"]))
    check(f"{s}: payload_bytes_per_rank = bytes_sent / world = {payload:.0f}",
          close(r["payload_bytes_per_rank"], payload), r["payload_bytes_per_rank"])
    check(f"{s}: compression_ratio", close(r["compression_ratio"], ratio), r["compression_ratio"])
    sm = r["step_ms"]
    check(f"{s}: step_ms = 1000 * <part>_s / steps {ms}",
          sorted(sm) == ["comm", "compute", "total", "wait"]
          and all(close(sm[k], v) for k, v in zip(("compute", "comm", "wait", "total"), ms)), sm)
    check(f"{s}: no wire fields without wire.json", not any(k.startswith("wire") for k in r),
          [k for k in r if k.startswith("wire")])
ev = by["topk"]["evals"]
check("topk: evals are the eval lines (time_s, accuracy, rank 0's bytes_sent), in order",
      [(e["time_s"], e["accuracy"]) for e in ev] == [(10.0, 0.87), (20.0, 0.8995), (25.0, 0.9), (40.0, 0.93)]
      and [e["bytes_sent"] for e in ev] == [992000, 1984000, 2976000, 3968000]
      and all(sorted(e) == ["accuracy", "bytes_sent", "time_s"] for e in ev), ev)
sys.exit(1 if fails else 0)
PYEOF
rc=$?
cat "$TMP/py.out"
n=$(grep -c '^FAIL' "$TMP/py.out"); [ "$rc" -ne 0 ] && [ "$n" -eq 0 ] && n=1
FAILS=$((FAILS + n))

md_has() {  # name line
  if grep -qxF -- "$2" "$OUT/e2e.md" 2>/dev/null; then pass "e2e.md: $1"
  else fail "e2e.md: $1: no line '$2' in: $(cat "$OUT/e2e.md" 2>/dev/null)"; fi
}
md_has "setting heading" "#### local2"
md_has "ddp row (vs DDP 1.00×, to DDP's final at 140 s, payload 1,234.5 MB, no wire)" \
  "| ddp | 250 | 100 | 1.00× | 140 | 91.50 % | 150 | – | – | 1,234.5 | – | 1.0 | 400 / 120 / 40 |"
md_has "topk row (4.00× DDP's time to target)" \
  "| topk | 250 | 25 | 4.00× | 40 | 93.00 % | 50 | – | – | 4.0 | – | 100.0 | 160 / 20 / 10 |"
md_has "auto row (not reached)" \
  "| auto | 250 | not reached | – | not reached | 89.99 % | 120 | – | – | 123.4 | – | 3.2 | 360 / 80 / 20 |"
if grep -qF "| time to 90 % (s) | vs DDP |" "$OUT/e2e.md" 2>/dev/null; then pass "e2e.md: header names the target"
else fail "e2e.md: header without 'time to 90 % (s) | vs DDP'"; fi
if grep -qF "Fastest to target: **topk**, 4.00× DDP's time" "$OUT/e2e.md" 2>/dev/null \
   && grep -qF "auto's wall time is 0.80× DDP's (not slower" "$OUT/e2e.md" 2>/dev/null; then
  pass "e2e.md: targets line (fastest topk 4.00×, auto 0.80× DDP's wall)"
else fail "e2e.md: targets line: $(grep -F 'DDP' "$OUT/e2e.md" | tail -1)"; fi
if grep -qF "Fastest to target" "$TMP/run.out"; then pass "the Markdown is printed too"
else fail "the Markdown is not printed"; fi

check_png() {  # name file
  local magic size
  magic=$(head -c 8 "$2" 2>/dev/null | od -An -tx1 | tr -d ' \n')
  size=$(wc -c < "$2" 2>/dev/null || echo 0)
  if [ "$magic" = "89504e470d0a1a0a" ] && [ "$size" -gt 10240 ]; then pass "$1 ($size bytes)"
  else fail "$1: magic '$magic', size $size"; fi
}
check_png "e2e.png from plot.py --e2e" "$OUT/e2e.png"

# --- 2. a cluster setting's wire columns, through the script's functions -------------------------
"$PY" - "$E2E" "$TMP" >"$TMP/py.out" 2>&1 <<'PYEOF'
import importlib.machinery, importlib.util, json, math, pathlib, sys, types
e2e_path, tmp = sys.argv[1], sys.argv[2]
sys.path.insert(0, tmp)
sys.path.insert(0, str(pathlib.Path(e2e_path).parent))  # bench/e2e_sites.py
from mkrun import make_run
loader = importlib.machinery.SourceFileLoader("bench_e2e", e2e_path)
e2e = importlib.util.module_from_spec(importlib.util.spec_from_loader("bench_e2e", loader))
loader.exec_module(e2e)
fails = 0
def check(name, ok, detail=""):
    global fails
    print(("ok   - " if ok else "FAIL - ") + name + ("" if ok else f": {detail}"))
    fails += not ok

st = e2e.parse_setting("4x1@1gbit:ddp+topk+fp16", ["ddp"])
check("parse_setting 4x1@1gbit:ddp+topk+fp16", st == {"name": "4x1@1gbit", "nodes": 4, "ppn": 1, "rate": "1gbit",
      "nproc": 4, "strategies": ["ddp", "topk", "fp16"]}, st)
st2 = e2e.parse_setting("2x2@100mbit", ["ddp", "auto"])
check("parse_setting 2x2@100mbit (default strategies)", (st2["nodes"], st2["ppn"], st2["nproc"], st2["rate"],
      st2["strategies"]) == (2, 2, 4, "100mbit", ["ddp", "auto"]), st2)

args = types.SimpleNamespace(target=0.9)
base = dict(world=4, steps=250, wall=200.0, compute=100.0, comm=80.0, wait=10.0, final_acc=0.91)
runs = {  # strategy: payload bytes (all ranks), codec ratio, evals, (wire tx bytes, tx packets)
    "ddp": (4000000000, 1.0, [(60.0, 0.88), (120.0, 0.905), (180.0, 0.91)], (4120000000, 80000)),
    "topk": (40000000, 100.0, [(20.0, 0.89), (30.0, 0.901), (50.0, 0.91)], (41200000, 4000)),
    "fp16": (2000000000, 2.0, [(40.0, 0.85), (90.0, 0.8999)], (2080000000, 40000)),
}
rows = []
for s, (payload, ratio, evals, wire) in runs.items():
    d = f"{tmp}/cluster/4x1@1gbit/{s}"
    make_run(d, s, bytes_sent=payload, ratio=ratio, evals=evals, wire=wire, **base)
    rows.append(e2e.collect(args, st, s, pathlib.Path(d)))
by = {r["strategy"]: r for r in rows}
for s, (payload, ratio, evals, (tx, packets)) in runs.items():
    r = by[s]
    check(f"{s}: wire_bytes_per_rank = tx_bytes / world", math.isclose(r["wire_bytes_per_rank"], tx / 4),
          r["wire_bytes_per_rank"])
    check(f"{s}: wire_over_payload = tx_bytes / bytes_sent", math.isclose(r["wire_over_payload"], tx / payload),
          r["wire_over_payload"])
    check(f"{s}: wire_packets_per_rank, rate, nodes", math.isclose(r["wire_packets_per_rank"], packets / 4)
          and (r["rate"], r["nodes"], r["procs_per_node"]) == ("1gbit", 4, 1), r)
check("time_to_target_s on the cluster rows", [by[s]["time_to_target_s"] for s in runs] == [120.0, 30.0, None],
      [by[s]["time_to_target_s"] for s in runs])

# A second setting in which DDP never reaches the target.
st3 = e2e.parse_setting("2x2@1gbit:ddp+topk", [])
for s, acc in (("ddp", 0.85), ("topk", 0.92)):
    d = f"{tmp}/cluster/2x2@1gbit/{s}"
    make_run(d, s, bytes_sent=1000000, ratio=1.0, evals=[(10.0, acc)], wire=(1100000, 100), **base)
    rows.append(e2e.collect(args, st3, s, pathlib.Path(d)))

# A third: the fastest is >= 3x DDP's time but sends only 2x fewer wire bytes, so the target is not met.
st4 = e2e.parse_setting("4x1@100mbit:ddp+fp16", [])
for s, t, payload in (("ddp", 100.0, 4000000000), ("fp16", 30.0, 2000000000)):
    d = f"{tmp}/cluster/4x1@100mbit/{s}"
    make_run(d, s, bytes_sent=payload, ratio=1.0, evals=[(t, 0.95)], wire=(payload, 100), **base)
    rows.append(e2e.collect(args, st4, s, pathlib.Path(d)))

# A fourth: two sites joined by a WAN; the WAN table reports the bytes that crossed between sites.
st5 = e2e.parse_setting("2s2x1@1gbit/100mbit,50ms,0.1%:ddp+topk", [])
check("parse_setting 2s2x1@1gbit/100mbit,50ms,0.1%", (st5["sites"], st5["nodes"], st5["ppn"], st5["nproc"], st5["rate"],
      st5["wan"], st5["dir"]) == (2, 4, 1, 4, "1gbit", {"rate": "100mbit", "rtt_ms": 50.0, "loss_percent": 0.1},
      "2s2x1@1gbit-100mbit,50ms,0.1%"), st5)
import e2e_sites
check("cluster args of a site setting", e2e_sites.cluster_args(st5) == ["--sites", "2", "--wan-rate", "100mbit",
      "--wan-delay", "25ms", "--wan-loss", "0.1"], e2e_sites.cluster_args(st5))
for s, t, wan in (("ddp", 100.0, 2000000000), ("topk", 25.0, 20000000)):
    d = pathlib.Path(f"{tmp}/cluster/{st5['dir']}/{s}")
    make_run(d, s, bytes_sent=4 * wan, ratio=1.0, evals=[(t, 0.95)], wire=(4 * wan, 100), **base)
    w = json.loads((d / "wire.json").read_text())
    w["inter_site_tx_bytes"] = wan
    (d / "wire.json").write_text(json.dumps(w))
    rows.append(e2e.collect(args, st5, s, d))
check("inter_site_wire_bytes collected", [r.get("inter_site_wire_bytes") for r in rows[-2:]] == [2000000000, 20000000],
      rows[-2:])

md = e2e.markdown(rows, 0.9)
lines = md.splitlines()
check("markdown: the WAN table of the site setting",
      "| topk | 25 | 4.00× | 91.00 % | 20.0 | 100.0× |" in lines and "| ddp | 100 | 1.00× | 91.00 % | 2,000.0 | 1.0× |" in lines
      and md.count("Across the WAN:") == 1, md)
def has(name, line):
    check(f"markdown: {name}", line in lines, "\n" + md)
has("ddp row: wire 1,030.0 MB/rank, 1.0× fewer, wire/payload 1.030",
    "| ddp | 250 | 120 | 1.00× | 180 | 91.00 % | 200 | 1,030.0 | 1.0× | 1,000.0 | 1.030 | 1.0 | 400 / 320 / 40 |")
has("topk row: 4.00× DDP's time, 100.0× fewer wire bytes",
    "| topk | 250 | 30 | 4.00× | 50 | 91.00 % | 200 | 10.3 | 100.0× | 10.0 | 1.030 | 100.0 | 400 / 320 / 40 |")
has("fp16 row: not reached, 2.0× fewer wire bytes, wire/payload 1.040",
    "| fp16 | 250 | not reached | – | not reached | 91.00 % | 200 | 520.0 | 2.0× | 500.0 | 1.040 | 2.0 | 400 / 320 / 40 |")
check("markdown: targets line with wire bytes, met",
      "Fastest to target: **topk**, 4.00× DDP's time, 100.0× fewer wire bytes (target ≥ 3× and ≥ 10×: met)." in md, md)
check("markdown: setting where DDP does not reach the target",
      "#### 2x2@1gbit" in lines and "DDP did not reach the target in this run." in md
      and "| topk | 250 | 10 | – |" in md, md)
check("markdown: 3.33× faster but 2.0× fewer wire bytes: target not met",
      "Fastest to target: **fp16**, 3.33× DDP's time, 2.0× fewer wire bytes (target ≥ 3× and ≥ 10×: not met)." in md, md)
json.dump({"target": 0.9, "sets": [], "rows": rows}, open(f"{tmp}/cluster.json", "w"))
sys.exit(1 if fails else 0)
PYEOF
rc=$?
cat "$TMP/py.out"
n=$(grep -c '^FAIL' "$TMP/py.out"); [ "$rc" -ne 0 ] && [ "$n" -eq 0 ] && n=1
FAILS=$((FAILS + n))

"$PY" "$PLOT" --e2e "$TMP/cluster.json" -o "$TMP/cluster.png" --title "synthetic cluster" >"$TMP/msg" 2>&1 \
  || { fail "plot.py --e2e with wire rows: exit $?"; cat "$TMP/msg"; }
check_png "plot.py --e2e with wire rows, two settings" "$TMP/cluster.png"
# One colour per strategy across settings, whatever order each setting lists them in.
"$PY" - "$PLOT" >"$TMP/msg" 2>&1 <<'PYEOF' && pass "plot.py --e2e: one colour per strategy in every setting" || { fail "plot.py --e2e colours"; cat "$TMP/msg"; }
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("plot", sys.argv[1])
spec = importlib.util.spec_from_loader("plot", loader)
plot = importlib.util.module_from_spec(spec)
loader.exec_module(plot)
rows = [{"setting": "a", "strategy": s} for s in ("ddp", "topk", "auto")] + \
       [{"setting": "b", "strategy": s} for s in ("auto", "ddp", "local_sgd4", "topk")]
c = plot.strategy_colours(rows)
assert set(c) == {"ddp", "topk", "auto", "local_sgd4"}, c
assert len(set(c.values())) == 4, c
PYEOF

# --- 3. a run that is not kept goes to the binary ------------------------------------------------
"$PY" "$E2E" "$TMP/rerun" --settings local2:ddp+fp16 --target 0.9 --lowcomm "$TMP/fake_lowcomm" >"$TMP/run.out" 2>&1
rc=$?
calls=$(cat "$MARKER" 2>/dev/null)
if [ "$rc" -eq 0 ] && [ "$(wc -l < "$MARKER" 2>/dev/null)" = 1 ] \
   && [[ "$calls" == "train --config "*" --nproc 2 --summary $TMP/rerun/local2/fp16/summary.json --set logging.out_dir=$TMP/rerun/local2/fp16/run --set logging.progress=true --timeline $TMP/rerun/local2/fp16/timeline.json --set data.batch_size=32 --set schedule.epochs=2 --set logging.eval_every=117 --set compress.codec=fp16" ]]; then
  pass "missing run: one lowcomm train call, for fp16 only, with its --set keys, its timeline and no --cluster"
else fail "missing run: exit $rc, calls: '$calls'"; cat "$TMP/run.out"; fi
if grep -qxF "   [local2/fp16] epoch 1  step 10/250  loss 2.1000  lr 0.01  800 samples/s  sent 1.0 MB  ETA 2m" "$TMP/run.out" \
   && grep -qxF "   [local2/fp16] step 117: test accuracy 90.12 %, test loss 0.3000" "$TMP/run.out" \
   && grep -qF "step 117: test accuracy" "$TMP/rerun/local2/fp16/log.txt"; then
  pass "missing run: its progress and evaluation lines are shown prefixed with the run, and logged"
else fail "missing run: progress lines: $(cat "$TMP/run.out")"; fi
if "$PY" -c 'import json, sys; r = json.load(open(sys.argv[1]))["rows"]; sys.exit(not ([x["strategy"] for x in r] == ["ddp", "fp16"] and r[1]["payload_bytes_per_rank"] == 617250000))' \
   "$TMP/rerun/e2e.json" 2>/dev/null; then pass "missing run: its fresh summary is collected next to the kept ddp"
else fail "missing run: e2e.json rows: $(head -c 400 "$TMP/rerun/e2e.json" 2>/dev/null)"; fi
rm -f "$MARKER"

FAKE_FAIL=1 "$PY" "$E2E" "$TMP/failrun" --settings local2:ddp+bf16 --lowcomm "$TMP/fake_lowcomm" >"$TMP/run.out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -qF "run local2/bf16 failed (exit 3)" "$TMP/run.out" && grep -qF "rank 1 died" "$TMP/run.out" \
   && [ ! -e "$TMP/failrun/local2/bf16/summary.json" ] && ! grep -q Traceback "$TMP/run.out"; then
  pass "failed run: exit $rc, names the run and shows its log, its summary removed"
else fail "failed run: exit $rc: $(cat "$TMP/run.out")"; fi
rm -f "$MARKER"

# --- 4. argument errors: non-zero exit, a message naming the culprit, nothing created -------------
expect_e2e_error() {  # name pattern args...
  local name=$1 pat=$2; shift 2
  "$PY" "$E2E" "$TMP/bad" "$@" >"$TMP/msg" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ] && grep -qF -- "$pat" "$TMP/msg" && ! grep -q Traceback "$TMP/msg" && [ ! -e "$TMP/bad" ] \
     && [ ! -e "$MARKER" ]; then
    pass "$name: $(head -1 "$TMP/msg")"
  else fail "$name: exit $rc, expected message containing '$pat', got: $(cat "$TMP/msg")"; fi
}
expect_e2e_error "unknown strategy in a setting" "'nope'" --settings local2:ddp+nope --lowcomm "$TMP/fake_lowcomm"
expect_e2e_error "unknown strategy in --strategies" "'bogus'" --settings local2 --strategies ddp,bogus \
  --lowcomm "$TMP/fake_lowcomm"
expect_e2e_error "bad setting" "'3y1'" --settings local2,3y1 --lowcomm "$TMP/fake_lowcomm"
expect_e2e_error "--target 1.5" "--target" --settings local2 --target 1.5 --lowcomm "$TMP/fake_lowcomm"
expect_e2e_error "--target 0" "--target" --settings local2 --target 0 --lowcomm "$TMP/fake_lowcomm"
touch "$TMP/not_executable"
expect_e2e_error "non-executable --lowcomm" "$TMP/not_executable" --settings local2 --lowcomm "$TMP/not_executable"

# --- 5. plot.py --e2e error cases -------------------------------------------------------------------
head -c 300 "$OUT/e2e.json" > "$TMP/truncated.json"
expect_plot_error "plot.py --e2e: truncated JSON" "$TMP/truncated.json" --e2e "$TMP/truncated.json" -o "$TMP/x.png"
echo '{"target": 0.9}' > "$TMP/norows.json"
expect_plot_error "plot.py --e2e: no 'rows'" "$TMP/norows.json" --e2e "$TMP/norows.json" -o "$TMP/x.png"
echo '{"target": 0.9, "rows": []}' > "$TMP/empty.json"
expect_plot_error "plot.py --e2e: empty rows" "$TMP/empty.json: no rows" --e2e "$TMP/empty.json" -o "$TMP/x.png"
echo '{"target": 0.9, "rows": [{"strategy": "ddp"}]}' > "$TMP/nosetting.json"
expect_plot_error "plot.py --e2e: row without 'setting'" "$TMP/nosetting.json" --e2e "$TMP/nosetting.json" -o "$TMP/x.png"
expect_plot_error "plot.py --e2e: missing file" "$TMP/nope.json" --e2e "$TMP/nope.json" -o "$TMP/x.png"
expect_plot_error "plot.py --e2e with RUN.jsonl arguments" "--e2e takes no RUN.jsonl" \
  --e2e "$OUT/e2e.json" "$OUT/local2/ddp/run/metrics.jsonl" -o "$TMP/x.png"
if [ -e "$TMP/x.png" ]; then fail "a plot.py error case wrote an image"; else pass "plot.py error cases wrote no image"; fi

if [ "$FAILS" -ne 0 ]; then echo "$FAILS check(s) failed"; exit 1; fi
echo "all checks passed"
