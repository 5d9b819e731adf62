#!/usr/bin/env bash
# tools/compress_table.py: rows in codec order with deltas against "none", and clear errors.
set -euo pipefail
TOOL=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
summary() {  # codec accuracy grad_bytes ratio steps
  cat >"$tmp/$1.json" <<JSON
{"codec": "$1", "test_accuracy": $2, "bytes_sent_per_rank": 999, "wall_s": 10.0, "steps": $5,
 "bytes_by_phase": {"grad": {"sent": $3, "recv": $3}},
 "compression": {"codec": "$1", "memory": "residual", "ratio": $4, "codec_s": 1.5}}
JSON
}
summary topk 0.9012 1000 50.0 100
summary none 0.9050 50000 1.0 100
out=$(/usr/bin/python3 "$TOOL" "$tmp/topk.json" "$tmp/none.json")
sed -n 3p <<< "$out" | grep -q "^| none " || { echo "$out"; echo "FAIL: none is not the first row"; exit 1; }
grep -q "| topk | residual | 90.12 % | -0.38 | 1,000 | 50.0x | 50.0 |" <<< "$out" \
  || { echo "$out"; echo "FAIL: topk row"; exit 1; }
summary int8 0.9 1 4.0 7
if /usr/bin/python3 "$TOOL" "$tmp/none.json" "$tmp/int8.json" 2>"$tmp/err"; then echo "FAIL: step mismatch accepted"; exit 1; fi
grep -q "different step counts" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: message"; exit 1; }
echo '{"x": 1}' >"$tmp/bad.json"
if /usr/bin/python3 "$TOOL" "$tmp/bad.json" 2>"$tmp/err"; then echo "FAIL: non-summary accepted"; exit 1; fi
grep -q "not a lowcomm train summary" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: message"; exit 1; }
echo "compress_table: passed"
