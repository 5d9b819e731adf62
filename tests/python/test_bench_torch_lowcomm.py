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


def test_bench_collectives_rounds_give_one_checked_row_per_case_and_bad_counts_are_refused():
    """--rounds: each size's algorithms timed in turn over the rounds, still one row per case."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rows.json")
        out = subprocess.run([LOWCOMM, "bench", "collectives", "--nproc", "2", "--sizes", "4KiB,64KiB", "--algos",
                              "auto,ring,hd", "--seconds", "0.02", "--min-iters", "2", "--rounds", "7", "--no-baseline",
                              "--json", path], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        rows = json.load(open(path))
    assert sorted((r["bytes"], r["algo"].split(":")[0]) for r in rows) == sorted(
        (b, a) for b in (4096, 65536) for a in ("auto", "ring", "hd"))
    assert all(r["wrong"] == 0 and r["time_us"] > 0 for r in rows)
    # each round's time is kept, and the row's time is their median
    assert all(len(r["round_time_us"]) == 7 and r["time_us"] == sorted(r["round_time_us"])[3] for r in rows)
    assert "7 rounds" in out.stdout, out.stdout
    # each round runs a size's cases in a shuffled order: a permutation per round, and a case does
    # not always follow the same one (a rotation of the listed order would: 1 predecessor each)
    for b in (4096, 65536):
        mine = [r for r in rows if r["bytes"] == b]
        order = [sorted(mine, key=lambda r: r["round_position"][k]) for k in range(7)]
        assert all(sorted(r["round_position"][k] for r in mine) == [0, 1, 2] for k in range(7))
        before = {r["algo"]: {o[o.index(r) - 1]["algo"] for o in order if o.index(r) > 0} for r in mine}
        assert max(len(p) for p in before.values()) >= 2, before
    bad = subprocess.run([LOWCOMM, "bench", "collectives", "--nproc", "2", "--rounds", "0"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "--rounds" in bad.stdout + bad.stderr, bad.stdout + bad.stderr
