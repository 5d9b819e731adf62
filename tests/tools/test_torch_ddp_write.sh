#!/usr/bin/env bash
# bench/torch_ddp/train.py writes its result whole or not at all (a temporary file renamed over
# --out), but an --out that exists and is not a regular file is written in place: as root, a
# rename over /dev/null once turned the device into a file. Checked on a FIFO (a reader gets the
# JSON and the FIFO stays one) and on a regular file (no temporary file left).
# usage: test_torch_ddp_write.sh TRAIN_PY
set -euo pipefail
TRAIN=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$TRAIN" "$tmp" <<'PY'
import importlib.util, json, os, stat, sys, threading
spec = importlib.util.spec_from_file_location("train", sys.argv[1])
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
d = sys.argv[2]
fifo = os.path.join(d, "fifo")
os.mkfifo(fifo)
got = []
reader = threading.Thread(target=lambda: got.append(open(fifo).read()), daemon=True)
reader.start()
train.write_json(fifo, {"a": 1})
reader.join(10)
assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced by a file"
assert got and json.loads(got[0]) == {"a": 1}, f"the reader got {got!r}"
out = os.path.join(d, "row.json")
train.write_json(out, {"b": 2})
assert json.load(open(out)) == {"b": 2}
assert sorted(os.listdir(d)) == ["fifo", "row.json"], os.listdir(d)
PY
echo "torch_ddp train.py: a FIFO written in place, a file whole"
