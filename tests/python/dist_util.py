"""Runs a worker script as `world` real processes with torchrun's environment and collects the
JSON each rank prints on its last stdout line. Like `lowcomm launch`, it hands the ranks a fresh
job token (LOWCOMM_JOB_TOKEN) and a port for the backend's authenticated rendezvous."""
import json
import os
import secrets
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script, world, args=(), env=None, timeout=240, expect_fail=()):
    """Starts `world` ranks of tests/python/<script>; returns [(returncode, json-or-None, stderr)]
    per rank. Fails the test when a rank not listed in `expect_fail` exits non-zero. A value None
    in `env` removes that variable."""
    port, rdzv_port, token = free_port(), free_port(), secrets.token_hex(16)
    procs = []
    for rank in range(world):
        e = dict(os.environ)
        e.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                  "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                  "OMP_NUM_THREADS": "1", "LOWCOMM_RDZV_PORT": str(rdzv_port), "LOWCOMM_JOB_TOKEN": token})
        e.update(env or {})
        e = {k: v for k, v in e.items() if v is not None}
        procs.append(subprocess.Popen([PYTHON, os.path.join(HERE, script), *map(str, args)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for rank, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"{script}: rank {rank} still running after {timeout} s")
        lines = [l for l in out.splitlines() if l.startswith("{")]
        results.append((p.returncode, json.loads(lines[-1]) if lines else None, err))
    for rank, (rc, _, err) in enumerate(results):
        if rank not in expect_fail and rc != 0:
            raise AssertionError(f"{script}: rank {rank} exited with {rc}:\n{err[-4000:]}")
    return results
