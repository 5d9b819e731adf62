"""The lowcomm torch.distributed backend gives the guarantees of `lowcomm train` (hole 3 of
"Trust, take 2"): the job token is required unless LOWCOMM_INSECURE=1 (which warns), the
backend meets its peers through lowcomm's authenticated store (a process with another token is
refused and the job goes on), and workers exit when their launcher dies. Real processes."""
import os
import signal
import subprocess
import time

import pytest

from dist_util import HERE, PYTHON, free_port, launch

WORKER = os.path.join(HERE, "trust_worker.py")


def rank_env(rank, world, port, token, **extra):
    e = {k: v for k, v in os.environ.items() if k not in ("LOWCOMM_JOB_TOKEN", "LOWCOMM_INSECURE",
                                                         "LOWCOMM_LAUNCHER_PID", "TORCHELASTIC_RUN_ID")}
    e.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world),
              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1", **extra})
    if token:
        e["LOWCOMM_JOB_TOKEN"] = token
    return e


def test_ranks_without_the_job_token_are_refused():
    results = launch("trust_worker.py", 2, env={"LOWCOMM_JOB_TOKEN": None, "TEST_TIMEOUT_S": "10"},
                     expect_fail={0, 1}, timeout=60)
    for rc, out, err in results:
        assert rc != 0 and out is None, err
        assert "LOWCOMM_JOB_TOKEN is not set" in err and "LOWCOMM_INSECURE=1" in err, err[-2000:]


def test_insecure_mode_runs_with_a_visible_warning():
    results = launch("trust_worker.py", 2, env={"LOWCOMM_JOB_TOKEN": None, "LOWCOMM_INSECURE": "1"}, timeout=60)
    for rc, out, err in results:
        assert out == {"sum": 2.0}
        assert "WARNING" in err and "LOWCOMM_INSECURE=1" in err and "not authenticated" in err, err[-2000:]


def test_a_process_with_another_token_is_refused_and_the_job_goes_on():
    port = free_port()
    token = "trust-test-token-0123456789"
    rank0 = subprocess.Popen([PYTHON, WORKER], env=rank_env(0, 2, port, token), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        intruder = subprocess.run([PYTHON, WORKER], env=rank_env(1, 2, port, "another-jobs-token-9876543210"),
                                  capture_output=True, text=True, timeout=30)
        assert intruder.returncode != 0, intruder.stdout + intruder.stderr
        assert "refused this process: its LOWCOMM_JOB_TOKEN is not the job's" in intruder.stderr, intruder.stderr[-2000:]
        rank1 = subprocess.run([PYTHON, WORKER], env=rank_env(1, 2, port, token), capture_output=True, text=True,
                               timeout=30)
        out0, err0 = rank0.communicate(timeout=30)
    finally:
        rank0.kill()
    assert rank1.returncode == 0 and '{"sum": 2.0}' in rank1.stdout, rank1.stderr[-2000:]
    assert rank0.returncode == 0 and '{"sum": 2.0}' in out0, err0[-2000:]


def exited(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("launcher", ["LOWCOMM_LAUNCHER_PID=$$", "TORCHELASTIC_RUN_ID=torchrun-like"])
def test_workers_exit_when_their_launcher_dies(launcher):
    port = free_port()
    env = rank_env(0, 2, port, "trust-test-token-0123456789")
    script = (f"export {launcher}; RANK=0 LOCAL_RANK=0 {PYTHON} {WORKER} wait & "
              f"RANK=1 LOCAL_RANK=1 {PYTHON} {WORKER} wait & wait")
    sh = subprocess.Popen(["sh", "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    pids = []
    try:
        while len(pids) < 2:
            line = sh.stdout.readline()
            assert line, "a worker ended before it was ready"
            if line.startswith("ready "):
                pids.append(int(line.split()[1]))
        os.kill(sh.pid, signal.SIGKILL)
        sh.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(exited(p) for p in pids):
            time.sleep(0.1)
        assert all(exited(p) for p in pids), f"workers {pids} still running 5 s after their launcher died"
    finally:
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
