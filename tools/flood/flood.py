#!/usr/bin/env python3
"""Floods a lowcomm job with unauthenticated connections, as a stranger on the host would.

  flood.py --port P [--idle N] [--half-open N] [--scan-under PID] [--seconds S]

Holds N idle connections and N half-open ones (the rendezvous magic and a few bytes, then
silence) to 127.0.0.1:P, replacing any the server closes, opens and closes new ones in a loop, and
sends garbage to each. With --scan-under it also connects to every TCP port that a descendant of
PID (the launcher) listens on besides P (Gloo's pair ports while a mesh connects; found with
`ss -tlnp`) and sends garbage there.
Prints one JSON line of counts when done (SIGTERM or --seconds)."""
import argparse, json, os, random, re, signal, socket, subprocess, sys, time

def connect(port, timeout=0.5):
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        return s
    except OSError:
        s.close()
        return None

def descends_from(pid, root):
    for _ in range(64):
        if pid == root:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid <= 1:
            return False
    return False

def listening_ports(root):
    try:
        out = subprocess.run(["ss", "-tlnpH"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    ports = set()
    for line in out.splitlines():
        port = re.search(r":(\d+)\s", line)
        owners = [int(p) for p in re.findall(r"pid=(\d+)", line)]
        if port and any(descends_from(p, root) for p in owners):
            ports.add(int(port.group(1)))
    return ports

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--half-open", type=int, default=500)
    ap.add_argument("--scan-under", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=1e9)
    a = ap.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    counts = {"opened": 0, "garbage": 0, "pair_connections": 0, "refused": 0}
    held = []
    end = time.time() + a.seconds
    rng = random.Random(1)
    last_scan = 0.0
    while not stop and time.time() < end:
        held = [s for s in held if s.fileno() >= 0]
        while len(held) < a.idle + a.half_open and not stop:
            s = connect(a.port)
            if s is None:
                counts["refused"] += 1
                break
            counts["opened"] += 1
            if len(held) % 3 == 0:  # a third of them: half a handshake, then silence
                try:
                    s.send(b"LCRDZV01" + bytes(rng.randrange(256) for _ in range(20)))
                except OSError:
                    pass
            held.append(s)
        for _ in range(20):  # churn: strangers come, send garbage, go
            s = connect(a.port)
            if s is None:
                continue
            counts["opened"] += 1
            try:
                s.send(os.urandom(rng.choice([1, 72, 4096])))
                counts["garbage"] += 1
            except OSError:
                pass
            s.close()
        if a.scan_under and time.time() - last_scan > 0.05:
            last_scan = time.time()
            for port in listening_ports(a.scan_under) - {a.port}:
                s = connect(port, 0.2)
                if s is not None:
                    counts["pair_connections"] += 1
                    try:
                        s.send(os.urandom(256))
                    except OSError:
                        pass
                    s.close()
        # Drop what the server closed (it reads as EOF) so it is replaced.
        alive = []
        for s in held:
            try:
                if s.recv(4096) == b"":
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            alive.append(s)
        held = alive
        time.sleep(0.01)
    for s in held:
        s.close()
    print(json.dumps(counts), flush=True)

if __name__ == "__main__":
    sys.exit(main())
