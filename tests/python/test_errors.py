"""Failures through torch.distributed on the lowcomm backend: a dead peer is a Python exception
naming the rank (not a hang), calls that differ across ranks are reported with
LOWCOMM_DEBUG_CHECK=1, and bad arguments are clear errors that leave the group usable."""
from dist_util import launch


def test_dead_peer_is_an_exception_naming_the_rank():
    results = launch("errors_worker.py", 2, ["dead"], env={"TEST_TIMEOUT_S": "20"}, expect_fail={1})
    assert results[1][0] == 3
    out = results[0][1]
    assert len(out["errors"]) == 1
    err = out["errors"][0]
    assert "rank 1" in err, err
    assert out["elapsed"] < 20 + 5, out


def test_calls_that_differ_across_ranks_are_named_in_debug_mode():
    for rc, out, _ in launch("errors_worker.py", 3, ["mismatch"], env={"LOWCOMM_DEBUG_CHECK": "1"}):
        err = out["errors"][0]
        assert "mismatch" in err and "count=10" in err and "count=12" in err, err


def test_bad_arguments_are_clear_errors_and_leave_the_group_usable():
    for rc, out, _ in launch("errors_worker.py", 2, ["local"]):
        e = out["errors"]
        assert "lowcomm backend, allgather" in e[0] or "all_gather" in e[0], e[0]
        assert "cannot reduce dtype Char" in e[1], e[1]
        assert "reduce op PRODUCT is not supported" in e[2], e[2]
        assert "_allgather_base" in e[3] or "all_gather_into_tensor" in e[3], e[3]
        assert "destination" in e[4] or "rank" in e[4], e[4]
        assert e[5].startswith("TypeError") and "not a lowcomm process group" in e[5], e[5]
        assert e[6] == "after: [2.0, 2.0, 2.0]"
