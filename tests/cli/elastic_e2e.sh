#!/usr/bin/env bash
# Live membership end to end (docs/elastic.md): `lowcomm train --nproc 4 --elastic` where workers
# kill themselves at one phase (fault.kill), against the same run without failures.
#   none        no failure: the model equals plain DDP's bit for bit (comm.deterministic)
#   collective  slot 2 dies inside step 50's gradient allreduce
#   checkpoint  slot 2 dies while step 50's checkpoint is written
#   heal        slot 1 dies before step 50, then slot 2 during the heal that follows
#   joiner      slot 2 dies before step 50, then its replacement during its own heal
#   setup       slot 2 dies while the first epoch builds its strategy (the others wait for it)
# Every survivor trains on (the launcher never restarts the job), every dead slot is replaced,
# and the job ends at the last step with every slot a member, its loss within 1e-4 of the plain
# run's (the dead slots' batches are computed by the others meanwhile: the same data, summed in
# another order).
# usage: elastic_e2e.sh LOWCOMM PHASE
set -euo pipefail
LOWCOMM=$1
PHASE=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
steps=400  # the kills come at step 50: room for two replacements to start and join
common=(--nproc 4 --set data.dataset=synthetic --set model.name=mlp --set data.batch_size=16
        --set data.train_limit=4096 --set data.test_limit=256 --set schedule.epochs=1000
        --set schedule.max_steps=$steps --set logging.log_every=10 --set logging.progress=false
        --set optimizer.name=adamw --set optimizer.lr=0.0002 --set comm.deterministic=true
        --set comm.timeout_s=60 --set checkpoint.every_steps=50)
case $PHASE in
  none) kill= ;;
  collective) kill=2:collective:50 ;;
  checkpoint) kill=2:checkpoint:50 ;;
  heal) kill=1:step:50,2:heal ;;
  joiner) kill=2:step:50,2.1:heal ;;
  setup) kill=2:setup ;;
  *) echo "usage: elastic_e2e.sh LOWCOMM none|collective|checkpoint|heal|joiner|setup"; exit 2 ;;
esac
"$LOWCOMM" train "${common[@]}" --set logging.out_dir="$tmp/plain" > "$tmp/plain.log" 2>&1 \
  || { cat "$tmp/plain.log"; echo "FAIL: the run without --elastic failed"; exit 1; }
timeout 240 "$LOWCOMM" train "${common[@]}" --elastic --set fault.kill="$kill" --set logging.out_dir="$tmp/elastic" \
  > "$tmp/elastic.log" 2>&1 || { rc=$?; cat "$tmp/elastic.log"; echo "FAIL: the elastic run exited $rc"; exit 1; }
if [ -n "$kill" ]; then
  grep -q "membership epoch 2: slot [12] left" "$tmp/elastic.log" || { cat "$tmp/elastic.log"; echo "FAIL: no departure"; exit 1; }
  grep -q "joined (incarnation 1)" "$tmp/elastic.log" || { cat "$tmp/elastic.log"; echo "FAIL: no replacement joined"; exit 1; }
  if grep -q "lowcomm launch: restart" "$tmp/elastic.log"; then cat "$tmp/elastic.log"; echo "FAIL: the job restarted"; exit 1; fi
fi
/usr/bin/python3 - "$tmp" "$PHASE" "$steps" <<'PY' || { cat "$tmp/elastic.log"; echo "FAIL: see above"; exit 1; }
import json, sys
import torch
tmp, phase, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
plain, el = (json.load(open(f"{tmp}/{d}/summary.json")) for d in ("plain", "elastic"))
e = el["elastic"]
assert el["steps"] == steps, el["steps"]
assert e["members"] == [0, 1, 2, 3], e["members"]
rel = abs(el["test_loss"] - plain["test_loss"]) / plain["test_loss"]
print(f"elastic_e2e {phase}: epochs {e['epoch']}, heals {[(h['epoch'], h['why'], round(h['seconds'], 2)) for h in e['heals']]}, "
      f"loss {el['test_loss']:.7f} vs {plain['test_loss']:.7f} ({rel:.2e})")
if phase == "none":
    a, b = torch.load(f"{tmp}/plain/model_state.pt"), torch.load(f"{tmp}/elastic/model_state.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "elastic without failures differs from DDP"
    assert e["epoch"] == 1 and not e["heals"], e
else:
    assert e["epoch"] >= 3, e
    assert rel < 1e-4, rel
PY
echo "elastic_e2e $PHASE: ok"
