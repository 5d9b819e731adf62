#!/usr/bin/env bash
# End to end through the real launcher: `lowcomm train --nproc 2` on synthetic data, outputs,
# resume from the latest checkpoint, config and command-line errors naming the key or option,
# and tools/timeline_phases.py on the run's timeline.
set -euo pipefail
LOWCOMM=$1
TOOLS=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--set data.dataset=synthetic --set model.name=mlp --set data.batch_size=32 --set data.train_limit=2048
        --set data.test_limit=512 --set schedule.epochs=100 --set checkpoint.every_steps=10 --set logging.log_every=5
        --set logging.out_dir="$tmp/run")
"$LOWCOMM" train --nproc 2 "${common[@]}" --set schedule.max_steps=30 --summary "$tmp/s.json" --timeline "$tmp/t.json" > "$tmp/out1" 2>&1 \
  || { cat "$tmp/out1"; echo "FAIL: training run failed"; exit 1; }
grep -q "== summary ==" "$tmp/out1" || { cat "$tmp/out1"; echo "FAIL: no summary printed"; exit 1; }
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
s = json.load(open(f"{tmp}/s.json"))
for k in ["strategy", "world", "steps", "epochs", "wall_s", "test_accuracy", "bytes_sent", "bytes_by_phase",
          "compression_ratio", "checkpoint"]:
    assert k in s, f"summary lacks {k}: {s}"
assert s["world"] == 2 and s["steps"] == 30, s
assert s["test_accuracy"] > 0.3, s
assert s["bytes_sent"] > 0 and s["bytes_by_phase"]["grad"]["sent"] > 0, s
t = json.load(open(f"{tmp}/t.json"))
pids = {e.get("pid") for e in t["traceEvents"]}
assert {0, 1} <= pids, pids
assert any(e.get("cat") == "comm" for e in t["traceEvents"]), "no communication events"
PY
"$LOWCOMM" train --nproc 2 "${common[@]}" --set schedule.max_steps=40 --resume --summary "$tmp/s2.json" > "$tmp/out2" 2>&1 \
  || { cat "$tmp/out2"; echo "FAIL: resumed run failed"; exit 1; }
/usr/bin/python3 -c "import json,sys; s=json.load(open('$tmp/s2.json')); assert s['steps'] == 40, s"
if "$LOWCOMM" train --set optimizer.lrr=0.1 > "$tmp/out3" 2>&1; then echo "FAIL: bad key accepted"; exit 1; fi
grep -q "optimizer.lrr" "$tmp/out3" || { cat "$tmp/out3"; echo "FAIL: error does not name the key"; exit 1; }
# --nproc 0 or negative is an error (it used to start one in-process training silently); nothing is written.
for n in 0 -2; do
  if "$LOWCOMM" train --nproc=$n "${common[@]}" --set logging.out_dir="$tmp/nproc$n" > "$tmp/out4" 2>&1; then
    echo "FAIL: --nproc $n accepted"; exit 1
  fi
  grep -q -- "--nproc" "$tmp/out4" || { cat "$tmp/out4"; echo "FAIL: --nproc $n error does not name the option"; exit 1; }
  [ ! -e "$tmp/nproc$n" ] || { echo "FAIL: --nproc $n wrote $tmp/nproc$n"; exit 1; }
done
# comm.allgather = "hier" with every rank on one node has no groups to span: an error naming the key
# from every rank, before anything is written.
if "$LOWCOMM" train --nproc 2 "${common[@]}" --set comm.allgather=hier --set logging.out_dir="$tmp/aghier" > "$tmp/out5" 2>&1; then
  echo "FAIL: comm.allgather=hier accepted on one node"; exit 1
fi
grep -q "comm.allgather" "$tmp/out5" || { cat "$tmp/out5"; echo "FAIL: the error does not name comm.allgather"; exit 1; }
[ ! -e "$tmp/aghier" ] || { echo "FAIL: comm.allgather=hier wrote $tmp/aghier"; exit 1; }
# comm.tuning naming a file that is not there: an error naming the file, before anything is written.
if "$LOWCOMM" train "${common[@]}" --set comm.tuning="$tmp/no_tuning.json" --set logging.out_dir="$tmp/tun" > "$tmp/out6" 2>&1; then
  echo "FAIL: a missing comm.tuning file was accepted"; exit 1
fi
grep -q "no_tuning.json" "$tmp/out6" || { cat "$tmp/out6"; echo "FAIL: the error does not name the tuning file"; exit 1; }
[ ! -e "$tmp/tun" ] || { echo "FAIL: a bad comm.tuning wrote $tmp/tun"; exit 1; }
# Per-phase compute from the timeline: every step of this DDP run is one "ddp" phase event.
/usr/bin/python3 "$TOOLS/timeline_phases.py" "$tmp/t.json" > "$tmp/phases" \
  || { cat "$tmp/phases"; echo "FAIL: timeline_phases.py failed"; exit 1; }
/usr/bin/python3 - "$tmp/phases" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["phase"] for r in rows] == ["ddp"], rows
r = rows[0]
assert r["steps"] == 30, r
assert 0 < r["forward_ms"] < r["compute_ms"] <= r["step_ms"], r
PY
echo "train_e2e: 7 passed, 0 failed"
