#!/usr/bin/env bash
# The long power-cut mode: a 3-broker cluster of kaas OS processes on a powerfs
# mount (internal/powerfs) through at least 50 power cuts and every injected
# disk fault, checking that nothing acknowledged is lost (internal/powercut).
# Needs root and /dev/fuse (the tests skip otherwise).
# Usage: scripts/powercut.sh [--save] [extra go test flags]
#   --save  put the results table into docs/conformance/POWERCUT.md
# KAAS_POWERCUT_CUTS (default 50) and KAAS_POWERCUT_SEED change the run.
# Output (tables, broker logs, go test log) goes to $KAAS_POWERCUT_OUT,
# default a fresh temp dir printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

save=0
if [ "${1:-}" = "--save" ]; then save=1; shift; fi
out="${KAAS_POWERCUT_OUT:-$(mktemp -d -t kaas-powercut-XXXXXX)}"
mkdir -p "$out"
export KAAS_POWERCUT=long KAAS_POWERCUT_OUT="$out"

start=$(date +%s)
status=0
go test -count=1 -v -timeout 60m "$@" ./internal/powercut \
  >"$out/go-test.log" 2>&1 || status=$?
grep -E '^\s*--- (PASS|FAIL|SKIP)|^\s+(powercut|faults)_test.go:[0-9]+: (cut |power cut|offsets|log segments|transaction state|after the faults)' \
  "$out/go-test.log" || true
took=$(( $(date +%s) - start ))
echo "== long mode took ${took}s; exit $status; output in $out"

# The table: one section per scenario the tests wrote, then each test's verdict.
{
  echo "<!-- results begin: written by scripts/powercut.sh --save -->"
  echo "## Latest long run"
  echo
  rev=$(git rev-parse --short HEAD 2>/dev/null || echo "unknown")
  dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo " with local changes" || true)
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), kaas at ${rev}${dirty}, ${took}s, exit status $status."
  for f in "$out"/results-cuts.md "$out"/results-faults.md; do
    if [ -f "$f" ]; then echo; cat "$f"; fi
  done
  echo
  echo "Tests:"
  echo
  grep -E '^--- (PASS|FAIL|SKIP)' "$out/go-test.log" | sed -E 's/^--- ([A-Z]+): ([A-Za-z0-9_]+) \(([0-9.]+s)\)/- `\2`: \1 (\3)/' || true
  echo "<!-- results end -->"
} >"$out/results.md"
cat "$out/results.md"

if [ "$save" = 1 ]; then
  doc=docs/conformance/POWERCUT.md
  awk -v table="$out/results.md" '
    /<!-- results begin/ { while ((getline line < table) > 0) print line; skip = 1; next }
    /<!-- results end -->/ { skip = 0; next }
    !skip { print }
  ' "$doc" >"$out/POWERCUT.md"
  cp "$out/POWERCUT.md" "$doc"
  echo "== saved $doc"
fi
exit $status
