#!/usr/bin/env bash
# Test for tools/plot.py: plots synthetic metrics JSONL runs and checks the error cases.
# usage: test_plot.sh PATH/TO/plot.py   (interpreter: $PYTHON, else the first python3 with matplotlib)
# KEEP_TMP=1 keeps the temp dir (with the produced PNGs) for a look.
set -u
PLOT=${1:?usage: test_plot.sh PATH/TO/plot.py}

. "$(dirname "$0")/plot_python.sh"  # PY, TMP, pass, fail

# Two runs: 400 step lines, an eval line every 100 steps; "lowcomm" sends 10x fewer bytes.
# Also a config line (other type, ignored) and extra keys (ignored).
"$PY" - "$TMP" <<'PYEOF'
import json, math, random, sys
d = sys.argv[1]
def run(name, bytes_per_step, seed, evals=True, steps=400):
    rnd = random.Random(seed)
    with open(f"{d}/{name}.jsonl", "w") as f:
        f.write(json.dumps({"type": "config", "world": 4, "algo": name}) + "\n")
        for s in range(1, steps + 1):
            loss = 2.3 * math.exp(-s / 120) + 0.1 + rnd.uniform(-0.08, 0.08)
            b = s * bytes_per_step
            f.write(json.dumps({"type": "step", "step": s, "epoch": s // 100 + 1, "loss": loss, "lr": 0.05,
                                "samples_per_s": 850.0, "compute_s": 0.12, "comm_s": 0.03, "wait_s": 0.01,
                                "bytes_sent": b, "bytes_recv": b,
                                "bytes_by_phase": {"grad": {"sent": b, "recv": b}},
                                "time_s": s * 0.1, "future_key": [1, 2]}) + "\n")
            if evals and s % 100 == 0:
                f.write(json.dumps({"type": "eval", "step": s, "epoch": s // 100, "test_accuracy": 0.97 - 0.6 * math.exp(-s / 100),
                                    "test_loss": loss, "bytes_sent": b, "time_s": s * 0.1}) + "\n")
run("allreduce", 4 << 20, 1)
run("lowcomm", (4 << 20) // 10, 2)
run("noeval", (4 << 20) // 1000, 3, evals=False)   # 1000x fewer bytes: forces the log MB axis
PYEOF

check_png() {  # name file
  local magic size
  magic=$(head -c 8 "$2" 2>/dev/null | od -An -tx1 | tr -d ' \n')
  size=$(wc -c < "$2" 2>/dev/null || echo 0)
  if [ "$magic" = "89504e470d0a1a0a" ] && [ "$size" -gt 10240 ]; then pass "$1 ($size bytes)"
  else fail "$1: magic '$magic', size $size"; fi
}

"$PY" "$PLOT" "$TMP/allreduce.jsonl" "$TMP/lowcomm.jsonl" -o "$TMP/two.png" \
  --labels "allreduce (fp32),lowcomm (top-k)" --title "synthetic runs" --smooth 10 >"$TMP/out" 2>&1 \
  || { fail "two runs: exit $?"; cat "$TMP/out"; }
check_png "two runs, labels, title, smoothing" "$TMP/two.png"

"$PY" "$PLOT" "$TMP/allreduce.jsonl" "$TMP/noeval.jsonl" -o "$TMP/log.png" >"$TMP/out" 2>&1 \
  || { fail "run without eval lines: exit $?"; cat "$TMP/out"; }
check_png "run without eval lines, log MB axis" "$TMP/log.png"


expect_plot_error "missing file" "$TMP/nope.jsonl" "$TMP/allreduce.jsonl" "$TMP/nope.jsonl" -o "$TMP/x.png"

{ head -n 6 "$TMP/lowcomm.jsonl"; echo '{"type": "step", "step": 7, "loss": 0.5,'; tail -n +7 "$TMP/lowcomm.jsonl"; } > "$TMP/bad.jsonl"
expect_plot_error "invalid JSON line" "$TMP/bad.jsonl:7:" "$TMP/allreduce.jsonl" "$TMP/bad.jsonl" -o "$TMP/x.png"

grep -v '"type": "step"' "$TMP/lowcomm.jsonl" > "$TMP/nosteps.jsonl"
expect_plot_error "run with no step lines" "$TMP/nosteps.jsonl" "$TMP/nosteps.jsonl" -o "$TMP/x.png"

{ echo '{"type": "step", "step": 1, "bytes_sent": 5}'; } > "$TMP/noloss.jsonl"
expect_plot_error "step line without loss" "$TMP/noloss.jsonl:1:" "$TMP/noloss.jsonl" -o "$TMP/x.png"

expect_plot_error "label count mismatch" "--labels" "$TMP/allreduce.jsonl" "$TMP/lowcomm.jsonl" --labels a -o "$TMP/x.png"

# A language model's run: eval lines carry bits_per_byte, plotted instead of accuracy; it cannot
# share a figure with a classifier's run.
sed 's/"test_accuracy"/"bits_per_byte"/' "$TMP/lowcomm.jsonl" > "$TMP/lm.jsonl"
"$PY" "$PLOT" "$TMP/lm.jsonl" -o "$TMP/lm.png" >"$TMP/out" 2>&1 || { fail "language model run: exit $?"; cat "$TMP/out"; }
check_png "language model run (bits per byte)" "$TMP/lm.png"
expect_plot_error "classifier and language model mixed" "mix language models" "$TMP/allreduce.jsonl" "$TMP/lm.jsonl" -o "$TMP/x.png"
{ grep -m1 '"type": "step"' "$TMP/lm.jsonl"; grep '"type": "eval"' "$TMP/lm.jsonl" | head -1; grep '"type": "eval"' "$TMP/allreduce.jsonl" | head -1; } > "$TMP/both.jsonl"
expect_plot_error "one run with both kinds of eval lines" "$TMP/both.jsonl:3:" "$TMP/both.jsonl" -o "$TMP/x.png"

# bench/sites_lm's result file: bits per byte against tokens, wall time and inter-site bytes.
cat > "$TMP/sites_lm.json" <<'JSON'
{"setting": {"name": "2s2x1@1gbit/100mbit,50ms,0.1%"}, "rows": [
 {"strategy": "ddp", "tokens_per_step": 4096, "evals": [
  {"step": 1000, "time_s": 1100, "loss": 1.6, "bits_per_byte": 2.3, "inter_site_bytes": 7.0e9},
  {"step": 2000, "time_s": 2270, "loss": 1.39, "bits_per_byte": 2.01, "inter_site_bytes": 1.4e10}]},
 {"strategy": "streaming_4bit", "tokens_per_step": 4096, "evals": [
  {"step": 1000, "time_s": 560, "loss": 1.7, "bits_per_byte": 2.45, "inter_site_bytes": 0},
  {"step": 2000, "time_s": 1105, "loss": 1.45, "bits_per_byte": 2.10, "inter_site_bytes": 3.7e7}]}]}
JSON
"$PY" "$PLOT" --sites-lm "$TMP/sites_lm.json" -o "$TMP/sites.png" --title "sites" >"$TMP/out" 2>&1 \
  || { fail "--sites-lm: exit $?"; cat "$TMP/out"; }
check_png "--sites-lm: three panels, one colour per strategy" "$TMP/sites.png"
sed 's/"tokens_per_step": 4096, //' "$TMP/sites_lm.json" > "$TMP/sites_bad.json"
expect_plot_error "--sites-lm without tokens_per_step" "not a bench/sites_lm result file" --sites-lm "$TMP/sites_bad.json" -o "$TMP/x.png"
expect_plot_error "--sites-lm with runs" "takes no RUN.jsonl" --sites-lm "$TMP/sites_lm.json" "$TMP/lm.jsonl" -o "$TMP/x.png"

if [ -e "$TMP/x.png" ]; then fail "an error case wrote an image"; else pass "error cases wrote no image"; fi

if [ "$FAILS" -ne 0 ]; then echo "$FAILS check(s) failed"; exit 1; fi
echo "all checks passed"
