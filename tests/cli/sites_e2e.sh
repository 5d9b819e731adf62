#!/usr/bin/env bash
# Sites through real worker processes: four ranks started torchrun-style with LOWCOMM_SITE 0, 0,
# 1, 1 run `bench collectives --streams 3 --congestion-control reno`; the JSON rows must report
# 3 streams in use and no wrong element. A malformed LOWCOMM_SITE is a ConfigError naming it.
# usage: sites_e2e.sh LOWCOMM
set -euo pipefail
LOWCOMM=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LOWCOMM_JOB_TOKEN=sites-e2e-$$-0123456789 MASTER_ADDR=127.0.0.1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0
export MASTER_PORT=$((20000 + $$ % 20000))
pids=()
for r in 0 1 2 3; do
  RANK=$r LOWCOMM_SITE=$((r / 2)) timeout 120 "$LOWCOMM" bench collectives --sizes 1MiB --algos ring,hier,hd \
    --group-size 2 --streams 3 --stripe-min 65536 --congestion-control reno --seconds 0.2 --no-baseline \
    --json "$tmp/rows.json" > "$tmp/w$r.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { tail -5 "$tmp"/w*.log; echo "FAIL: a worker failed"; exit 1; }; done
python3 - "$tmp/rows.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
ours = [r for r in rows if r["backend"] == "lowcomm"]
assert len(ours) == 3, rows
for r in ours:
    assert r["streams"] == 3 and r["streams_used"] == 3, r
    assert r["congestion_control"] == "reno" and r["stripe_min_bytes"] == 65536, r
    assert r["wrong"] == 0, r
print("ok: %d rows striped over 3 streams" % len(ours))
PY
if RANK=0 WORLD_SIZE=1 LOWCOMM_SITE=east "$LOWCOMM" bench collectives --sizes 4B --no-baseline > "$tmp/bad.log" 2>&1; then
  echo "FAIL: LOWCOMM_SITE=east was accepted"; exit 1
fi
grep -q "LOWCOMM_SITE='east'" "$tmp/bad.log" || { cat "$tmp/bad.log"; echo "FAIL: the error does not name LOWCOMM_SITE"; exit 1; }
echo "ok: a malformed LOWCOMM_SITE is refused"
