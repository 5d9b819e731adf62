#!/usr/bin/env python3
"""Round trip and one-stream throughput between two nodes of an emulated cluster (tools/cluster).

    netprobe.py serve ADDR PORT [--once]            # in the server's namespace; answers both probes
    netprobe.py rtt ADDR PORT [--count N]           # JSON: TCP ping-pong round trips (ms)
    netprobe.py stream ADDR PORT [--seconds S] [--cc NAME] [--streams K]
                                                    # JSON: goodput of K TCP streams, timed at the receiver

What collectives see is TCP between processes, so both probes are TCP: `rtt` sends one byte and waits
for it to come back (TCP_NODELAY), after a first exchange that pays for ARP and the handshake;
`stream` sends for S seconds and the server reports the bytes it received between its first and
its last byte. `--cc` sets the sender's congestion control per socket (TCP_CONGESTION).
"""
import argparse
import json
import socket
import statistics
import sys
import threading
import time


def serve(addr, port, once):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, port))
    srv.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        mode = conn.recv(1)
        if mode == b"p":
            threading.Thread(target=echo, args=(conn,), daemon=True).start()
        elif mode == b"s":
            threading.Thread(target=sink, args=(conn,), daemon=True).start()
        elif mode == b"q":
            conn.close()
            return
        if once and mode == b"q":
            return


def echo(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        b = conn.recv(1)
        if not b:
            return
        conn.sendall(b)


def sink(conn):
    got, first, last = 0, None, None
    while True:
        b = conn.recv(1 << 20)
        if not b:
            break
        now = time.monotonic()
        if first is None:
            first = now
        got, last = got + len(b), now
    try:
        conn.sendall(json.dumps({"bytes": got, "seconds": (last - first) if got else 0.0}).encode())
    finally:
        conn.close()


def rtt(addr, port, count):
    s = socket.create_connection((addr, port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"p")
    samples = []
    for i in range(count + 1):
        t0 = time.monotonic()
        s.sendall(b"x")
        if s.recv(1) != b"x":
            sys.exit("netprobe: echo server closed the connection")
        if i:  # the first exchange is a warm-up
            samples.append((time.monotonic() - t0) * 1000)
    s.close()
    return {"rtt_ms": statistics.median(samples), "min_ms": min(samples), "max_ms": max(samples), "count": count}


def one_stream(addr, port, seconds, cc, out):
    s = socket.create_connection((addr, port), timeout=60)
    if cc:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    s.sendall(b"s")
    buf = b"\x5a" * (1 << 20)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.sendall(buf)
    s.shutdown(socket.SHUT_WR)
    reply = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        reply += b
    out.append(json.loads(reply))


def stream(addr, port, seconds, cc, streams):
    results = []
    threads = [threading.Thread(target=one_stream, args=(addr, port, seconds, cc, results)) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(results) != streams:
        sys.exit("netprobe: a stream failed")
    total = sum(r["bytes"] for r in results)
    span = max(r["seconds"] for r in results)
    return {"bytes": total, "seconds": span, "mbit_s": total * 8 / span / 1e6 if span else 0.0, "streams": streams,
            "cc": cc or "system"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["serve", "rtt", "stream", "quit"])
    ap.add_argument("addr")
    ap.add_argument("port", type=int)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--cc", default="")
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--once", action="store_true")
    a = ap.parse_args()
    if a.mode == "serve":
        serve(a.addr, a.port, a.once)
    elif a.mode == "quit":
        socket.create_connection((a.addr, a.port), timeout=10).sendall(b"q")
    elif a.mode == "rtt":
        print(json.dumps(rtt(a.addr, a.port, a.count)))
    else:
        print(json.dumps(stream(a.addr, a.port, a.seconds, a.cc, a.streams)))


if __name__ == "__main__":
    main()
