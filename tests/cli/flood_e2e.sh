#!/usr/bin/env bash
# A stranger floods a real training job: 1500 idle and 500 half-open connections to the
# rendezvous port held throughout, new ones with garbage in a loop, and garbage to every port the
# job's processes listen on (its Gloo pair ports while the mesh connects). The job must finish,
# and rank 0's threads and fds stay bounded (a thread per unauthenticated connection let a flood
# exhaust rank 0).
# usage: flood_e2e.sh LOWCOMM TOOLS_DIR
set -euo pipefail
LOWCOMM=$1
TOOLS=$2
tmp=$(mktemp -d)
job= flood=
cleanup() {
  [ -n "$flood" ] && kill "$flood" 2>/dev/null
  [ -n "$job" ] && kill -9 "$job" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "FAIL: flood_e2e.sh line $LINENO exited with status $?" >&2' ERR
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

"$LOWCOMM" launch --nproc 2 --master-port "$port" -- "$LOWCOMM" train --set data.dataset=synthetic \
  --set model.name=mlp --set data.batch_size=16 --set data.train_limit=4096 --set data.test_limit=256 \
  --set schedule.epochs=1000 --set schedule.max_steps=500 --set logging.progress=false \
  --set logging.out_dir="$tmp/run" > "$tmp/train.log" 2>&1 &
job=$!
/usr/bin/python3 "$TOOLS/flood/flood.py" --port "$port" --idle 1500 --half-open 500 --scan-under "$job" \
  > "$tmp/flood.json" 2> "$tmp/flood.err" &
flood=$!

rank0=
max_threads=0 max_fds=0 samples=0
while kill -0 "$job" 2>/dev/null; do
  if [ -z "$rank0" ]; then
    for p in $(pgrep -P "$job" 2>/dev/null); do
      tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=0' && rank0=$p
    done
  fi
  if [ -n "$rank0" ] && [ -r "/proc/$rank0/status" ]; then
    # Rank 0 may exit between the test above and these reads: under pipefail a failed `ls` would
    # end this script silently (CI saw exit 1 with no output), so a vanished process reads as 0.
    t=$(awk '/^Threads:/ {print $2}' "/proc/$rank0/status" 2>/dev/null || echo 0)
    f=$( (ls "/proc/$rank0/fd" 2>/dev/null || true) | wc -l)
    [ "${t:-0}" -gt "$max_threads" ] && max_threads=$t
    [ "$f" -gt "$max_fds" ] && max_fds=$f
    samples=$((samples + 1))
  fi
  sleep 0.2
done
rc=0
wait "$job" || rc=$?
job=
kill "$flood" 2>/dev/null; wait "$flood" 2>/dev/null || true
flood=
echo "flood: $(cat "$tmp/flood.json" 2>/dev/null); rank 0: at most $max_threads threads and $max_fds fds in $samples samples"
[ "$rc" -eq 0 ] || { tail -30 "$tmp/train.log"; echo "FAIL: the job failed under the flood (exit $rc)"; exit 1; }
[ "$samples" -gt 5 ] || { echo "FAIL: rank 0 was sampled only $samples times"; exit 1; }
opened=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["opened"])' "$tmp/flood.json")
[ "$opened" -ge 2000 ] || { echo "FAIL: the flood opened only $opened connections"; exit 1; }
[ "$max_threads" -le 64 ] || { echo "FAIL: rank 0 reached $max_threads threads under the flood"; exit 1; }
[ "$max_fds" -le 1024 ] || { echo "FAIL: rank 0 reached $max_fds open fds under the flood"; exit 1; }
echo "PASS"
