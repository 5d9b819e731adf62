#!/usr/bin/env bash
# `lowcomm train --nproc 2 --max-restarts 2` restarts only what can heal: a data error (a corrupt
# gzip file of the text corpus) and a corrupt checkpoint (--resume from garbage) would fail the
# same way again, so the workers run once, the launcher says why it does not restart, and the job
# exits with the worker's status (3 data error, 4 corrupt checkpoint: include/lowcomm/base/exit_status.h).
# usage: restart_refused_e2e.sh LOWCOMM
set -euo pipefail
LOWCOMM=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect NAME STATUS CLASS PART -- ARGS...: the run exits STATUS, its log names CLASS and PART,
# refuses to restart and never restarts.
expect() {
  local name=$1 status=$2 class=$3 part=$4
  shift 5
  local rc=0
  timeout 120 "$LOWCOMM" train --nproc 2 --max-restarts 2 "$@" > "$tmp/$name.log" 2>&1 || rc=$?
  fail() { cat "$tmp/$name.log"; echo "FAIL ($name): $1"; exit 1; }
  [ "$rc" = "$status" ] || fail "exit status $rc, expected $status"
  grep -q "($class)" "$tmp/$name.log" || fail "the launcher does not name the class '$class'"
  grep -q "not restarting" "$tmp/$name.log" || fail "no line saying why it does not restart"
  grep -q "$part" "$tmp/$name.log" || fail "the error does not name '$part'"
  if grep -q "lowcomm launch: restart 1 of" "$tmp/$name.log"; then fail "restarted an error that recurs"; fi
  echo "$name: exit $rc, not restarted"
}

mkdir "$tmp/corpus"
head -c 20000 /dev/urandom | base64 > "$tmp/corpus/a.txt"
head -c 20000 /dev/urandom | base64 | gzip -c > "$tmp/whole.gz"
head -c 4000 "$tmp/whole.gz" > "$tmp/corpus/b.txt.gz"  # a truncated gzip stream
expect data 3 "data error" "b.txt.gz" -- --set data.dataset=text --set model.name=gpt --set data.dir="$tmp/corpus" \
  --set model.layers=1 --set model.dim=32 --set model.heads=2 --set model.seq_len=16 --set logging.progress=false \
  --set logging.out_dir="$tmp/out_data"

mkdir "$tmp/ckpt"
echo 40 > "$tmp/ckpt/latest"
for r in 0 1; do head -c 3000 /dev/urandom > "$tmp/ckpt/step40.rank$r.pt"; done
expect checkpoint 4 "corrupt checkpoint" "step40\.rank[01]\.pt" -- --resume --set data.dataset=synthetic --set model.name=mlp \
  --set checkpoint.dir="$tmp/ckpt" --set logging.progress=false --set logging.out_dir="$tmp/out_ckpt"
echo "restart_refused_e2e: errors that recur are not restarted"
