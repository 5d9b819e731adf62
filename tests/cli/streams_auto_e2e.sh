#!/usr/bin/env bash
# comm.streams = auto through real worker processes on loopback: four ranks started
# torchrun-style with LOWCOMM_SITE 0, 0, 1, 1 and the default --streams (auto) measure a
# cross-site round trip far below a WAN's and keep one stream per pair; the JSON rows say so
# (streams_auto, streams 1, 0 < cross_site_rtt_us < 2000) and no element is wrong. Without
# LOWCOMM_SITE nothing is measured (cross_site_rtt_us 0), as with --streams 1. A two-rank
# `train` across the two fake sites states the same in its summary's `streams` block. Our
# torch.distributed backend reads LOWCOMM_STREAMS: a malformed value is an error naming it.
# usage: streams_auto_e2e.sh LOWCOMM
set -euo pipefail
LOWCOMM=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LOWCOMM_JOB_TOKEN=streams-auto-e2e-$$-0123456789 MASTER_ADDR=127.0.0.1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0

run() {  # run NAME SITES...: four workers, rank r in site ${SITES[r]} ("-" = none)
  local name=$1; shift
  local sites=("$@") pids=()
  export MASTER_PORT=$((20000 + ($$ + ${#name} * 7) % 20000))
  for r in 0 1 2 3; do
    (if [ "${sites[$r]}" != - ]; then export LOWCOMM_SITE=${sites[$r]}; fi
     RANK=$r exec timeout 120 "$LOWCOMM" bench collectives --sizes 1MiB --algos ring,sites --group-size 2 \
       --stripe-min 65536 --seconds 0.2 --no-baseline --json "$tmp/$name.json") > "$tmp/$name$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { tail -5 "$tmp"/$name*.log; echo "FAIL: a worker failed ($name)"; exit 1; }; done
}

run sites 0 0 1 1
run nosites - - - -
grep -q "# streams auto: 1 per cross-site pair" "$tmp/sites0.log" || { cat "$tmp/sites0.log"; echo "FAIL: no streams line"; exit 1; }
python3 - "$tmp/sites.json" "$tmp/nosites.json" <<'PY'
import json, sys
for path, sited in ((sys.argv[1], True), (sys.argv[2], False)):
    rows = [r for r in json.load(open(path)) if r["backend"] == "lowcomm"]
    assert len(rows) == 2, rows
    for r in rows:
        assert r["streams_auto"] is True and r["streams"] == 1 and r["streams_used"] == 1, r
        assert r["wrong"] == 0, r
        if sited:
            assert 0 < r["cross_site_rtt_us"] < 2000, r
        else:
            assert r["cross_site_rtt_us"] == 0, r
print("ok: auto keeps one stream on loopback sites and measures nothing without sites")
PY

export WORLD_SIZE=2 MASTER_PORT=$((20000 + ($$ + 11) % 20000))
pids=()
for r in 0 1; do
  RANK=$r LOWCOMM_SITE=$r timeout 120 "$LOWCOMM" train --set data.dataset=synthetic --set model.name=mlp \
    --set data.batch_size=32 --set data.train_limit=256 --set data.test_limit=64 --set schedule.max_steps=3 \
    --set logging.out_dir="$tmp/train" --summary "$tmp/s.json" > "$tmp/train$r.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { tail -5 "$tmp"/train*.log; echo "FAIL: a training worker failed"; exit 1; }; done
python3 - "$tmp/s.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["streams"]
assert s["auto"] is True and s["per_cross_site_pair"] == 1 and 0 < s["cross_site_rtt_us"] < 2000, s
print("ok: the training summary states auto's one stream and its round trip")
PY

export WORLD_SIZE=1 MASTER_PORT=$((20000 + ($$ + 23) % 20000))
if RANK=0 LOWCOMM_STREAMS=bogus timeout 60 "$LOWCOMM" bench collectives --sizes 4B --no-baseline --torch-lowcomm \
    > "$tmp/env.log" 2>&1; then
  echo "FAIL: LOWCOMM_STREAMS=bogus was accepted"; exit 1
fi
grep -q "LOWCOMM_STREAMS = 'bogus'" "$tmp/env.log" || { cat "$tmp/env.log"; echo "FAIL: the error does not name LOWCOMM_STREAMS"; exit 1; }
echo "ok: the torch.distributed backend reads LOWCOMM_STREAMS"
