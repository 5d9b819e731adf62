"""Every size, offset, rank and tag that Python hands the lowcomm backend is checked before it
reaches a buffer: a ValueError naming the argument, on the calling rank, and the group stays
usable (hole 4 of "Trust, take 2": negative all_to_all split sizes overflowed the heap)."""
from dist_util import launch

AFTER = {0: "after: [0.0, 1.0, 10.0, 11.0]", 1: "after: [2.0, 3.0, 12.0, 13.0]"}


def run(case):
    results = launch("validation_worker.py", 2, [case], timeout=60)
    return [out["errors"] for _, out, _ in results]


def test_negative_split_sizes_are_refused_naming_the_argument():
    for rank, e in enumerate(run("splits")):
        assert e[0].startswith("ValueError") and "output_split_sizes" in e[0] and "-2" in e[0], e[0]
        assert e[1].startswith("ValueError") and "input_split_sizes" in e[1] and "-2" in e[1], e[1]
        assert e[2].startswith("ValueError") and "input_split_sizes" in e[2], e[2]
        assert e[3] == AFTER[rank], e


def test_point_to_point_tags_and_ranks_are_checked():
    for rank, e in enumerate(run("p2p")):
        assert e[0].startswith("ValueError") and "tag -1" in e[0], e[0]
        assert e[1].startswith("ValueError") and "root" in e[1], e[1]
        assert "destination" in e[2] or "rank" in e[2], e[2]
        assert e[3] == AFTER[rank], e


def test_hook_segments_are_checked_before_the_compressor_reads_them():
    for rank, e in enumerate(run("hooks")):
        assert e[0].startswith("ValueError") and "segment 'w'" in e[0] and "shape" in e[0], e[0]
        assert e[1].startswith("ValueError") and "segment 'b'" in e[1], e[1]
        assert e[2].startswith("ValueError") and "index -1" in e[2], e[2]
        assert e[3] == AFTER[rank], e


def test_group_creation_arguments_are_checked():
    for rank, e in enumerate(run("create")):
        assert e[0].startswith("ValueError") and "rank 2" in e[0], e[0]
        assert e[1].startswith("ValueError") and "size 0" in e[1], e[1]
        assert e[2].startswith("ValueError") and "timeout" in e[2], e[2]
        assert e[3] == AFTER[rank], e
