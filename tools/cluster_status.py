#!/usr/bin/env python3
"""`tools/cluster status`: the cluster's topology, counters and WAN daemons, as text or JSON.

    cluster_status.py STATE_FILE COUNTERS_JSON WAN_CPU_JSON JSON(0|1)

JSON: {cluster, up, nodes, procs_per_node, rate, rate_bps, cc, iface, sites, node: [{netns, address,
site, tx_bytes, rx_bytes, ...}], and with several sites wan: {rate, rate_bps, delay_ms, rtt_ms,
loss_percent, jitter_ms, topology, site: [{site, netns, nodes, tx_bytes, rx_bytes, intra_tx_bytes}],
daemons: [{daemon, pid, cpu_s}], cpu_s}}. A site's tx_bytes are what it sent over the WAN; its
intra_tx_bytes are its nodes' tx minus that (what stayed in the site).
"""
import json
import sys


def topology(state, counters):
    nodes = int(state["nodes"])
    sites = int(state.get("sites", "1"))
    out = {"cluster": state["prefix"], "up": True, "nodes": nodes, "procs_per_node": int(state["procs_per_node"]),
           "rate": state["rate"], "rate_bps": int(state["rate_bps"]), "cc": state.get("cc", "system"),
           "iface": state["iface"], "sites": sites, "node": []}
    for i, c in enumerate(counters["nodes"]):
        words = state[f"node{i}"].split()
        site = int(words[2]) if len(words) > 2 else 0
        out["node"].append(dict(c, address=words[1], site=site))
    if sites > 1:
        delay = float(state["wan_delay_ms"])
        wan = {"rate": state["wan_rate"], "rate_bps": int(state["wan_rate_bps"]), "delay_ms": delay,
               "rtt_ms": 2 * delay, "loss_percent": float(state["wan_loss"]),
               "jitter_ms": float(state["wan_jitter_ms"]),
               "topology": "one wirefilter between the two sites" if sites == 2
               else "one wirefilter per site uplink to a core switch", "site": []}
        for w in counters["wan"]:
            members = [n for n in out["node"] if n["site"] == w["site"]]
            sent = sum(n["tx_bytes"] for n in members)
            wan["site"].append(dict(w, nodes=[out["node"].index(n) for n in members],
                                    intra_tx_bytes=max(0, sent - w["tx_bytes"])))
        out["wan"] = wan
    return out


def main():
    state = dict(l.split("=", 1) for l in open(sys.argv[1]).read().splitlines() if "=" in l)
    out = topology(state, json.loads(sys.argv[2]))
    daemons = json.loads(sys.argv[3])
    if "wan" in out:
        out["wan"]["daemons"] = daemons
        out["wan"]["cpu_s"] = round(sum(d["cpu_s"] for d in daemons), 2)
    if sys.argv[4] == "1":
        print(json.dumps(out, indent=1))
        return
    print(f"cluster {out['cluster']}: up, {out['nodes']} nodes x {out['procs_per_node']} procs, {out['rate']} per link "
          f"(tbf both ways), {out['cc']}")
    if "wan" in out:
        w = out["wan"]
        print(f"  {out['sites']} sites, WAN {w['rate']}, RTT {w['rtt_ms']:g} ms, loss {w['loss_percent']:g} %, "
              f"jitter {w['jitter_ms']:g} ms ({w['topology']}); WAN daemons used {w['cpu_s']:.2f} CPU s")
    for i, n in enumerate(out["node"]):
        print(f"  node {i:<3d} site {n['site']:<2d} {n['netns']:<10s} {n['address']:<14s} {out['iface']} "
              f"tx {n['tx_bytes']} B  rx {n['rx_bytes']} B")
    for s in out.get("wan", {}).get("site", []):
        print(f"  site {s['site']} WAN uplink tx {s['tx_bytes']} B  rx {s['rx_bytes']} B  (intra-site tx {s['intra_tx_bytes']} B)")


if __name__ == "__main__":
    main()
