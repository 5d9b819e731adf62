#!/usr/bin/env bash
# Gloo listens where the job rendezvouses: in a network namespace whose hostname resolves to a
# non-loopback address (10.77.0.1 on a veth inside it), `lowcomm train --nproc 2` with the
# default MASTER_ADDR 127.0.0.1 must keep every connection of its ranks on loopback. (Binding the
# hostname's address made a job told to use 127.0.0.1 reachable from the network.)
# Needs root (namespaces); skipped (exit 77) without it.
# usage: bind_e2e.sh LOWCOMM
set -euo pipefail
LOWCOMM=$1
[ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null || { echo "SKIP: needs root and unshare"; exit 77; }
ns=lcbind$$
tmp=$(mktemp -d)
cleanup() {
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "/etc/netns/$ns" "$tmp"
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add d0 type veth peer name d1  # (no dummy module in every kernel)
ip -n "$ns" link set d1 up
ip -n "$ns" addr add 10.77.0.1/24 dev d0
ip -n "$ns" link set d0 up
mkdir -p "/etc/netns/$ns"  # `ip netns exec` mounts these over /etc
printf '127.0.0.1 localhost\n10.77.0.1 lcbindhost\n' > "/etc/netns/$ns/hosts"
ip netns exec "$ns" unshare --uts sh -c "hostname lcbindhost; getent hosts lcbindhost" | grep -q 10.77.0.1 \
  || { echo "FAIL: the test's hostname does not resolve to 10.77.0.1"; exit 1; }

ip netns exec "$ns" unshare --uts sh -c "hostname lcbindhost; exec \"$LOWCOMM\" train --nproc 2 \
  --set data.dataset=synthetic --set model.name=mlp --set data.batch_size=16 --set data.train_limit=2048 \
  --set data.test_limit=256 --set schedule.epochs=1000 --set schedule.max_steps=400 --set logging.progress=false \
  --set logging.out_dir=$tmp/run" > "$tmp/train.log" 2>&1 &
job=$!
seen=0
while kill -0 "$job" 2>/dev/null; do
  ip netns exec "$ns" ss -tnH state established >> "$tmp/conns" 2>/dev/null || true
  sleep 0.1
done
wait "$job" || { cat "$tmp/train.log"; echo "FAIL: the job failed"; exit 1; }
total=$(wc -l < "$tmp/conns")
off=$(grep -c '10\.77\.0\.1' "$tmp/conns" || true)
[ "$total" -gt 0 ] || { echo "FAIL: no connection of the job was seen"; exit 1; }
[ "$off" -eq 0 ] || { grep '10\.77\.0\.1' "$tmp/conns" | sort -u | head; echo "FAIL: $off connections on 10.77.0.1 (the hostname's address), not loopback"; exit 1; }
echo "PASS: $total connection samples, all on loopback"
