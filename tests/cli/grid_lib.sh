# Sourced by the model-parallel e2e tests (model_parallel_e2e, ab_grid_e2e, relaxed_grid_e2e):
# the small gpt LM on the Python standard library's sources, and `run NAME NPROC ARGS...`, which
# trains with "${common[@]}" (the caller's settings) into $tmp/run_NAME, writes the summary to
# $tmp/NAME.json and fails the test with the run's output if it fails. Needs LOWCOMM and tmp.
corpus=$(ls -d /usr/lib/python3.*/ | sed -n 1p)
gpt_small=(--set model.name=gpt --set data.dataset=text --set data.dir="$corpus" --set data.glob="*.py"
           --set model.layers=2 --set model.dim=64 --set model.heads=4 --set model.seq_len=32
           --set data.test_limit=48 --set data.test_batch_size=16 --set schedule.epochs=100 --set schedule.max_steps=20)
run() {
  local name=$1 nproc=$2; shift 2
  "$LOWCOMM" train --nproc "$nproc" "${common[@]}" --set logging.out_dir="$tmp/run_$name" --summary "$tmp/$name.json" "$@" \
    > "$tmp/out_$name" 2>&1 || { cat "$tmp/out_$name"; echo "FAIL: $name run failed"; exit 1; }
}
