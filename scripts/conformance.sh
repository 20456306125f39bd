#!/usr/bin/env bash
# The long conformance mode: every real client × every chaos scenario on a
# 3-broker cluster of kaas OS processes (internal/conformance).
# Usage: scripts/conformance.sh [--save] [extra go test flags]
#   --save  copy the results table to docs/conformance/RESULTS.md
# Output (table, broker and client logs) goes to $KAAS_CONFORMANCE_OUT,
# default a fresh temp dir printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

save=0
if [ "${1:-}" = "--save" ]; then save=1; shift; fi
out="${KAAS_CONFORMANCE_OUT:-$(mktemp -d -t kaas-conformance-XXXXXX)}"
mkdir -p "$out"
export KAAS_CONFORMANCE=long KAAS_CONFORMANCE_OUT="$out"

start=$(date +%s)
status=0
go test -count=1 -v -timeout 90m -run 'TestConformance' "$@" ./internal/conformance \
  >"$out/go-test.log" 2>&1 || status=$?
grep -E '^\s*--- (PASS|FAIL|SKIP)' "$out/go-test.log" || true
echo "== long mode took $(( $(date +%s) - start ))s; exit $status; output in $out"
if [ -f "$out/RESULTS.md" ]; then
  cat "$out/RESULTS.md"
  if [ "$save" = 1 ]; then
    cp "$out/RESULTS.md" docs/conformance/RESULTS.md
    echo "== saved docs/conformance/RESULTS.md"
  fi
fi
exit $status
