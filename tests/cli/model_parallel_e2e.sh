#!/usr/bin/env bash
# Tensor and pipeline parallelism through the real launcher (the equivalence test of issue 13):
# the gpt LM on the Python standard library, 20 AdamW steps with label smoothing, clipping and 2
# accumulated batches, evaluated after every step. Each grid (dp, tp, pp) = (1, 2, 1), (2, 2, 1)
# (in Megatron's rank order and with dp fastest), (1, 4, 1), (1, 1, 2) GPipe, (2, 1, 2) 1F1B,
# (1, 2, 2) 1F1B, (1, 1, 4) 1F1B (one unit per stage), (1, 1, 2) cut by measured time, (1, 1, 2) and (2, 1, 2) interleaved
# 1F1B with 2 chunks per rank (DDP syncing each chunk after its last micro-batch), ZeRO-2 on (2, 2, 1), ZeRO-1 on (2, 1, 2),
# and the tied head on (1, 2, 1), follows the single-process run (same seed, same global batch of 8 sequences: data.batch_size is
# per rank, a replica of tp x pp ranks takes tp x pp of them): every step's test
# loss within 1e-4 relative, the gathered final model (model_state.pt, read by Python torch.load)
# within 1e-5. AdamW's eps is 1e-3 here: with the default 1e-8 Adam divides the float-rounding
# noise of near-zero gradients (embedding rows of rare bytes) by its own size and turns it into
# lr-sized steps, so any change of summation order (DDP's too) moves those weights by ~1e-3 while
# the loss still agrees to 2e-5. Bytes: "tp" traffic only where tp > 1, "pp" only where pp > 1, gradient traffic
# only where dp > 1. A resumed tp run, a resumed time-balanced pipeline and a resumed interleaved one end bit-identical to the
# uninterrupted one; a checkpoint
# under another grid, and grids that cannot split, fail naming the grid or the key with nothing
# trained.
set -euo pipefail
LOWCOMM=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/grid_lib.sh"
common=("${gpt_small[@]}"
        --set schedule.name=cosine --set schedule.warmup_steps=2 --set optimizer.name=adamw --set optimizer.lr=0.01 --set optimizer.eps=1e-3
        --set optimizer.weight_decay=0.1 --set optimizer.grad_clip=0.5 --set optimizer.label_smoothing=0.1
        --set strategy.accumulation=2 --set logging.eval_every=1 --set logging.log_every=1 --set logging.progress=false
        --set checkpoint.every_steps=10 --set checkpoint.keep_last=0)
run single 1 --set data.batch_size=4
run tp2 2 --set data.batch_size=2 --set parallel.tp=2
run dp2tp2 4 --set data.batch_size=1 --set parallel.tp=2
run dp2tp2_dpfirst 4 --set data.batch_size=1 --set parallel.tp=2 --set parallel.order=dp-tp-pp
run tp4 4 --set data.batch_size=1 --set parallel.tp=4
run dp2tp2_zero2 4 --set data.batch_size=1 --set parallel.tp=2 --set strategy.zero=2
run dp2pp2_zero1 4 --set data.batch_size=1 --set parallel.pp=2 --set parallel.micro_batches=2 --set strategy.zero=1
run pp2_gpipe 2 --set data.batch_size=2 --set parallel.pp=2 --set parallel.micro_batches=2 --set parallel.schedule=gpipe
run dp2pp2 4 --set data.batch_size=1 --set parallel.pp=2 --set parallel.micro_batches=2
run tp2pp2 4 --set data.batch_size=1 --set parallel.tp=2 --set parallel.pp=2 --set parallel.micro_batches=2
run pp4 4 --set data.batch_size=1 --set parallel.pp=4 --set parallel.micro_batches=4
run pp2_time 2 --set data.batch_size=2 --set parallel.pp=2 --set parallel.micro_batches=2 --set parallel.balance=time
interleaved=(--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2)
run pp2_int 2 --set data.batch_size=2 "${interleaved[@]}" --set parallel.micro_batches=4
run dp2pp2_int 4 --set data.batch_size=1 "${interleaved[@]}" --set parallel.micro_batches=2
run single_tied 1 --set data.batch_size=4 --set model.tied=true
run tp2_tied 2 --set data.batch_size=2 --set model.tied=true --set parallel.tp=2
# Resume the tp2 run from its step-10 checkpoint.
mkdir -p "$tmp/run_tp2r/checkpoints"
cp "$tmp"/run_tp2/checkpoints/step10.rank*.pt "$tmp/run_tp2r/checkpoints/"
echo 10 > "$tmp/run_tp2r/checkpoints/latest"
run tp2r 2 --set data.batch_size=2 --set parallel.tp=2 --resume
# Resume the time-balanced pipeline: it keeps the checkpoint's cut (timings differ between runs).
mkdir -p "$tmp/run_pp2_timer/checkpoints"
cp "$tmp"/run_pp2_time/checkpoints/step10.rank*.pt "$tmp/run_pp2_timer/checkpoints/"
echo 10 > "$tmp/run_pp2_timer/checkpoints/latest"
run pp2_timer 2 --set data.batch_size=2 --set parallel.pp=2 --set parallel.micro_batches=2 --set parallel.balance=time --resume
mkdir -p "$tmp/run_pp2_intr/checkpoints"
cp "$tmp"/run_pp2_int/checkpoints/step10.rank*.pt "$tmp/run_pp2_intr/checkpoints/"
echo 10 > "$tmp/run_pp2_intr/checkpoints/latest"
run pp2_intr 2 --set data.batch_size=2 "${interleaved[@]}" --set parallel.micro_batches=4 --resume
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys, torch
tmp = sys.argv[1]
def evals(name):
    recs = [json.loads(l) for l in open(f"{tmp}/run_{name}/metrics.jsonl")]
    return {r["step"]: r["test_loss"] for r in recs if r["type"] == "eval"}
def state(name): return torch.load(f"{tmp}/run_{name}/model_state.pt")
names = ("single", "tp2", "dp2tp2", "dp2tp2_dpfirst", "dp2tp2_zero2", "dp2pp2_zero1", "tp4", "pp4", "pp2_gpipe", "dp2pp2", "tp2pp2", "single_tied", "tp2_tied", "tp2r", "pp2_time", "pp2_timer", "pp2_int", "dp2pp2_int", "pp2_intr")
summ = {n: json.load(open(f"{tmp}/{n}.json")) for n in names}
for ref, grids in (("single", ("tp2", "dp2tp2", "dp2tp2_dpfirst", "dp2tp2_zero2", "dp2pp2_zero1", "tp4", "pp4", "pp2_gpipe", "dp2pp2", "tp2pp2", "pp2_time", "pp2_int", "dp2pp2_int")), ("single_tied", ("tp2_tied",))):
    want, w = evals(ref), state(ref)
    assert sorted(want) == list(range(1, 21)), sorted(want)
    for g in grids:
        got = evals(g)
        worst = max(abs(got[s] / want[s] - 1) for s in want)
        d = max((state(g)[k] - w[k]).abs().max().item() for k in w)
        print(f"{g}: worst per-step test-loss deviation from {ref} {worst:.2e} (relative), max |weight difference| {d:.2e}")
        assert sorted(got) == sorted(want), (g, sorted(got))
        assert worst < 1e-4, (g, worst)
        assert sorted(state(g)) == sorted(w) and d < 1e-5, (g, d)
        assert summ[g]["parameters"] == summ[ref]["parameters"], (summ[g]["parameters"], summ[ref]["parameters"])
    assert evals(ref)[20] < evals(ref)[1] - 0.3, "the model did not learn: the test is vacuous"
r, u = state("tp2r"), state("tp2")
assert all(torch.equal(r[k], u[k]) for k in u), "the resumed tensor-parallel run is not bit-identical"
r, u = state("pp2_timer"), state("pp2_time")
assert all(torch.equal(r[k], u[k]) for k in u), "the resumed time-balanced pipeline is not bit-identical"
r, u = state("pp2_intr"), state("pp2_int")
assert all(torch.equal(r[k], u[k]) for k in u), "the resumed interleaved pipeline is not bit-identical"
for n, m in (("pp2_int", 4), ("dp2pp2_int", 2)):  # 2 layers = 4 units: one per chunk, rank 0 holds chunks 0 and 2
    pipe = summ[n]["parallel"]["pipeline"]
    assert pipe["schedule"] == "interleaved" and pipe["virtual_stages"] == 2 and pipe["micro_batches"] == m, pipe
    assert pipe["stage_cut"]["boundaries"] == [0, 1, 2, 3, 4], pipe
    assert abs(pipe["bubble_fraction_theory"] - 1 / (2 * m + 1)) < 1e-9, pipe
assert summ["dp2pp2_int"]["bytes_by_phase"]["grad"]["sent"] > 0, summ["dp2pp2_int"]["bytes_by_phase"]
cut = summ["pp2_time"]["parallel"]["pipeline"]["stage_cut"]
# Units: embedding, 2 blocks, head, cut where the heavier of the two stages is lightest.
w = cut["unit_weights"]
assert cut["balance"] == "time" and cut["unit_weight"] == "us" and len(w) == 4 and all(x >= 1 for x in w), cut
b = cut["boundaries"]
assert b[0] == 0 and b[2] == 4 and 0 < b[1] < 4, cut
assert max(sum(w[:b[1]]), sum(w[b[1]:])) == min(max(sum(w[:k]), sum(w[k:])) for k in range(1, 4)), cut
assert summ["pp2_timer"]["parallel"]["pipeline"]["stage_cut"]["unit_weight"] == "checkpoint", summ["pp2_timer"]["parallel"]
assert summ["dp2pp2"]["parallel"]["pipeline"]["stage_cut"]["unit_weight"] == "parameters", summ["dp2pp2"]["parallel"]
axis = {n: summ[n]["parallel"] for n in summ}
for n in ("single", "tp2", "dp2pp2"):  # activations measured with and without a pipeline
    mem = summ[n]["memory"]
    assert 0 < mem["peak_activation_bytes"] <= mem["peak_activation_bytes_max_rank"], (n, mem)
phases = {n: summ[n]["bytes_by_phase"] for n in summ}
assert axis["single"]["bytes_sent_by_axis"]["tp"] == 0 and axis["tp2"]["bytes_sent_by_axis"]["tp"] > 0, axis
assert (axis["dp2tp2"]["dp"], axis["dp2tp2"]["tp"]) == (2, 2) and axis["tp4"]["dp"] == 1, axis
# Rank 0 is (dp 0, tp 0) in either order; rank 1 is tp 1 in Megatron's order and dp 1 in dp-tp-pp.
assert axis["dp2tp2"]["order"] == "tp-dp-pp" and axis["dp2tp2_dpfirst"]["order"] == "dp-tp-pp", axis
assert axis["dp2tp2_dpfirst"]["bytes_sent_by_axis"] == axis["dp2tp2"]["bytes_sent_by_axis"], axis
assert "grad" not in phases["tp4"] and "grad" not in phases["tp2"] and "grad" not in phases["tp2pp2"], phases
assert phases["dp2tp2"]["grad"]["sent"] > 0 and phases["dp2pp2"]["grad"]["sent"] > 0, phases
for n in ("dp2tp2_zero2", "dp2pp2_zero1"):  # ZeRO on the dp axis: sharded optimizer state, its own phases
    assert summ[n]["ddp"]["zero_stage"] == int(n[-1]), (n, summ[n]["ddp"])
    assert phases[n]["params"]["sent"] > 0 and phases[n]["clip"]["sent"] > 0, (n, phases[n])
    assert summ[n]["memory"]["optimizer_state_bytes"] < summ[n.rsplit("_", 1)[0]]["memory"]["optimizer_state_bytes"], n
for n in ("pp2_gpipe", "dp2pp2", "tp2pp2"):
    assert axis[n]["bytes_sent_by_axis"]["pp"] > 0, (n, axis[n])
    pipe = axis[n]["pipeline"]
    assert pipe["micro_batches"] == 2 and len(pipe["stages"]) == 2, pipe
    assert abs(pipe["bubble_fraction_theory"] - 1 / 3) < 1e-9, pipe
    assert 0 < pipe["bubble_fraction"] < 1, pipe
assert axis["tp2pp2"]["bytes_sent_by_axis"]["tp"] > 0 and axis["tp2"]["bytes_sent_by_axis"]["pp"] == 0, axis
assert axis["pp2_gpipe"]["pipeline"]["schedule"] == "gpipe" and axis["dp2pp2"]["pipeline"]["schedule"] == "1f1b", axis
# The dp2tp2 rank sends its half-model's gradients: about half of what a 2-rank DDP of the full model would.
print("ok: bytes per axis", {n: axis[n]["bytes_sent_by_axis"] for n in ("tp2", "dp2tp2", "tp4", "dp2pp2", "tp2pp2")})
PY
# Errors: every rank names the key or the grids, non-zero exit, nothing trained.
bad() {
  local what=$1 key=$2 nproc=$3; shift 3
  if "$LOWCOMM" train --nproc "$nproc" "${common[@]}" --set data.batch_size=4 --set logging.out_dir="$tmp/bad" "$@" \
      > "$tmp/out_bad" 2>&1; then
    echo "FAIL: $what was accepted"; exit 1
  fi
  grep -q -- "$key" "$tmp/out_bad" || { cat "$tmp/out_bad"; echo "FAIL: $what: the error does not name $key"; exit 1; }
  [[ ! -e "$tmp/bad/metrics.jsonl" ]] || { echo "FAIL: $what wrote metrics"; exit 1; }
}
bad "tp not dividing the world" "parallel.tp" 4 --set parallel.tp=3
bad "heads not divisible" "model.heads" 4 --set parallel.tp=4 --set model.heads=2
bad "tp on an image model" "parallel.tp" 2 --set parallel.tp=2 --set model.name=cnn --set data.dataset=synthetic
bad "micro-batches not dividing the batch" "parallel.micro_batches" 2 --set parallel.pp=2 --set parallel.micro_batches=3
bad "more stages than units" "parallel.pp" 4 --set parallel.pp=4 --set model.layers=1
bad "a tied head over stages" "parallel.pp" 2 --set parallel.pp=2 --set model.tied=true
bad "balance by time without a pipeline" "parallel.balance" 2 --set parallel.balance=time
bad "interleaved with one chunk per rank" "parallel.virtual_stages" 2 --set parallel.pp=2 --set parallel.schedule=interleaved
bad "chunks without interleaving" "parallel.virtual_stages" 2 --set parallel.pp=2 --set parallel.virtual_stages=2
bad "interleaved micro-batches not in groups of pp" "parallel.micro_batches" 2 "${interleaved[@]}" --set parallel.micro_batches=1
bad "more chunks than units" "parallel.virtual_stages" 2 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=3 --set parallel.micro_batches=2
bad "interleaved AB-training" "parallel.virtual_stages" 2 "${interleaved[@]}" --set parallel.micro_batches=2 --set strategy.name=ab
rm -rf "$tmp/bad"; mkdir -p "$tmp/bad"; cp -r "$tmp/run_tp2/checkpoints" "$tmp/bad/"
if "$LOWCOMM" train --nproc 2 "${common[@]}" --set data.batch_size=4 --set logging.out_dir="$tmp/bad" --resume \
    > "$tmp/out_bad" 2>&1; then
  echo "FAIL: a tp=2 checkpoint resumed on a dp=2 grid"; exit 1
fi
grep -q "dp 1 x tp 2 x pp 1 (order tp-dp-pp) grid, this run is dp 2 x tp 1 x pp 1 (order tp-dp-pp)" "$tmp/out_bad" ||
  { cat "$tmp/out_bad"; echo "FAIL: the grid error does not name both grids"; exit 1; }
# The same grid in another rank order holds other shards on each rank: refused too.
rm -rf "$tmp/bad"; mkdir -p "$tmp/bad"; cp -r "$tmp/run_dp2tp2/checkpoints" "$tmp/bad/"
if "$LOWCOMM" train --nproc 4 "${common[@]}" --set data.batch_size=1 --set parallel.tp=2 --set parallel.order=dp-tp-pp \
    --set logging.out_dir="$tmp/bad" --resume > "$tmp/out_bad" 2>&1; then
  echo "FAIL: a tp-dp-pp checkpoint resumed in dp-tp-pp order"; exit 1
fi
grep -q "(order tp-dp-pp) grid, this run is dp 2 x tp 2 x pp 1 (order dp-tp-pp)" "$tmp/out_bad" ||
  { cat "$tmp/out_bad"; echo "FAIL: the order error does not name both orders"; exit 1; }
# A pipeline checkpoint of one chunk per rank resumed interleaved: its chunks differ, named as such.
rm -rf "$tmp/bad"; mkdir -p "$tmp/bad"; cp -r "$tmp/run_pp2_gpipe/checkpoints" "$tmp/bad/"
if "$LOWCOMM" train --nproc 2 "${common[@]}" --set data.batch_size=2 "${interleaved[@]}" --set parallel.micro_batches=2 \
    --set logging.out_dir="$tmp/bad" --resume > "$tmp/out_bad" 2>&1; then
  echo "FAIL: a one-chunk pipeline checkpoint resumed interleaved"; exit 1
fi
grep -q "parallel.virtual_stages: --resume" "$tmp/out_bad" ||
  { cat "$tmp/out_bad"; echo "FAIL: the chunk error does not name parallel.virtual_stages"; exit 1; }
echo "ok: tensor- and pipeline-parallel grids follow the single process; resume is exact; bad grids are named"
