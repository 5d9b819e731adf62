#!/usr/bin/env bash
# tools/cluster end to end on a 2-node emulated cluster: idempotent `up`, the tbf rate limit,
# two sites joined by the emulated WAN (topology, round trips, site variables, WAN bytes),
# `lowcomm train` and `lowcomm bench collectives` through `--cluster` (payload vs wire bytes,
# correct allreduce results), a clean `down`, cleanup after a failure half-way through `up`, and
# the not-root message. Needs root; exit 77 (skipped) only when not root or when network
# namespaces cannot be made here.
#   test_cluster.sh LOWCOMM_BINARY TOOLS_CLUSTER
set -euo pipefail
LOWCOMM=$1
CLUSTER=$2
NETPROBE=$(dirname "$CLUSTER")/netprobe.py
PY=/usr/bin/python3

if [[ $(id -u) != 0 ]]; then
  echo "SKIP: tools/cluster needs root (network namespaces and tc); run this test as root"
  exit 77
fi
P=lct$(($$ % 100000))   # unique per run, matches tools/cluster's ^[a-z][a-z0-9]{0,7}$
if ! err=$(ip netns add "$P-probe" 2>&1); then
  echo "SKIP: 'ip netns add' fails here, network namespaces unavailable: $err"
  exit 77
fi
ip netns del "$P-probe"

tmp=$(mktemp -d)
export LOWCOMM_CLUSTER_DIR=$tmp/state
cleanup() {
  "$CLUSTER" down --prefix "$P" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok: $*"; passed=$((passed + 1)); }
ours() { ip netns list | awk '{print $1}' | grep -E "^$P-(br|w|[bn][0-9]+)$" | paste -sd " " || true; }

[[ -z $(ours) ]] || fail "namespaces named $P-* exist before the test: $(ours)"
host_links_before=$(ip -o link show)

# a. up, up again (no-op), status --json.
"$CLUSTER" up --nodes 2 --rate 1gbit --prefix "$P" >"$tmp/up1" 2>&1 || { cat "$tmp/up1"; fail "up"; }
[[ -f $LOWCOMM_CLUSTER_DIR/$P.env ]] || fail "no state file $LOWCOMM_CLUSTER_DIR/$P.env after up"
ino=$(stat -c %i "/run/netns/$P-n0")
"$CLUSTER" up --nodes 2 --rate 1gbit --prefix "$P" >"$tmp/up2" 2>&1 || { cat "$tmp/up2"; fail "second up"; }
grep -q "already up" "$tmp/up2" || { cat "$tmp/up2"; fail "second up did not say 'already up'"; }
[[ $(stat -c %i "/run/netns/$P-n0") == "$ino" ]] || fail "second up rebuilt the cluster (namespace $P-n0 is new)"
"$CLUSTER" status --json --prefix "$P" >"$tmp/status.json" || { cat "$tmp/status.json"; fail "status --json"; }
$PY - "$tmp/status.json" "$P" <<'PY' || fail "status --json"
import json, sys
s = json.load(open(sys.argv[1])); p = sys.argv[2]
assert s["up"] is True and s["cluster"] == p, s
assert s["nodes"] == 2 and len(s["node"]) == 2, s
assert [n["netns"] for n in s["node"]] == [f"{p}-n0", f"{p}-n1"], s
assert [n["address"] for n in s["node"]] == ["198.18.0.1", "198.18.0.2"], s
assert s["rate_bps"] == 10**9 and s["iface"] == "eth0", s
PY
[[ $(ours | wc -w) == 3 ]] || fail "expected 3 namespaces ($P-br, $P-n0, $P-n1), got: $(ours)"
[[ $(ip -o link show) == "$host_links_before" ]] || fail "up changed the host's links"
ok "up is idempotent ('already up', same namespaces), status --json shows 2 nodes at 1gbit"

# b. the rate limit: 48 MiB from node 0 to node 1, timed at the receiver (first to last byte).
cat >"$tmp/xfer.py" <<'PY'
import socket, sys, time
mode, total = sys.argv[1], 48 << 20
if mode == "recv":
    ready = sys.argv[2]
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("198.18.0.2", 5201)); srv.listen(1)
    open(ready, "w").close()
    srv.settimeout(20)
    conn, _ = srv.accept(); conn.settimeout(20)
    got, t0 = 0, None
    while got < total:
        b = conn.recv(1 << 20)
        if not b: break
        if t0 is None: t0 = time.monotonic()
        got += len(b)
    dt = time.monotonic() - t0
    print(f"{got} {dt:.6f}")
else:
    s = socket.create_connection(("198.18.0.2", 5201), timeout=20)
    buf = b"\x5a" * (1 << 20)
    for _ in range(total >> 20): s.sendall(buf)
    s.close()
PY
ip netns exec "$P-n1" $PY "$tmp/xfer.py" recv "$tmp/ready" >"$tmp/xfer.out" 2>&1 &
recv_pid=$!
for _ in $(seq 100); do [[ -e $tmp/ready ]] && break; sleep 0.05; done
[[ -e $tmp/ready ]] || { cat "$tmp/xfer.out"; fail "receiver did not start"; }
ip netns exec "$P-n0" $PY "$tmp/xfer.py" send || fail "sender failed"
wait "$recv_pid" || { cat "$tmp/xfer.out"; fail "receiver failed"; }
read -r got secs <"$tmp/xfer.out"
[[ $got == $((48 << 20)) ]] || fail "receiver got $got bytes, expected $((48 << 20))"
gbps=$(awk -v b="$got" -v s="$secs" 'BEGIN { printf "%.3f", b * 8 / s / 1e9 }')
awk -v r="$gbps" 'BEGIN { exit !(r <= 1.05 && r >= 0.5) }' \
  || fail "48 MiB node 0 -> node 1 at $gbps Gbit/s, expected 0.5 .. 1.05 on a 1gbit link"
ok "rate limit: 48 MiB node 0 -> node 1 in ${secs}s = $gbps Gbit/s goodput (link 1gbit)"

# c. lowcomm train through --cluster: the meter's payload against the kernel's wire bytes.
# The meter counts collective payload only; the wire adds TCP/IP headers and ACKs (~0.25 % here:
# veth carries GSO super-packets) and setup traffic the meter excludes (store rendezvous, Gloo
# connections, the summary's own gathers): measured 10-16 KB per node (fit of 1-step and 20-step
# runs); SETUP_BYTES allows 4x that. bytes_sent_per_rank is the mean over ranks, and the ranks are
# not symmetric (rank 0 broadcasts the initial parameters), so each node is checked against its
# own rank's payload: rank 0's is its bytes_by_phase total, rank 1's the rest of bytes_sent.
SETUP_BYTES=$((64 << 10))
"$LOWCOMM" train --cluster "$P" --nproc 2 --set data.dataset=synthetic --set model.name=mlp \
  --set data.batch_size=32 --set data.train_limit=1024 --set data.test_limit=256 --set schedule.epochs=100 \
  --set schedule.max_steps=20 --set checkpoint.every_steps=0 --set logging.log_every=10 \
  --set logging.out_dir="$tmp/run" --set checkpoint.dir="$tmp/ckpt" \
  --summary "$tmp/s.json" --wire-json "$tmp/wire.json" >"$tmp/train.out" 2>&1 \
  || { cat "$tmp/train.out"; fail "lowcomm train --cluster failed"; }
grep -q "wire bytes on cluster $P" "$tmp/train.out" || { cat "$tmp/train.out"; fail "no wire bytes line"; }
$PY - "$tmp/s.json" "$tmp/wire.json" "$P" "$SETUP_BYTES" <<'PY' || fail "payload vs wire bytes"
import json, sys
s = json.load(open(sys.argv[1])); w = json.load(open(sys.argv[2])); p = sys.argv[3]; setup = int(sys.argv[4])
assert s["world"] == 2 and s["steps"] == 20, s
assert w["cluster"] == p and w["nproc"] == 2 and len(w["nodes"]) == 2, w
assert [n["ranks"] for n in w["nodes"]] == [[0], [1]], w
assert w["tx_bytes"] == sum(n["tx_bytes"] for n in w["nodes"]), w
assert s["wire"]["tx_bytes"] == w["tx_bytes"] and s["wire"]["cluster"] == p, s.get("wire")  # merged into the summary
assert abs(s["wire"]["wire_over_payload"] - w["tx_bytes"] / s["bytes_sent"]) < 1e-9, s["wire"]
rank0 = sum(ph["sent"] for ph in s["bytes_by_phase"].values())  # rank 0 writes the summary: its meter
payload = [rank0, s["bytes_sent"] - rank0]
assert min(payload) > 0, s
def check(what, pay, tx):
    print(f"  {what}: payload {pay} B, wire tx {tx} B, wire/payload {tx / pay:.4f}, wire - payload {tx - pay} B")
    assert pay <= tx <= 1.1 * pay + setup, f"{what}: not payload <= wire <= 1.1 x payload + {setup} B"
for n in w["nodes"]:
    check(f"node {n['node']} (rank {n['node']})", payload[n["node"]], n["tx_bytes"])
check("mean per node (bytes_sent_per_rank)", s["bytes_sent_per_rank"], w["tx_bytes"] / 2)
# One rank per node: every byte crosses the link.
assert s["bytes_sent_by_link"] == {"inter-node": s["bytes_sent"], "intra-node": 0}, s["bytes_sent_by_link"]
PY
ok "train --cluster: per node payload <= wire tx <= 1.1 x payload + $SETUP_BYTES B (numbers above)"

# c2. AB-training on 2 nodes x 2 processes: the groups are the nodes, so the AB phases' traffic
# never crosses a link (shared memory inside the node), and the inter-node payload matches the wire.
"$LOWCOMM" train --cluster "$P" --nproc 4 --procs-per-node 2 --set data.dataset=synthetic --set model.name=mlp \
  --set data.batch_size=16 --set data.train_limit=1024 --set data.test_limit=256 --set schedule.epochs=100 \
  --set schedule.max_steps=24 --set strategy.name=ab --set ab.group_size=node --set ab.sync_mode=only-b \
  --set ab.warmup_steps=4 --set ab.steps_btw_syncing=10 --set ab.ddp_steps_after_sync=2 --set ab.low_rank_cutoff=0.3 \
  --set logging.out_dir="$tmp/run_ab" --set checkpoint.dir="$tmp/ckpt_ab" \
  --summary "$tmp/ab.json" --wire-json "$tmp/wire_ab.json" >"$tmp/ab.out" 2>&1 \
  || { cat "$tmp/ab.out"; fail "AB-training through --cluster failed"; }
$PY - "$tmp/ab.json" "$tmp/wire_ab.json" "$SETUP_BYTES" <<'PY' || { cat "$tmp/ab.out"; fail "AB link classes"; }
import json, sys
s = json.load(open(sys.argv[1])); w = json.load(open(sys.argv[2])); setup = int(sys.argv[3])
assert [n["ranks"] for n in w["nodes"]] == [[0, 1], [2, 3]], w
ab = s["ab"]
assert ab["group_size"] == "node" and ab["groups"] == 2 and ab["members"] == [0, 1], ab
links = s["bytes_by_phase_link"]  # rank 0's meter
assert links["ab"]["inter-node"] == 0 and links["ab"]["intra-node"] > 0, links
assert links["warmup"]["inter-node"] > 0 and links["sync"]["inter-node"] > 0, links
inter = s["bytes_sent_by_link"]["inter-node"]
print(f"  AB 2x2: inter-node payload {inter} B, wire tx {w['tx_bytes']} B")
assert inter <= w["tx_bytes"] <= 1.1 * inter + 2 * setup, (inter, w["tx_bytes"])
PY
ok "AB-training on 2 x 2: no inter-node bytes in AB phases; inter-node payload <= wire <= 1.1 x payload"

# c3. Hierarchical local SGD on 2 x 2: gradients are averaged inside each node at every step
# (shared memory: no inter-node byte), parameters across the nodes every 4 steps.
"$LOWCOMM" train --cluster "$P" --nproc 4 --procs-per-node 2 --set data.dataset=synthetic --set model.name=mlp \
  --set data.batch_size=16 --set data.train_limit=1024 --set data.test_limit=256 --set schedule.epochs=100 \
  --set schedule.max_steps=14 --set strategy.name=local_sgd --set local_sgd.period=4 \
  --set local_sgd.hierarchical=true --set logging.out_dir="$tmp/run_hier" --set checkpoint.dir="$tmp/ckpt_hier" \
  --summary "$tmp/hier.json" >"$tmp/hier.out" 2>&1 || { cat "$tmp/hier.out"; fail "hierarchical local SGD through --cluster failed"; }
$PY - "$tmp/hier.json" <<'PY' || { cat "$tmp/hier.out"; fail "hierarchical local SGD link classes"; }
import json, sys
s = json.load(open(sys.argv[1]))
assert s["local_sgd"]["hierarchical"] is True and s["local_sgd"]["averages"] == 4, s["local_sgd"]
links = s["bytes_by_phase_link"]  # rank 0's meter
assert links["grad"]["inter-node"] == 0 and links["grad"]["intra-node"] > 0, links
assert links["average"]["inter-node"] > 0, links
print(f"  hierarchical 2x2: grad intra-node {links['grad']['intra-node']} B, average inter-node {links['average']['inter-node']} B")
PY
ok "hierarchical local SGD on 2 x 2: gradients stay in the node, averages cross it"

# d. allreduce through the cluster gives correct results.
"$LOWCOMM" bench collectives --cluster "$P" --nproc 2 --sizes 4KiB,1MiB --algos ring,hd --no-baseline \
  --seconds 0.2 --json "$tmp/bench.json" >"$tmp/bench.out" 2>&1 || { rc=$?; cat "$tmp/bench.out"; fail "bench collectives: exit $rc"; }
$PY - "$tmp/bench.json" <<'PY' || { cat "$tmp/bench.out"; fail "bench rows"; }
import json, sys
rows = json.load(open(sys.argv[1]))
cases = {(r["algo"], r["bytes"]) for r in rows if r["op"] == "allreduce" and r["world"] == 2}
want = {(a, b) for a in ("ring", "hd") for b in (4096, 1 << 20)}
assert want <= cases, f"missing rows: {want - cases}"
bad = [r for r in rows if r["wrong"] != 0]
assert not bad, f"wrong elements: {bad}"
PY
ok "bench collectives --cluster: allreduce ring/hd at 4KiB and 1MiB, every row wrong == 0"

# d2. hier on 2 x 2: each node's part in shared memory unless --shm off, and the rows say which
# (node_piece: what `simulate calibrate` replays).
for shm in auto off; do
  "$LOWCOMM" bench collectives --cluster "$P" --nproc 4 --procs-per-node 2 --sizes 1MiB --algos hier --no-baseline \
    --seconds 0.2 --shm $shm --json "$tmp/hier_$shm.json" >"$tmp/hier.out" 2>&1 || { rc=$?; cat "$tmp/hier.out"; fail "bench collectives hier --shm $shm: exit $rc"; }
done
$PY - "$tmp/hier_auto.json" "$tmp/hier_off.json" <<'PY' || fail "hier rows"
import json, sys
auto, off = (json.load(open(f)) for f in sys.argv[1:3])
row = lambda rows: [r for r in rows if r["op"] == "allreduce" and r["algo"] == "hier"][0]
assert row(auto)["node_piece"] == 262144 and row(auto)["wrong"] == 0, row(auto)
assert row(off)["node_piece"] == 0 and row(off)["wrong"] == 0, row(off)
PY
ok "bench collectives --cluster 2 x 2: hier rows say whether the node ran in shared memory (node_piece)"

# s. two sites joined by the emulated WAN (vde2 + wirefilter), then back to one site.
"$CLUSTER" down --prefix "$P" >/dev/null
for bad in "--wan-rate 100mbit" "--sites 2 --wan-delay 10ms" "--sites 2 --nodes 3 --wan-rate 1mbit --wan-delay 1ms" \
           "--sites 2 --wan-rate 1mbit --wan-delay 1ms --wan-loss 100" "--sites 2 --wan-rate 1mbit --wan-delay 1ms --wan-jitter 2ms"; do
  rc=0; "$CLUSTER" up --nodes 4 --prefix "$P" $bad >"$tmp/bad" 2>&1 || rc=$?
  [[ $rc == 2 ]] && grep -q "tools/cluster: " "$tmp/bad" || { cat "$tmp/bad"; fail "up $bad: exit $rc, expected 2 with a message"; }
  [[ -z $(ours) ]] || fail "up $bad left namespaces: $(ours)"
done
ok "bad WAN options are refused before anything is made (exit 2)"
"$CLUSTER" up --nodes 4 --sites 2 --wan-rate 100mbit --wan-delay 10ms --prefix "$P" >"$tmp/upw" 2>&1 || { cat "$tmp/upw"; fail "up --sites 2"; }
"$CLUSTER" status --json --prefix "$P" >"$tmp/sites.json" || fail "status --json with sites"
$PY - "$tmp/sites.json" "$P" <<'PY' || fail "status --json with sites"
import json, sys
s = json.load(open(sys.argv[1])); p = sys.argv[2]
assert s["sites"] == 2 and s["cc"] == "cubic", s
assert [n["site"] for n in s["node"]] == [0, 0, 1, 1], s["node"]
assert [n["address"] for n in s["node"]] == ["198.18.0.1", "198.18.0.2", "198.18.1.1", "198.18.1.2"], s["node"]
w = s["wan"]
assert w["rate_bps"] == 10**8 and w["rtt_ms"] == 20 and w["loss_percent"] == 0, w
assert [x["netns"] for x in w["site"]] == [f"{p}-b0", f"{p}-b1"] and w["site"][1]["nodes"] == [2, 3], w["site"]
assert {d["daemon"] for d in w["daemons"]} == {"sw0", "sw1", "plug0", "plug1", "wf0"}, w["daemons"]
PY
for n in 1 2; do
  ip netns exec "$P-n$n" sysctl -n net.ipv4.tcp_congestion_control | grep -qx cubic || fail "node $n does not use cubic"
done
ip netns exec "$P-n2" $PY "$NETPROBE" serve 198.18.1.1 5300 >"$tmp/np.srv" 2>&1 &
ip netns exec "$P-n1" $PY "$NETPROBE" serve 198.18.0.2 5300 >"$tmp/np2.srv" 2>&1 &
for _ in $(seq 100); do grep -q ready "$tmp/np.srv" && grep -q ready "$tmp/np2.srv" && break; sleep 0.05; done
wan_rtt=$(ip netns exec "$P-n0" $PY "$NETPROBE" rtt 198.18.1.1 5300 --count 10) || fail "rtt across the WAN"
lan_rtt=$(ip netns exec "$P-n0" $PY "$NETPROBE" rtt 198.18.0.2 5300 --count 10) || fail "rtt inside a site"
ip netns exec "$P-n2" $PY "$NETPROBE" quit 198.18.1.1 5300; ip netns exec "$P-n1" $PY "$NETPROBE" quit 198.18.0.2 5300
wait
$PY - "$wan_rtt" "$lan_rtt" <<'PY' || fail "round trips"
import json, sys
wan, lan = (json.loads(a)["rtt_ms"] for a in sys.argv[1:3])
print(f"  round trip: {wan:.2f} ms across the WAN (10 ms each way), {lan:.3f} ms inside a site")
assert 19 <= wan <= 30 and lan < 2, (wan, lan)
PY
ok "sites: topology in status --json, cubic on the nodes, the WAN's round trip is its delay"
"$LOWCOMM" launch --cluster "$P" --nproc 4 --wire-json "$tmp/wire_s.json" -- \
  sh -c 'echo "site $RANK $LOWCOMM_SITE $LOWCOMM_SITES $LOWCOMM_SITE_RANK $LOWCOMM_SITE_SIZE"' >"$tmp/launch_s" 2>&1 \
  || { cat "$tmp/launch_s"; fail "launch on sites"; }
for want in "site 0 0 2 0 2" "site 1 0 2 1 2" "site 2 1 2 0 2" "site 3 1 2 1 2"; do
  grep -q "$want" "$tmp/launch_s" || { cat "$tmp/launch_s"; fail "no '$want' (RANK SITE SITES SITE_RANK SITE_SIZE)"; }
done
"$LOWCOMM" bench collectives --cluster "$P" --nproc 4 --sizes 1MiB --algos ring --no-baseline --seconds 0.2 \
  --json "$tmp/bench_s.json" --wire-json "$tmp/wire_b.json" >"$tmp/bench_s.out" 2>&1 || { cat "$tmp/bench_s.out"; fail "bench across sites"; }
$PY - "$tmp/bench_s.json" "$tmp/wire_b.json" <<'PY' || { cat "$tmp/bench_s.out"; fail "bench across sites"; }
import json, sys
rows, w = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert rows and all(r["wrong"] == 0 for r in rows), rows
sent = [s["wan_tx_bytes"] for s in w["sites"]]
# Two of the four edges of a ring over ranks 0..3 (sites 0, 0, 1, 1) cross the WAN (1 -> 2 and
# 3 -> 0): about half of what the nodes send goes over it.
assert w["inter_site_tx_bytes"] == sum(sent) and min(sent) > 0, w
assert 0.4 * w["tx_bytes"] <= sum(sent) <= 0.6 * w["tx_bytes"], w
assert 0 < w["wan_cpu_s"] < w["wall_s"] * 2, w  # the emulator's own CPU time (2 cores)
print(f"  ring across 2 sites: {sum(sent)} B over the WAN of {w['tx_bytes']} B sent by the nodes; "
      f"the WAN emulator used {w['wan_cpu_s']:.2f} CPU s in {w['wall_s']:.1f} s")
PY
ok "launch on sites: LOWCOMM_SITE*, the wire report splits the WAN's bytes, allreduce rows are right"
"$CLUSTER" down --prefix "$P" >"$tmp/downw" 2>&1 || fail "down with sites"
grep -q "7 namespaces removed" "$tmp/downw" || { cat "$tmp/downw"; fail "down did not remove 7 namespaces"; }
! pgrep -f "$LOWCOMM_CLUSTER_DIR/$P.d" >/dev/null || fail "WAN daemons left after down: $(pgrep -af "$LOWCOMM_CLUSTER_DIR/$P.d")"
[[ ! -e $LOWCOMM_CLUSTER_DIR/$P.d ]] || fail "WAN state left after down"
ok "down with sites: 7 namespaces and every WAN daemon gone"
"$CLUSTER" up --nodes 2 --rate 1gbit --prefix "$P" >/dev/null 2>&1 || fail "up again after sites"

# e. down leaves nothing behind.
"$CLUSTER" down --prefix "$P" >"$tmp/down" 2>&1 || { cat "$tmp/down"; fail "down"; }
grep -q "3 namespaces removed" "$tmp/down" || { cat "$tmp/down"; fail "down did not remove 3 namespaces"; }
[[ -z $(ours) ]] || fail "namespaces left after down: $(ours)"
[[ ! -e $LOWCOMM_CLUSTER_DIR/$P.env ]] || fail "state file left after down"
[[ $(ip -o link show) == "$host_links_before" ]] || { diff <(echo "$host_links_before") <(ip -o link show); fail "host links changed"; }
rc=0; "$CLUSTER" status --prefix "$P" >/dev/null 2>&1 || rc=$?
[[ $rc == 3 ]] || fail "status after down: exit $rc, expected 3"
ok "down: no $P-* namespace, no state file, host links unchanged, status says down"

# f. a failure half-way through up removes the partial cluster: a `tc` that works for node 0
# and fails for node 1 (after $P-br, $P-n0, $P-n1 and their veths exist).
mkdir "$tmp/fakebin"
cat >"$tmp/fakebin/tc" <<EOF
#!/bin/sh
n=\$(cat "$tmp/tc.calls" 2>/dev/null || echo 0); echo \$((n + 1)) >"$tmp/tc.calls"
[ "\$n" -lt 2 ] || { echo "fake tc: failing call \$((n + 1))" >&2; exit 1; }
exec $(command -v tc) "\$@"
EOF
chmod +x "$tmp/fakebin/tc"
rc=0; PATH=$tmp/fakebin:$PATH "$CLUSTER" up --nodes 3 --prefix "$P" >"$tmp/upfail" 2>&1 || rc=$?
[[ $rc != 0 ]] || { cat "$tmp/upfail"; fail "up succeeded with a failing tc"; }
[[ $(cat "$tmp/tc.calls") == 3 ]] || { cat "$tmp/upfail"; fail "fake tc called $(cat "$tmp/tc.calls") times, expected 3"; }
[[ -z $(ours) ]] || fail "namespaces left after a failed up: $(ours)"
[[ ! -e $LOWCOMM_CLUSTER_DIR/$P.env && ! -e $LOWCOMM_CLUSTER_DIR/$P.env.tmp ]] || fail "state file left after a failed up"
[[ $(ip -o link show) == "$host_links_before" ]] || fail "host links changed after a failed up"
grep -q "up failed; removing the partial cluster" "$tmp/upfail" || { cat "$tmp/upfail"; fail "no cleanup message"; }
ok "failed up (tc fails at node 1, exit $rc): partial cluster removed"

# g. not root: a clear message and a non-zero exit, nothing made.
rc=0; setpriv --reuid=65534 --regid=65534 --clear-groups env LOWCOMM_CLUSTER_DIR="$LOWCOMM_CLUSTER_DIR" \
  bash -s up --nodes 2 --prefix "$P" <"$CLUSTER" >"$tmp/nonroot" 2>&1 || rc=$?
[[ $rc != 0 ]] || { cat "$tmp/nonroot"; fail "up as nobody succeeded"; }
grep -q "must run as root" "$tmp/nonroot" || { cat "$tmp/nonroot"; fail "not-root message does not mention root"; }
[[ -z $(ours) ]] || fail "namespaces made by a non-root up: $(ours)"
ok "not root: exit $rc, '$(head -1 "$tmp/nonroot")'"

echo "cluster: $passed passed, 0 failed"
