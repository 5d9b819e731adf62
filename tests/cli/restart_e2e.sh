#!/usr/bin/env bash
# Elastic restart, bit for bit: `lowcomm train --nproc 2 --max-restarts K` while a worker is
# SIGKILLed K times at random moments (each after the job has checkpointed since its last
# restart). Every restart resumes from the latest checkpoint; the job must end with a model
# bit-identical to an uninterrupted run (comm.deterministic), no step twice in metrics.jsonl, and
# the summary's `restarts` / `resumes` telling what happened.
# usage: restart_e2e.sh LOWCOMM [KILLS (default 2)] [RESULT.json] [--set KEY=VALUE ...]
#   (e.g. --set compress.codec=topk, or AB-training: --set strategy.name=ab --set ab.warmup_steps=100 ...)
set -euo pipefail
LOWCOMM=$1
KILLS=${2:-2}
RESULT=${3:-}
EXTRA=("${@:4}")
tmp=$(mktemp -d)
job=
cleanup() { [ -n "$job" ] && kill -9 "$job" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
steps=$((1000 + 150 * KILLS))
common=(--nproc 2 --set data.dataset=synthetic --set model.name=mlp --set data.batch_size=16
        --set data.train_limit=4096 --set data.test_limit=256 --set schedule.epochs=1000
        --set schedule.max_steps=$steps --set checkpoint.every_steps=40 --set checkpoint.keep_last=2
        --set logging.log_every=10 --set comm.deterministic=true --set logging.progress=false
        --set optimizer.name=adamw --set optimizer.lr=0.002 "${EXTRA[@]}")
"$LOWCOMM" train "${common[@]}" --set logging.out_dir="$tmp/plain" > "$tmp/plain.log" 2>&1 \
  || { cat "$tmp/plain.log"; echo "FAIL: uninterrupted run failed"; exit 1; }

# 0 when the job has written a checkpoint since its `done`-th resume (or since its start).
checkpointed_since() {
  /usr/bin/python3 - "$tmp/chaos/metrics.jsonl" "$1" <<'PY'
import json, sys
try:
    recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip().endswith("}")]
except (OSError, ValueError):
    sys.exit(1)
done = int(sys.argv[2])
resumes = [i for i, r in enumerate(recs) if r.get("type") == "resume"]
if len(resumes) < done:
    sys.exit(1)
start = resumes[done - 1] if done else -1
sys.exit(0 if any(r.get("type") == "checkpoint" for r in recs[start + 1:]) else 1)
PY
}

"$LOWCOMM" train "${common[@]}" --max-restarts "$KILLS" --set logging.out_dir="$tmp/chaos" > "$tmp/chaos.log" 2>&1 &
job=$!
for k in $(seq 0 $((KILLS - 1))); do
  for _ in $(seq 1200); do checkpointed_since "$k" && break; kill -0 "$job" 2>/dev/null || break; sleep 0.05; done
  sleep "0.$((RANDOM % 4))$((RANDOM % 10))"  # a random moment after that checkpoint
  workers=($(pgrep -P "$job" || true))
  [ ${#workers[@]} -gt 0 ] || { cat "$tmp/chaos.log"; echo "FAIL: no workers to kill before kill $((k + 1))"; exit 1; }
  victim=${workers[$((RANDOM % ${#workers[@]}))]}
  kill -9 "$victim"
  # the launcher reaps the victim and stops the others before it restarts them
  for _ in $(seq 200); do kill -0 "$victim" 2>/dev/null || break; sleep 0.05; done
done
wait "$job" || { rc=$?; job=; cat "$tmp/chaos.log"; echo "FAIL: job with restarts exited $rc"; exit 1; }
job=
/usr/bin/python3 - "$tmp" "$KILLS" "$RESULT" <<'PY'
import collections, json, sys
import torch
tmp, kills, result = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = json.load(open(f"{tmp}/chaos/summary.json"))
assert s["restarts"] == kills, (s["restarts"], kills)
assert len(s["resumes"]) == kills, s["resumes"]
a, b = torch.load(f"{tmp}/plain/model_state.pt"), torch.load(f"{tmp}/chaos/model_state.pt")
assert a.keys() == b.keys()
identical = all(torch.equal(a[k], b[k]) for k in a)
recs = [json.loads(l) for l in open(f"{tmp}/chaos/metrics.jsonl")]
twice = [k for k, n in collections.Counter((r["type"], r["step"]) for r in recs if r["type"] in ("step", "eval")).items() if n > 1]
lost = [r["steps_lost"] for r in s["resumes"]]
print(f"restarts {kills}, steps lost per restart {lost}, bit-identical {identical}, repeated records {twice}")
if result:
    json.dump({"kills": kills, "restarts": s["restarts"], "steps_lost": lost, "bit_identical": identical,
               "repeated_records": len(twice), "steps": s["steps"]}, open(result, "w"), indent=1)
assert not twice, twice
assert identical, "the restarted job's weights differ from the uninterrupted run's"
PY
grep -q "lowcomm launch: restart 1 of $KILLS" "$tmp/chaos.log" || { cat "$tmp/chaos.log"; echo "FAIL: no restart line"; exit 1; }
echo "restart_e2e: $KILLS restarts survived, bit-identical"
