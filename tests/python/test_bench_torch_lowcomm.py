"""`lowcomm bench collectives --torch-lowcomm`: rows for our torch.distributed backend driven through
c10d's API beside PyTorch's Gloo backend, every result checked (wrong = 0)."""
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOWCOMM = os.path.join(os.environ.get("LOWCOMM_BUILD", os.path.join(ROOT, "build")), "lowcomm")


def test_bench_collectives_has_checked_torch_lowcomm_rows_for_every_op():
    ops = ["allreduce", "allgather", "broadcast", "reduce_scatter", "alltoall"]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rows.json")
        out = subprocess.run([LOWCOMM, "bench", "collectives", "--nproc", "3", "--sizes", "4B,64KiB,1MiB", "--ops",
                              ",".join(ops), "--algos", "auto", "--seconds", "0.1", "--min-iters", "2", "--iters", "5",
                              "--torch-lowcomm", "--json", path], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        rows = json.load(open(path))
    ours = [r for r in rows if r["backend"] == "torch-lowcomm"]
    assert {r["op"] for r in ours} == set(ops)
    assert len(ours) == 3 * len(ops)
    assert all(r["wrong"] == 0 and r["time_us"] > 0 and r["world"] == 3 for r in rows)
    assert {r["op"] for r in rows if r["backend"] == "c10d-gloo"} == set(ops) - {"reduce_scatter"}
