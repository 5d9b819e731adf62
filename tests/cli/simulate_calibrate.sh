#!/usr/bin/env bash
# `lowcomm simulate calibrate` fits the time per message to several real training runs at once
# (repeated --timeline): one line per run, the fitted value saved and loaded back by `replay`;
# a timeline of another world and a --node-timeline without shared-memory calls are refused,
# naming the file or the problem, with nothing written.
set -euo pipefail
LOWCOMM=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--set data.dataset=synthetic --set model.name=mlp --set data.batch_size=32 --set data.train_limit=2048
        --set data.test_limit=256 --set schedule.epochs=100 --set schedule.max_steps=8 --set logging.progress=false)
for run in ddp topk; do
  extra=()
  [ $run = topk ] && extra=(--set compress.codec=topk --set compress.ratio=0.01)
  "$LOWCOMM" train --nproc 2 "${common[@]}" "${extra[@]}" --set logging.out_dir="$tmp/$run" \
    --timeline "$tmp/$run/timeline.json" > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
done
"$LOWCOMM" simulate calibrate --setting 2x1@1gbit --timeline "$tmp/ddp/timeline.json" --timeline "$tmp/topk/timeline.json" \
  --timeline-steps 0 --out "$tmp/cal.json" > "$tmp/fit.txt" || { cat "$tmp/fit.txt"; exit 1; }
cat "$tmp/fit.txt"
grep -q "us per message at the sender, from 2 runs (every step)" "$tmp/fit.txt"
[ "$(grep -c "replayed .* ms per step against .* ms measured" "$tmp/fit.txt")" = 2 ]
grep -q "$tmp/ddp/timeline.json: replayed" "$tmp/fit.txt"
grep -q "$tmp/topk/timeline.json: replayed" "$tmp/fit.txt"
"$LOWCOMM" simulate replay --timeline "$tmp/topk/timeline.json" --setting 2x1@1gbit --calibration "$tmp/cal.json" \
  --json "$tmp/replay.json" > /dev/null
/usr/bin/python3 - "$tmp" <<'PY'
import json, re, sys
tmp = sys.argv[1]
cal = json.load(open(f"{tmp}/cal.json"))
h = cal["message_overhead_s"]
assert 0 <= h <= 5e-3, cal
text = open(f"{tmp}/fit.txt").read()
assert abs(float(re.search(r"([0-9.]+) us per message", text).group(1)) - h * 1e6) < 0.1, (text, h)
# The calibration's value is what the replay runs with: its prediction is the fit's line for top-k.
line = [l for l in text.splitlines() if "topk/timeline.json: replayed" in l][0]
fit_ms = float(re.search(r"replayed ([0-9.]+) ms", line).group(1))
rep = json.load(open(f"{tmp}/replay.json"))
assert abs(rep["predicted_step_s"] * 1e3 - fit_ms) < 0.01 + 1e-3 * fit_ms, (rep["predicted_step_s"], fit_ms)
print("ok: h =", round(h * 1e6, 1), "us")
PY
# The links' rate fitted to the DDP run, which ran on loopback, far faster than shaped 10 Mbit/s
# links allow (its gradient alone takes longer than its step there; at 1 Gbit/s a loaded machine's
# slower steps could be explained): no factor in 0.3-1.2 replays it, so the start's is kept and
# saved as printed; the other values stay.
for start in none cal; do
  from=(); [ $start = cal ] && from=(--calibration "$tmp/cal.json")
  "$LOWCOMM" simulate calibrate --setting 2x1@10mbit --link-timeline "$tmp/ddp/timeline.json" --timeline-steps 0 \
    "${from[@]}" --out "$tmp/cal_$start.json" > "$tmp/link_$start.txt" || { cat "$tmp/link_$start.txt"; exit 1; }
  cat "$tmp/link_$start.txt"
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, re, sys
tmp = sys.argv[1]
for start, base in (("none", {"bandwidth_factor": 1.0, "message_overhead_s": 0.0}),
                    ("cal", json.load(open(f"{tmp}/cal.json")))):
    cal_l = json.load(open(f"{tmp}/cal_{start}.json"))
    text = open(f"{tmp}/link_{start}.txt").read()
    m = re.search(r"links at ([0-9.]+) x their rate in training.*, from 1 run", text)
    assert m, text
    f = cal_l["bandwidth_factor"]
    assert abs(float(m.group(1)) - f) < 1e-4, (text, f)
    assert "(kept: the runs do not pin a factor in 0.3-1.2)" in text, text
    assert f == base["bandwidth_factor"], (start, text, f)
    assert cal_l["message_overhead_s"] == base["message_overhead_s"], (start, cal_l)
    print("ok: links from", start, f, "kept")
PY
# A host time per call of top-k's ring allgatherv fitted to its run, from the fitted calibration:
# saved as printed (or, where the run does not pin one, said and not saved), the time per message
# kept.
"$LOWCOMM" simulate calibrate --setting 2x1@1gbit --call-timeline "allgatherv/ring=$tmp/topk/timeline.json" \
  --timeline-steps 0 --calibration "$tmp/cal.json" --out "$tmp/cal_c.json" > "$tmp/call.txt" || { cat "$tmp/call.txt"; exit 1; }
cat "$tmp/call.txt"
/usr/bin/python3 - "$tmp" <<'PY'
import json, re, sys
tmp = sys.argv[1]
cal, cal_c = json.load(open(f"{tmp}/cal.json")), json.load(open(f"{tmp}/cal_c.json"))
text = open(f"{tmp}/call.txt").read()
assert cal_c["message_overhead_s"] == cal["message_overhead_s"], cal_c
if "(kept: the runs do not pin" in text:  # calls hidden behind compute on this machine: nothing saved
    assert "allgatherv/ring" not in cal_c["call_overhead_s"], cal_c
    print("ok: allgatherv/ring kept (not pinned)")
else:
    m = re.search(r"([0-9.]+) us per allgatherv/ring call, from 1 run", text)
    assert m, text
    v = cal_c["call_overhead_s"]["allgatherv/ring"]
    assert 0 < v < 5e-3 and abs(float(m.group(1)) - v * 1e6) < 0.1, (text, v)
    print("ok: allgatherv/ring", round(v * 1e6, 1), "us per call")
PY
bad() {
  local what=$1 want=$2; shift 2
  if "$LOWCOMM" simulate calibrate "$@" --out "$tmp/bad.json" > "$tmp/bad" 2>&1; then echo "FAIL: $what accepted"; exit 1; fi
  grep -q -- "$want" "$tmp/bad" || { cat "$tmp/bad"; echo "FAIL: $what: no '$want' in the error"; exit 1; }
  [ ! -e "$tmp/bad.json" ] || { echo "FAIL: $what wrote its --out"; exit 1; }
}
bad "a timeline of another world" "ddp/timeline.json' has 2 ranks, the setting 4x1@1gbit 4" \
  --setting 4x1@1gbit --timeline "$tmp/ddp/timeline.json" --timeline "$tmp/topk/timeline.json"
bad "a node timeline without shared memory" "no hier allreduce of the --node-timeline runs ran in shared memory" \
  --setting 2x1@1gbit --node-timeline "$tmp/ddp/timeline.json"
bad "a call kind the run never makes" "no allreduce/rails call in the runs" \
  --setting 2x1@1gbit --call-timeline "allreduce/rails=$tmp/ddp/timeline.json"
bad "a call timeline without its kind" "is not OP/ALGO=TIMELINE" --setting 2x1@1gbit --call-timeline "$tmp/ddp/timeline.json"
echo "simulate calibrate: ok"
