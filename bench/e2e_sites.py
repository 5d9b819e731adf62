"""bench/e2e's settings of sites joined by an emulated WAN (tools/cluster --sites).

A setting `SsNxP@LAN/WAN,RTT[,LOSS%]` is S sites of N nodes of P processes each, LAN rate inside a
site, WAN rate between sites with RTT round trip and LOSS percent of packets lost each way, e.g.
`2s2x1@1gbit/100mbit,50ms,0.1%` (2 sites x 2 nodes x 1 process: world 4). tools/cluster gets
--wan-delay RTT/2 (its delay is one way).
"""
import re

RATE = r"\d+(?:\.\d+)?(?:bit|kbit|mbit|gbit)"
NUM = r"\d+(?:\.\d+)?"
SITE_SETTING = re.compile(rf"(\d+)s(\d+)x(\d+)@({RATE})/({RATE}),({NUM})ms(?:,({NUM})%)?")


def parse(s, strategies):
    """The setting dict for a site setting, or None when `s` is not one."""
    m = SITE_SETTING.fullmatch(s)
    if not m:
        return None
    sites, nodes, ppn = int(m[1]), int(m[2]), int(m[3])
    if sites < 2:
        return None
    # The run directories are named after the setting: no '/' in that name.
    return {"name": s, "dir": s.replace("/", "-"), "sites": sites, "nodes": sites * nodes, "ppn": ppn, "rate": m[4], "nproc": sites * nodes * ppn,
            "wan": {"rate": m[5], "rtt_ms": float(m[6]), "loss_percent": float(m[7] or 0)}, "strategies": strategies}


def cluster_args(setting):
    """tools/cluster up's WAN options for a site setting (nothing for others)."""
    if "wan" not in setting:
        return []
    w = setting["wan"]
    return ["--sites", str(setting["sites"]), "--wan-rate", w["rate"], "--wan-delay", f"{w['rtt_ms'] / 2:g}ms",
            "--wan-loss", f"{w['loss_percent']:g}"]


def add_columns(row, summary, wire):
    """Inter-site bytes of one run: on the wire (the sites' WAN uplinks) and in our meter's payload."""
    if wire is not None and "inter_site_tx_bytes" in wire:
        row["inter_site_wire_bytes"] = wire["inter_site_tx_bytes"]
    by_link = summary.get("bytes_sent_by_link", {})
    if "inter-site" in by_link:  # rank 0's meter
        row["inter_site_payload_bytes_rank0"] = by_link["inter-site"]


def markdown(rs, base, target):
    """A WAN table for one site setting: time to target and the bytes that crossed between sites."""
    if not any("inter_site_wire_bytes" in r for r in rs):
        return []
    lines = [f"| strategy | time to {100 * target:.0f} % (s) | vs DDP | final acc. | inter-site wire MB | fewer than DDP |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rs:
        ttt, wan = r["time_to_target_s"], r.get("inter_site_wire_bytes")
        bw = base.get("inter_site_wire_bytes") if base else None
        speed = f"{base['time_to_target_s'] / ttt:.2f}×" if base and base["time_to_target_s"] and ttt else "–"
        fewer = f"{bw / wan:.1f}×" if bw and wan else "–"
        lines.append(f"| {r['strategy']} | {'not reached' if ttt is None else f'{ttt:.0f}'} | {speed} | "
                     f"{100 * r['final_accuracy']:.2f} % | {'–' if wan is None else f'{wan / 1e6:,.1f}'} | {fewer} |")
    return ["Across the WAN:", ""] + lines + [""]
