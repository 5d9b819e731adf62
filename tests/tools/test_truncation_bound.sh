#!/usr/bin/env bash
# tools/truncation_bound.py on a hand-built state dict with known singular values: the kept ranks,
# A + B's parameters and the reference metric computed by hand, conv weights as out x (in kh kw),
# stem and head left full, biases of factorised layers counted in the numerator only; and clear
# errors for a missing file, a non-state file and a bad cutoff.
set -euo pipefail
TOOL=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp/state.pt" <<'PY'
import sys, torch
torch.manual_seed(0)
def with_sv(rows, cols, sv):
    u, _ = torch.linalg.qr(torch.randn(rows, len(sv), dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(cols, len(sv), dtype=torch.float64))
    return (u @ torch.diag(torch.tensor(sv, dtype=torch.float64)) @ v.T).float()
state = {
    "stem.weight": torch.randn(4, 1, 3, 3),                                   # first layer: full, 36 both sides
    "features.0.weight": with_sv(8, 40, [1, 0.5, 0.1, 0.01, 0.001, 0.0005, 0.0002, 0.0001]),  # rank 2 at 0.15: 96 of 320
    "features.0.bias": torch.zeros(8),                                        # numerator only: 8
    "features.3.weight": with_sv(3, 18, [2, 1, 0.4]).reshape(3, 2, 3, 3),     # conv 3 x 18, all 3 kept: 63 of 54
    "head.weight": torch.randn(2, 3), "head.bias": torch.zeros(2),            # classifier: full, 8 both sides
}
torch.save(state, sys.argv[1])
PY
out=$(/usr/bin/python3 "$TOOL" "$tmp/state.pt" --json "$tmp/t.json")
echo "$out"
# numerator 36 + 96 + 8 + 63 + 8 = 211, denominator 36 + 320 + 54 + 8 = 418: 1.98:1
grep -q "1.98:1 (211 of 418 parameters)" <<< "$out" || { echo "FAIL: metric"; exit 1; }
/usr/bin/python3 - "$tmp/t.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
by = {l["layer"]: l for l in r["layers"]}
assert sorted(by) == ["features.0", "features.3"], by.keys()     # stem and head are not factorised
assert (by["features.0"]["rank"], by["features.0"]["params_ab"]) == (2, 96), by["features.0"]
assert (by["features.3"]["rows"], by["features.3"]["cols"], by["features.3"]["rank"]) == (3, 18, 3), by["features.3"]
assert abs(by["features.3"]["s_min"] - 0.2) < 1e-5 and abs(by["features.0"]["s_median"] - 0.001) < 1e-6, by
assert abs(r["compression_reference_n_to_1"] - 418 / 211) < 1e-12, r
PY
# A stricter cutoff keeps more: at 0.05 features.0 keeps 3 (144 parameters): 36+144+8+63+8 = 259
grep -q "(259 of 418 parameters)" <<< "$(/usr/bin/python3 "$TOOL" "$tmp/state.pt" --cutoff 0.05)" || { echo "FAIL: cutoff"; exit 1; }
md=$(/usr/bin/python3 "$TOOL" "$tmp/state.pt" --markdown)
sed -n 2p <<< "$md" | grep -q '^|---|' || { echo "FAIL: markdown"; exit 1; }
if /usr/bin/python3 "$TOOL" "$tmp/missing.pt" 2> "$tmp/err"; then echo "FAIL: missing file accepted"; exit 1; fi
grep -q "missing.pt" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: error does not name the file"; exit 1; }
echo "not a checkpoint" > "$tmp/junk.pt"
if /usr/bin/python3 "$TOOL" "$tmp/junk.pt" 2> "$tmp/err"; then echo "FAIL: junk accepted"; exit 1; fi
grep -q "junk.pt is not a torch.load-able" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: wrong error"; exit 1; }
if /usr/bin/python3 "$TOOL" "$tmp/state.pt" --cutoff 1.5 2> "$tmp/err"; then echo "FAIL: cutoff 1.5 accepted"; exit 1; fi
grep -q -- "--cutoff" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: cutoff error"; exit 1; }
echo "truncation_bound: passed"
