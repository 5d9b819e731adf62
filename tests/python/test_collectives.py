"""Every collective through torch.distributed on the lowcomm backend, against Gloo and against the
result computed from every rank's inputs, with real processes (tests/python/collectives_worker.py)."""
import pytest

from dist_util import launch


@pytest.mark.parametrize("world,deterministic", [(2, "0"), (3, "1"), (4, "0")])
def test_every_collective_matches_gloo_and_the_reference(world, deterministic):
    results = launch("collectives_worker.py", world, env={"LOWCOMM_DETERMINISTIC": deterministic})
    for rank, (_, out, _) in enumerate(results):
        assert out is not None, f"rank {rank} printed no result"
        assert out["failures"] == [], f"rank {rank}: {out['failures'][:10]}"
        assert out["checked"] > 250
        assert out["deterministic"] == (deterministic == "1")
        assert out["traffic"]["total"]["bytes_sent"] > 0
        assert "allreduce" in out["traffic"]["by_op"] and "send" in out["traffic"]["by_op"]
