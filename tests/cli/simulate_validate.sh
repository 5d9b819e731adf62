#!/usr/bin/env bash
# `lowcomm simulate validate` on a bench/e2e layout of a setting of sites: a local 4-rank run with
# --timeline stands for the row (its network is not the setting's; only the mechanics are checked):
# the replayed payload equals the run's meter (the timeline's own gather included), and the row
# takes its run's comm.streams from run/config.toml; `simulate calibrate --stream-timeline` on the
# same run (its sockets on BBR) fits the WAN's rate in training with the run's striping and keeps
# the calibration's stream bound.
set -euo pipefail
LOWCOMM=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
setting='2s2x1@1gbit/100mbit,50ms,0.1%'
run="$tmp/out/2s2x1@1gbit-100mbit,50ms,0.1%/topk"
mkdir -p "$run"
"$LOWCOMM" train --nproc 4 --set data.dataset=synthetic --set model.name=mlp --set data.batch_size=32 \
  --set data.train_limit=2048 --set data.test_limit=256 --set schedule.epochs=100 --set schedule.max_steps=6 \
  --set logging.progress=false --set compress.codec=topk --set compress.ratio=0.01 --set comm.streams=3 \
  --set comm.congestion_control=bbr --set logging.out_dir="$run/run" --timeline "$run/timeline.json" --summary "$run/summary.json" > "$tmp/log" 2>&1 \
  || { cat "$tmp/log"; exit 1; }
/usr/bin/python3 - "$tmp" "$setting" <<'PY'
import json, sys
tmp, setting = sys.argv[1:]
s = json.load(open(f"{tmp}/out/2s2x1@1gbit-100mbit,50ms,0.1%/topk/summary.json"))
row = {"setting": setting, "strategy": "topk", "steps": s["steps"], "payload_bytes_per_rank": s["bytes_sent_per_rank"]}
json.dump({"rows": [row]}, open(f"{tmp}/out/e2e.json", "w"))
PY
"$LOWCOMM" simulate validate "$tmp/out" --json "$tmp/v.json" > "$tmp/v.txt" || { cat "$tmp/v.txt"; exit 1; }
cat "$tmp/v.txt"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
v = json.load(open(f"{sys.argv[1]}/v.json"))[0]
assert "skipped" not in v, v
err = abs(v["predicted_payload_bytes"] / v["measured_payload_bytes"] - 1)
assert err < 1e-3, f"replayed payload {v['predicted_payload_bytes']} against the meter's {v['measured_payload_bytes']}"
assert v["streams"] == 3, v["streams"]
print(f"payload within {err * 100:.3f} %, streams {v['streams']}")
PY
"$LOWCOMM" simulate calibrate --setting "$setting" --stream-timeline "$run/timeline.json" --out "$tmp/cal.json" \
  > "$tmp/cal.txt" 2>&1 || { cat "$tmp/cal.txt"; exit 1; }
cat "$tmp/cal.txt"
grep -q "the WAN at .* x its rate in training (the run's sockets on BBR" "$tmp/cal.txt"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
c = json.load(open(f"{sys.argv[1]}/cal.json"))
assert c["stream_c"] == 1.22, c["stream_c"]  # the default bound, not BBR's none
assert 0.3 <= c["wan_factor"] <= 1.2, c["wan_factor"]
print(f"wan_factor {c['wan_factor']:.3f}, stream_c kept")
PY
