#!/usr/bin/env bash
# tools/plot_predict.py on hand-written `simulate predict --json` rows: the Markdown table's step
# times and scaling efficiencies, a PNG written, and clear errors for a bad argument or file.
set -euo pipefail
TOOL=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
row() { echo "{\"ranks\": $1, \"predicted_step_s\": $2, \"samples_per_s\": $(/usr/bin/python3 -c "print(64 * $1 / $2)"), \"compute_s\": 0.01, \"exposed_comm_s\": $3}"; }
echo "[$(row 4 0.02 0.01), $(row 16 0.04 0.03)]" > "$tmp/ddp.json"
echo "[$(row 4 0.015 0.005)]" > "$tmp/topk.json"
md=$(/usr/bin/python3 "$TOOL" DDP="$tmp/ddp.json" topk="$tmp/topk.json" --markdown -o "$tmp/p.png")
echo "$md"
sed -n 1p <<< "$md" | grep -q "| run | 4 ranks | 16 ranks |" || { echo "FAIL: header"; exit 1; }
grep -q "| DDP | 20.0 ms (1.00) | 40.0 ms (0.50) |" <<< "$md" || { echo "FAIL: DDP row"; exit 1; }
grep -q "| topk | 15.0 ms (1.00) | – |" <<< "$md" || { echo "FAIL: topk row"; exit 1; }
[[ -s "$tmp/p.png" ]] || { echo "FAIL: no PNG"; exit 1; }
if /usr/bin/python3 "$TOOL" "$tmp/ddp.json" --markdown 2> "$tmp/err"; then echo "FAIL: no label accepted"; exit 1; fi
grep -q "expected LABEL=PREDICT.json" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: message"; exit 1; }
echo '[{"ranks": 4}]' > "$tmp/bad.json"
if /usr/bin/python3 "$TOOL" X="$tmp/bad.json" --markdown 2> "$tmp/err"; then echo "FAIL: bad file accepted"; exit 1; fi
grep -q "bad.json: not a" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: message"; exit 1; }
if /usr/bin/python3 "$TOOL" X="$tmp/ddp.json" 2> "$tmp/err"; then echo "FAIL: nothing to do accepted"; exit 1; fi
echo "plot_predict: passed"
