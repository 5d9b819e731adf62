# Sourced by the tools' test scripts: PY = the first of $PYTHON, python3, /usr/bin/python3 that
# imports matplotlib (exit 77, skipped, when none does); TMP = a temp dir removed at exit unless
# KEEP_TMP is set; pass/fail helpers counting failures in FAILS; expect_plot_error runs $PLOT.
PY=""
for cand in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import matplotlib' >/dev/null 2>&1; then
    PY=$(command -v "$cand"); break
  fi
done
if [ -z "$PY" ]; then echo "SKIP: no python3 with matplotlib"; exit 77; fi

TMP=$(mktemp -d)
[ -n "${KEEP_TMP:-}" ] || trap 'rm -rf "$TMP"' EXIT
FAILS=0
pass() { echo "ok   - $1"; }
fail() { echo "FAIL - $1"; FAILS=$((FAILS + 1)); }

# expect_plot_error NAME PATTERN ARGS...: `$PY $PLOT ARGS` must exit non-zero with PATTERN in its
# message and no traceback.
expect_plot_error() {
  local name=$1 pat=$2; shift 2
  "$PY" "$PLOT" "$@" >"$TMP/msg" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ] && grep -qF -- "$pat" "$TMP/msg" && ! grep -q Traceback "$TMP/msg"; then
    pass "$name: $(head -1 "$TMP/msg")"
  else fail "$name: exit $rc, expected message containing '$pat', got: $(cat "$TMP/msg")"; fi
}
