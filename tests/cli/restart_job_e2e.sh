#!/usr/bin/env bash
# A restart resumes only a checkpoint of its own job, through the real launcher:
# 1. job A trains 20 steps in an out_dir; job B (same out_dir) loses a worker before its first
#    checkpoint (here: at start, before rendezvous, data and model). B's restart must train B
#    from step 0, not continue A's checkpoint.
# 2. a job whose first attempt checkpointed still resumes that checkpoint on its restart (one job
#    token for every attempt of a launch).
# usage: restart_job_e2e.sh LOWCOMM
set -euo pipefail
LOWCOMM=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--set data.dataset=synthetic --set model.name=mlp --set data.batch_size=32 --set data.train_limit=1024
        --set data.test_limit=256 --set schedule.epochs=100 --set checkpoint.every_steps=10 --set logging.log_every=5
        --set logging.progress=false)
# What a run's summary says about its resumes, and its first logged step.
resumes() {
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(f"{d}/summary.json"))
first = min(r["step"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["type"] == "step")
print(json.dumps({"steps": s["steps"], "restarts": s["restarts"],
                  "from_steps": [r["from_step"] for r in s["resumes"]], "first_step": first}))
PY
}

"$LOWCOMM" train --nproc 2 "${common[@]}" --set logging.out_dir="$tmp/run" --set schedule.max_steps=20 \
  > "$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; echo "FAIL: job A failed"; exit 1; }
# Job B: its first attempt loses rank 1 at start.
"$LOWCOMM" launch --nproc 2 --max-restarts 1 -- /bin/sh -c \
  '[ "$LOWCOMM_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ] && kill -9 $$; exec "$0" train "$@"' \
  "$LOWCOMM" "${common[@]}" --set logging.out_dir="$tmp/run" --set schedule.max_steps=30 > "$tmp/b.log" 2>&1 \
  || { cat "$tmp/b.log"; echo "FAIL: job B failed"; exit 1; }
grep -q "restart 1 of 1" "$tmp/b.log" || { cat "$tmp/b.log"; echo "FAIL: job B was not restarted"; exit 1; }
got=$(resumes "$tmp/run")
want='{"steps": 30, "restarts": 1, "from_steps": [], "first_step": 5}'
[ "$got" = "$want" ] || { cat "$tmp/b.log"; echo "FAIL: job B's restart continued job A's checkpoint: $got (want $want)"; exit 1; }
grep -q "not by this job" "$tmp/b.log" || { cat "$tmp/b.log"; echo "FAIL: job B's restart did not say why it starts afresh"; exit 1; }

# Job C: its first attempt trains 20 steps (checkpoint 20), then every worker dies; the restart
# (30 steps) must resume C's own checkpoint.
"$LOWCOMM" launch --nproc 2 --max-restarts 1 -- /bin/sh -c \
  'if [ "$LOWCOMM_RESTART_COUNT" = 0 ]; then "$0" train "$@" --set schedule.max_steps=20 && kill -9 $$; exit 1; fi
   exec "$0" train "$@" --set schedule.max_steps=30' \
  "$LOWCOMM" "${common[@]}" --set logging.out_dir="$tmp/c" > "$tmp/c.log" 2>&1 \
  || { cat "$tmp/c.log"; echo "FAIL: job C failed"; exit 1; }
got=$(resumes "$tmp/c")
want='{"steps": 30, "restarts": 1, "from_steps": [20], "first_step": 5}'
[ "$got" = "$want" ] || { cat "$tmp/c.log"; echo "FAIL: job C's restart did not resume its own checkpoint: $got (want $want)"; exit 1; }
echo "restart_job_e2e: 2 passed, 0 failed"
