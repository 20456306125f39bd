#!/usr/bin/env bash
# The long conformance mode: every real client × every chaos scenario on a
# 3-broker cluster of kaas OS processes (internal/conformance), and the Java
# ETL, Kafka Streams and Kafka Connect tests.
# Usage: scripts/conformance.sh [--reference] [--save] [extra go test flags]
#   --reference  run the same matrix against the Apache Kafka 4.4.0 reference
#                cluster (scripts/kafka-reference.sh; fetched with Maven on
#                first use) instead of kaas
#   --save       copy the results table to docs/conformance/RESULTS.md, or
#                with --reference to docs/conformance/RESULTS-kafka-4.4.0.md,
#                and join the two into docs/conformance/RESULTS-side-by-side.md
# Output (table, broker and client logs) goes to $KAAS_CONFORMANCE_OUT,
# default a fresh temp dir printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

save=0
saved=docs/conformance/RESULTS.md
export KAAS_CONFORMANCE_TARGET=kaas
while [ $# -gt 0 ]; do
  case "$1" in
  --save) save=1; shift ;;
  --reference)
    KAAS_CONFORMANCE_TARGET=kafka
    saved=docs/conformance/RESULTS-kafka-4.4.0.md
    scripts/kafka-reference.sh fetch
    shift ;;
  *) break ;;
  esac
done
out="${KAAS_CONFORMANCE_OUT:-$(mktemp -d -t kaas-conformance-XXXXXX)}"
mkdir -p "$out"
export KAAS_CONFORMANCE=long KAAS_CONFORMANCE_OUT="$out"

start=$(date +%s)
status=0
go test -count=1 -v -timeout 120m -run 'TestConformance|TestJava|TestKafkaConnect' "$@" ./internal/conformance \
  >"$out/go-test.log" 2>&1 || status=$?
grep -E '^\s*--- (PASS|FAIL|SKIP)' "$out/go-test.log" || true
echo "== long mode ($KAAS_CONFORMANCE_TARGET) took $(( $(date +%s) - start ))s; exit $status; output in $out"
if [ -f "$out/RESULTS.md" ]; then
  cat "$out/RESULTS.md"
  if [ "$save" = 1 ]; then
    cp "$out/RESULTS.md" "$saved"
    echo "== saved $saved"
    # kaas beside Kafka, from the two saved tables.
    if [ -f docs/conformance/RESULTS.md ] && [ -f docs/conformance/RESULTS-kafka-4.4.0.md ]; then
      go test -count=1 -run 'TestSideBySide$' ./internal/conformance -args -update-side-by-side >/dev/null
      echo "== saved docs/conformance/RESULTS-side-by-side.md"
    fi
  fi
fi
exit $status
