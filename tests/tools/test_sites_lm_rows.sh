#!/usr/bin/env bash
# bench/sites_lm --dry-run: every row of its table resolves against the config (`lowcomm config
# show`), so a wrong key in a row fails here and not an hour into a cluster run (the ddp_ring row
# once set an unknown key, comm.allreduce); a row with a bad key is refused naming the row. And
# the table divides each run's train time by the compute-only row's and names each DiLoCo row's
# period.
# usage: test_sites_lm_rows.sh BENCH_SITES_LM LOWCOMM
set -euo pipefail
BENCH=$1
LOWCOMM=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=$(/usr/bin/python3 - "$BENCH" <<'PY'
import importlib.machinery, importlib.util, sys, pathlib
path = pathlib.Path(sys.argv[1])
sys.path.insert(0, str(path.parent))
loader = importlib.machinery.SourceFileLoader("sites_lm", str(path))
mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("sites_lm", loader))
loader.exec_module(mod)
print(",".join(mod.STRATEGIES))
PY
)
[ -n "$rows" ] || { echo "FAIL: no rows read from $BENCH"; exit 1; }
/usr/bin/python3 "$BENCH" "$tmp/out" --dry-run --strategies "$rows" --lowcomm "$LOWCOMM" > "$tmp/ok.txt" 2>&1 \
  || { cat "$tmp/ok.txt"; echo "FAIL: a row of bench/sites_lm does not resolve"; exit 1; }
if /usr/bin/python3 "$BENCH" "$tmp/out" --dry-run --strategies ddp --set comm.allreduce=ring --lowcomm "$LOWCOMM" \
  > "$tmp/bad.txt" 2>&1; then
  echo "FAIL: an unknown key was accepted"; exit 1
fi
grep -q "ddp: its keys do not resolve.*comm.allreduce" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; echo "FAIL: the error does not name the row and key"; exit 1; }
[ ! -e "$tmp/out" ] || { echo "FAIL: a dry run wrote $tmp/out"; exit 1; }
# The table: every run's train time over the compute-only row's; that row shows no quality.
/usr/bin/python3 - "$BENCH" <<'PY' || { echo "FAIL: the table's compute-only column"; exit 1; }
import importlib.machinery, importlib.util, sys, pathlib
path = pathlib.Path(sys.argv[1])
sys.path.insert(0, str(path.parent))
loader = importlib.machinery.SourceFileLoader("sites_lm", str(path))
mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("sites_lm", loader))
loader.exec_module(mod)
def row(name, train, bpb, util):
    return {"strategy": name, "train_s": train, "wall_s": train + 10, "bits_per_byte": bpb, "loss": bpb * 0.69,
            "compute_utilization": util, "inter_site_wire_bytes": 2e6, "inter_site_payload_bytes": 1e6, "evals": []}
streaming = dict(row("streaming", 110, 2.04, 0.9), diloco={"period": 32})
md = mod.markdown([row("ddp", 300, 2.0, 0.3), streaming, row("compute_only", 100, 9.9, 1.0)])
lines = {l.split(" | ")[0].split(" (")[0]: l for l in md.splitlines()}
assert "| streaming (period 32) |" in md, md
assert "train ÷ compute-only" in md, md
assert "| 3.00× |" in lines["| ddp"] and "| 1.10× |" in lines["| streaming"], md
assert "9.9" not in lines["| compute_only"] and "| 1.00× |" in lines["| compute_only"], md
assert "| – |" in mod.markdown([row("ddp", 300, 2.0, 0.3)]).splitlines()[2], "no compute-only row: no ratio"
PY
echo "sites_lm rows: $rows resolve"
