#!/usr/bin/env bash
# docs/config.md is the output of `lowcomm config keys --markdown`: the key reference is generated
# from the declarations, and this fails when someone changes a key without regenerating it.
# Usage: config_keys_doc.sh LOWCOMM SOURCE_DIR
set -euo pipefail
lowcomm=$1 src=$2
if ! diff -u "$src/docs/config.md" <("$lowcomm" config keys --markdown); then
  echo "FAIL: docs/config.md differs from the declared keys; regenerate it:"
  echo "  build/lowcomm config keys --markdown > docs/config.md"
  exit 1
fi
# Every key the plain listing prints is in the page, and the listing is not empty.
n=$("$lowcomm" config keys | wc -l)
[ "$n" -gt 100 ] || { echo "FAIL: only $n keys listed"; exit 1; }
"$lowcomm" config keys | awk '{print $1}' | while read -r key; do
  grep -q "| \`$key\` |" "$src/docs/config.md" || { echo "FAIL: key $key not in docs/config.md"; exit 1; }
done
echo "docs/config.md lists the $n declared keys"
