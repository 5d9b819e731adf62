#!/usr/bin/env bash
# Two jobs on one out_dir, through the real launcher: while job A trains, job B on the same
# logging.out_dir fails at once (exit 2) naming A's pid and host, and leaves A's `latest` and
# metrics alone; once A is gone (killed: the lock dies with it), job C runs there and removes the
# checkpoint temporaries a killed writer left.
# usage: out_dir_lock_e2e.sh LOWCOMM
set -euo pipefail
LOWCOMM=$1
tmp=$(mktemp -d)
job=
cleanup() { [ -n "$job" ] && kill -9 "$job" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
common=(--nproc 2 --set data.dataset=synthetic --set model.name=mlp --set data.batch_size=32
        --set data.train_limit=1024 --set data.test_limit=256 --set schedule.epochs=1000 --set checkpoint.every_steps=10
        --set logging.log_every=5 --set logging.progress=false --set logging.out_dir="$tmp/run")
"$LOWCOMM" train "${common[@]}" --set schedule.max_steps=100000 > "$tmp/a.log" 2>&1 &
job=$!
for _ in $(seq 600); do
  grep -q '"type":"checkpoint"' "$tmp/run/metrics.jsonl" 2>/dev/null && break
  kill -0 "$job" 2>/dev/null || { cat "$tmp/a.log"; echo "FAIL: job A ended early"; exit 1; }
  sleep 0.05
done
[ -s "$tmp/run/checkpoints/latest" ] || { cat "$tmp/a.log"; echo "FAIL: job A wrote no checkpoint"; exit 1; }
lines_before=$(wc -l < "$tmp/run/metrics.jsonl")
start=$(date +%s)
rc=0
"$LOWCOMM" train "${common[@]}" --set schedule.max_steps=20 > "$tmp/b.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat "$tmp/b.log"; echo "FAIL: job B on job A's out_dir exited $rc, want 2 (a ConfigError)"; exit 1; }
[ $(( $(date +%s) - start )) -lt 30 ] || { echo "FAIL: job B took more than 30 s to fail"; exit 1; }
holders=$(pgrep -P "$job" | tr '\n' ' ')
named=no
for p in $holders; do grep -q "pid $p host $(hostname)" "$tmp/b.log" && named=yes; done
[ $named = yes ] || { cat "$tmp/b.log"; echo "FAIL: job B's error names none of job A's workers ($holders) on $(hostname)"; exit 1; }
grep -Eq "(logging.out_dir '$tmp/run'|checkpoint directory '$tmp/run/checkpoints') is in use by another job" "$tmp/b.log" \
  || { cat "$tmp/b.log"; echo "FAIL: job B's error does not name the directory"; exit 1; }
[ -s "$tmp/run/checkpoints/latest" ] || { echo "FAIL: job B removed job A's latest"; exit 1; }
lines_after=$(wc -l < "$tmp/run/metrics.jsonl")
[ "$lines_after" -ge "$lines_before" ] || { echo "FAIL: job B truncated job A's metrics ($lines_before -> $lines_after lines)"; exit 1; }
kill -0 "$job" 2>/dev/null || { cat "$tmp/a.log"; echo "FAIL: job A died while job B tried"; exit 1; }

# A is killed; what a killed checkpoint writer leaves behind is removed by the next job.
kill -9 "$job"
for _ in $(seq 200); do pgrep -f -- "logging.out_dir=$tmp/run" > /dev/null || break; sleep 0.05; done
job=
for r in 0 1; do echo partial > "$tmp/run/checkpoints/step77.rank$r.pt.tmp"; done
"$LOWCOMM" train "${common[@]}" --set schedule.max_steps=20 > "$tmp/c.log" 2>&1 \
  || { cat "$tmp/c.log"; echo "FAIL: job C after job A was killed failed"; exit 1; }
for r in 0 1; do
  [ ! -e "$tmp/run/checkpoints/step77.rank$r.pt.tmp" ] || { echo "FAIL: job C left the stale step77.rank$r.pt.tmp"; exit 1; }
done
echo "out_dir_lock_e2e: 2 passed, 0 failed"
