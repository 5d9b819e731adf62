#!/usr/bin/env bash
# Runs the deterministic reference trainings of a refactor check with one lowcomm binary and
# writes each run's model_state.pt under OUT: ddp, ab, local_sgd and top-k on 4 processes (the
# CNN on Fashion-MNIST), and a (dp, tp, pp) = (1, 2, 2) grid of the small gpt LM. Run it with the
# build before a change and with the one after, then compare: the refactor changes no result when
#   tools/same_result.sh compare OUT_BEFORE OUT_AFTER
# prints "same" for every run (bit-identical files).
# Usage: tools/same_result.sh run LOWCOMM_BINARY OUT | compare DIR_A DIR_B
set -euo pipefail
runs=(ddp ab local_sgd topk grid122)
if [ "${1:-}" = compare ]; then
  status=0
  for r in "${runs[@]}"; do
    if cmp -s "$2/$r/model_state.pt" "$3/$r/model_state.pt"; then echo "$r: same"
    else echo "$r: DIFFERENT"; status=1; fi
  done
  exit $status
fi
[ "${1:-}" = run ] && [ $# -eq 3 ] || { sed -n 2,9p "$0"; exit 2; }
bin=$(realpath "$2"); out=$3
mkdir -p "$out"
cnn=(--set model.name=cnn --set data.train_limit=4096 --set data.test_limit=512 --set schedule.epochs=1
     --set schedule.max_steps=24 --set data.batch_size=32 --set comm.deterministic=true --set logging.progress=false)
corpus=$(ls -d /usr/lib/python3.*/ | sed -n 1p)
gpt=(--set model.name=gpt --set data.dataset=text --set data.dir="$corpus" --set data.glob="*.py"
     --set model.layers=2 --set model.dim=64 --set model.heads=4 --set model.seq_len=32
     --set data.test_limit=48 --set data.test_batch_size=16 --set schedule.epochs=100 --set schedule.max_steps=20
     --set comm.deterministic=true --set logging.progress=false)
train() {
  local name=$1; shift
  rm -rf "$out/$name"
  "$bin" train --nproc 4 "$@" --set logging.out_dir="$out/$name" > "$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log"; echo "FAIL: $name"; exit 1; }
  echo "$name: $(sha256sum < "$out/$name/model_state.pt" | cut -c1-16)"
}
train ddp "${cnn[@]}"
train ab "${cnn[@]}" --set strategy.name=ab --set ab.group_size=2 --set ab.warmup_steps=6 \
  --set ab.steps_btw_syncing=8 --set ab.ddp_steps_after_sync=2 --set ab.lr_rebound_steps=2
train local_sgd "${cnn[@]}" --set strategy.name=local_sgd --set local_sgd.period=4
train topk "${cnn[@]}" --set compress.codec=topk --set compress.ratio=0.05
train grid122 "${gpt[@]}" --set parallel.tp=2 --set parallel.pp=2 --set parallel.micro_batches=2
