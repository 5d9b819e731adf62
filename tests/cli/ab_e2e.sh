#!/usr/bin/env bash
# AB-training through the real launcher: 4 processes, the same short run as plain DDP, with
# groups of 2 (with-stale) and with one global group (only-b). Both learn, report their schedule
# and compression metric, and send fewer bytes than DDP; the comparison tool reads them; a bad
# ab.full_rank_layers entry fails on every rank with the key in the message.
set -euo pipefail
LOWCOMM=$1
TOOLS=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--set data.dataset=synthetic --set model.name=mlp --set data.batch_size=32 --set data.train_limit=4096
        --set data.test_limit=512 --set schedule.epochs=100 --set schedule.max_steps=40 --set logging.progress=false
        --set ab.warmup_steps=8 --set ab.steps_btw_syncing=15 --set ab.ddp_steps_after_sync=2
        --set ab.lr_rebound_steps=3 --set ab.low_rank_cutoff=0.5)
run() {
  local name=$1; shift
  "$LOWCOMM" train --nproc 4 "${common[@]}" --set logging.out_dir="$tmp/run_$name" --summary "$tmp/$name.json" "$@" \
    > "$tmp/out_$name" 2>&1 || { cat "$tmp/out_$name"; echo "FAIL: $name run failed"; exit 1; }
}
run ddp
run ab --set strategy.name=ab --set ab.group_size=2 --set ab.sync_mode=with-stale
run onlyb --set strategy.name=ab --set ab.group_size=-1 --set ab.sync_mode=only-b
run ab_bf16 --set strategy.name=ab --set ab.group_size=2 --set ab.sync_mode=only-learned --set compress.codec=bf16
grep -q "AB compression" "$tmp/out_ab" || { cat "$tmp/out_ab"; echo "FAIL: no AB lines in the printed summary"; exit 1; }
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
s = {k: json.load(open(f"{tmp}/{k}.json")) for k in ("ddp", "ab", "onlyb")}
for k in ("ab", "onlyb"):
    ab = s[k]["ab"]
    assert s[k]["steps"] == 40 and s[k]["test_accuracy"] > 0.3, (k, s[k]["test_accuracy"])
    # warmup 0-7, ab 8-14, sync 15, full-rank 16, ab 17-29, sync 30, full-rank 31, ab 32-39
    assert ab["steps_by_phase"] == {"warmup": 8, "ab": 28, "sync": 2, "full-rank": 2}, ab
    assert 0 < ab["model_size_fraction"] < 1 and abs(ab["model_size_n_to_1"] * ab["model_size_fraction"] - 1) < 1e-9, ab
    # The reference's metric leaves factorised layers' biases out of the denominator only.
    assert ab["model_size_fraction"] < ab["compression_reference"] < 1.01 * ab["model_size_fraction"], ab
    assert abs(ab["compression_reference_n_to_1"] * ab["compression_reference"] - 1) < 1e-9, ab
    assert sum(l["params_factors"] for l in ab["layers"]) > 0 and all(l["rank"] == ab["ranks"][l["name"]] for l in ab["layers"]), ab
    assert s[k]["bytes_sent"] < s["ddp"]["bytes_sent"], (k, s[k]["bytes_sent"], s["ddp"]["bytes_sent"])
    assert s[k]["bytes_by_phase"]["ab"]["sent"] > 0, s[k]["bytes_by_phase"]
# A codec inside the groups: its ratio covers every DDP the strategy built, and it saves bytes.
b = json.load(open(f"{tmp}/ab_bf16.json"))
assert abs(b["compression_ratio"] - b["compression"]["ratio"]) < 1e-9 and b["compression_ratio"] > 1.9, b["compression"]
assert b["bytes_sent"] * 1.5 < s["ab"]["bytes_sent"], (b["bytes_sent"], s["ab"]["bytes_sent"])
assert s["ab"]["ab"]["groups"] == 2 and s["ab"]["ab"]["a_groups"] == 1, s["ab"]["ab"]
assert s["onlyb"]["ab"]["groups"] == 1 and s["onlyb"]["ab"]["a_groups"] == 0, s["onlyb"]["ab"]
events = [json.loads(l) for l in open(f"{tmp}/run_ab/metrics.jsonl") if '"type":"ab"' in l]
assert [e["event"] for e in events] == ["svd", "sync", "truncate", "sync", "truncate", "final-sync"], events
PY
/usr/bin/python3 "$TOOLS/compare_summaries.py" DDP="$tmp/ddp.json" AB="$tmp/ab.json" ONLYB="$tmp/onlyb.json" \
  > "$tmp/table" || { echo "FAIL: compare_summaries"; exit 1; }
cat "$tmp/table"
if "$LOWCOMM" train --nproc 2 "${common[@]}" --set strategy.name=ab --set ab.full_rank_layers=stem,nosuch \
  --set logging.out_dir="$tmp/bad" > "$tmp/out_bad" 2>&1; then echo "FAIL: unknown full-rank layer accepted"; exit 1; fi
grep -q "ab.full_rank_layers" "$tmp/out_bad" || { cat "$tmp/out_bad"; echo "FAIL: error does not name the key"; exit 1; }
echo "ab_e2e: passed"
