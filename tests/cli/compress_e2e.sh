#!/usr/bin/env bash
# Compressed training through the real launcher: 2 processes with top-k (allgather path) and
# int8 (two-phase path) against the same uncompressed run; the compressed runs learn, report
# their codec accounting, and send several times fewer gradient bytes. Then `bench compress`
# at a small size: every top-k index agrees with torch::topk.
set -euo pipefail
LOWCOMM=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--set data.dataset=synthetic --set model.name=mlp --set data.batch_size=32 --set data.train_limit=2048
        --set data.test_limit=512 --set schedule.epochs=100 --set schedule.max_steps=30 --set logging.progress=false
        --set compress.ratio=0.02)
for c in none topk int8; do
  "$LOWCOMM" train --nproc 2 "${common[@]}" --set compress.codec=$c --set logging.out_dir="$tmp/run_$c" \
    --summary "$tmp/$c.json" > "$tmp/out_$c" 2>&1 || { cat "$tmp/out_$c"; echo "FAIL: $c run failed"; exit 1; }
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
s = {c: json.load(open(f"{tmp}/{c}.json")) for c in ("none", "topk", "int8")}
grad = {c: s[c]["bytes_by_phase"]["grad"]["sent"] for c in s}
for c in ("topk", "int8"):
    comp = s[c]["compression"]
    assert s[c]["codec"] == c and comp["codec"] == c, comp
    assert s[c]["test_accuracy"] > 0.3, (c, s[c]["test_accuracy"])
    assert comp["raw_bytes"] > comp["payload_bytes"] > 0, comp
    assert abs(s[c]["compression_ratio"] - comp["ratio"]) < 1e-9, s[c]
assert s["topk"]["compression"]["ratio"] > 10, s["topk"]["compression"]
assert 3 < s["int8"]["compression"]["ratio"] < 4.1, s["int8"]["compression"]
assert grad["topk"] * 5 < grad["none"], grad
assert grad["int8"] * 3 < grad["none"], grad
PY
"$LOWCOMM" bench compress --numel 200000 --repeat 1 --no-powersgd --json "$tmp/bench.json" > "$tmp/out_bench" 2>&1 \
  || { cat "$tmp/out_bench"; echo "FAIL: bench compress failed"; exit 1; }
/usr/bin/python3 - "$tmp/bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
topk = [r for r in rows if r["kind"] == "topk"][0]
assert topk["indices_agree"] == topk["k"] == 2000, topk
codecs = {r["codec"] for r in rows if r["kind"] == "codec"}
assert {"fp16", "int8", "topk", "onebit"} <= codecs, codecs
PY
if "$LOWCOMM" train --set compress.codec=topkk > "$tmp/out_bad" 2>&1; then echo "FAIL: bad codec accepted"; exit 1; fi
grep -q "compress.codec" "$tmp/out_bad" || { cat "$tmp/out_bad"; echo "FAIL: error does not name the key"; exit 1; }
echo "compress_e2e: passed"
