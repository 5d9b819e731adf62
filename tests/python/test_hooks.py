"""lowcomm.hooks: DDP comm hooks for every codec, on the lowcomm backend and on PyTorch's Gloo
backend (compressed payload on a lowcomm side group), with real processes (hooks_worker.py)."""
import pytest

from dist_util import launch

COMPRESSING = {"bf16", "fp16", "int8", "qsgd", "terngrad", "signsgd", "signum", "efsignsgd", "onebit", "topk",
               "randomk", "dgc", "powersgd"}


@pytest.mark.parametrize("backend", ["lowcomm", "gloo"])
def test_every_codec_trains_under_ddp(backend):
    results = launch("hooks_worker.py", 2, ["codecs", backend])
    runs = results[0][1]
    assert COMPRESSING | {"none", "auto", "threshold"} <= set(runs)
    for codec, r in runs.items():
        assert r["same"], f"{codec}: replicas differ"
        assert r["side_group"] == (backend == "gloo")
        assert r["last"] < r["first"], f"{codec} did not learn: {r}"
        assert r["acc"] > 0.45, f"{codec}: {r}"
        if codec in COMPRESSING:
            assert r["ratio"] > 1.9, f"{codec} did not compress: {r}"
    other = results[1][1]
    assert {c: r["acc"] for c, r in other.items()} == {c: r["acc"] for c, r in runs.items()}  # one model


def test_error_feedback_loses_nothing():
    for _, out, _ in launch("hooks_worker.py", 2, ["invariant", "lowcomm"]):
        assert out["residual_keys"] and out["residual_norm"] > 0.1  # the residual is not trivially zero
        assert out["worst_rel"] < 1e-5, out


@pytest.mark.parametrize("codec", ["topk", "powersgd", "auto"])
def test_resume_through_state_dict_is_bit_identical(codec):
    for _, out, _ in launch("hooks_worker.py", 2, [f"resume-{codec}", "lowcomm"]):
        assert out["identical"], out
        assert out["differs_without_state"], out  # the state is what makes it identical


@pytest.mark.parametrize("backend", ["gloo", "lowcomm"])
def test_powersgd_runs_a_thousand_steps(backend):
    for _, out, _ in launch("hooks_worker.py", 2, ["powersgd1000", backend]):
        assert out["steps"] == 1000 and out["finite"] and out["same"], out
        assert out["acc"] > 0.75 and out["ratio"] > 5, out
