#!/usr/bin/env bash
# tools/compare_summaries.py on hand-written summaries: the ratios against the first run, the AB
# column, Markdown output, and clear errors for a missing file or a non-summary.
set -euo pipefail
TOOL=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/ddp.json" <<'J'
{"strategy": "ddp", "steps": 100, "test_accuracy": 0.9, "bytes_sent": 4000000, "wall_s": 10, "compression_ratio": 1.0}
J
cat > "$tmp/ab.json" <<'J'
{"strategy": "ab", "steps": 100, "test_accuracy": 0.895, "bytes_sent": 1000000, "wall_s": 8, "compression_ratio": 1.0,
 "ab": {"model_size_fraction": 0.26, "model_size_n_to_1": 3.85, "compression_reference": 0.25, "compression_reference_n_to_1": 4.0}}
J
out=$(/usr/bin/python3 "$TOOL" DDP="$tmp/ddp.json" AB="$tmp/ab.json")
echo "$out"
grep -q "4.00x" <<< "$out" || { echo "FAIL: bytes ratio"; exit 1; }
grep -q "75.0 %" <<< "$out" || { echo "FAIL: saved fraction"; exit 1; }
grep -q -- "-0.50 pp" <<< "$out" || { echo "FAIL: accuracy difference"; exit 1; }
grep -q "4.00:1" <<< "$out" || { echo "FAIL: AB compression"; exit 1; }
md=$(/usr/bin/python3 "$TOOL" DDP="$tmp/ddp.json" AB="$tmp/ab.json" --markdown --json "$tmp/rows.json")
sed -n 2p <<< "$md" | grep -q '^|---|' || { echo "FAIL: markdown"; exit 1; }
/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r[1]['saved']=='75.0 %', r" "$tmp/rows.json"
if /usr/bin/python3 "$TOOL" X="$tmp/missing.json" 2> "$tmp/err"; then echo "FAIL: missing file accepted"; exit 1; fi
grep -q "missing.json" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: error does not name the file"; exit 1; }
echo '{"a": 1}' > "$tmp/other.json"
if /usr/bin/python3 "$TOOL" X="$tmp/other.json" 2> "$tmp/err"; then echo "FAIL: non-summary accepted"; exit 1; fi
grep -q "not a lowcomm summary" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: wrong error"; exit 1; }
echo "compare_summaries: passed"
