#!/usr/bin/env bash
# The long conformance mode: every real client × every chaos scenario on a
# 3-broker cluster of kaas OS processes (internal/conformance), and the Java
# ETL, Kafka Streams and Kafka Connect tests.
# Usage: scripts/conformance.sh [--reference] [--save | --merge] [extra go test flags]
#   --reference  run the same matrix against the Apache Kafka 4.4.0 reference
#                cluster (scripts/kafka-reference.sh; fetched with Maven on
#                first use) instead of kaas
#   --save       copy the results table to docs/conformance/RESULTS.md, or
#                with --reference to docs/conformance/RESULTS-kafka-4.4.0.md,
#                and join the two into docs/conformance/RESULTS-side-by-side.md
#   --protocol   instead of the matrix, send the same raw group requests to
#                kaas and to the reference cluster and compare the answers
#                (TestGroupAnswersMatchKafka: both clusters at once; the
#                table of answers goes to PROTOCOL.md in the output folder)
#   --merge      for a run of some rows (a -run pattern): replace those rows of
#                the saved table (the same client and scenario), keep the
#                others, add a line saying which rows came from which run,
#                and join the two tables again; a run that failed is not merged
# Output (table, broker and client logs) goes to $KAAS_CONFORMANCE_OUT,
# default a fresh temp dir printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

save=0
pattern='TestConformance|TestJava|TestKafkaConnect'
saved=docs/conformance/RESULTS.md
export KAAS_CONFORMANCE_TARGET=kaas
while [ $# -gt 0 ]; do
  case "$1" in
  --save) save=1; shift ;;
  --merge) save=2; shift ;;
  --protocol)
    export KAAS_CONFORMANCE_PROTOCOL=1
    pattern='TestGroupAnswersMatchKafka'
    scripts/kafka-reference.sh fetch
    shift ;;
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
go test -count=1 -v -timeout 120m -run "$pattern" "$@" ./internal/conformance \
  >"$out/go-test.log" 2>&1 || status=$?
grep -E '^\s*--- (PASS|FAIL|SKIP)' "$out/go-test.log" || true
echo "== long mode ($KAAS_CONFORMANCE_TARGET) took $(( $(date +%s) - start ))s; exit $status; output in $out"
if [ -f "$out/RESULTS.md" ]; then
  cat "$out/RESULTS.md"
  if [ "$save" = 2 ] && [ "$status" = 0 ] && [ -f "$saved" ]; then
    merged="$out/RESULTS-merged.md"
    note="The rows of a run of \`scripts/conformance.sh $*\` alone ($(date -u +%Y-%m-%d\ %H:%M)) replaced the rows of the same client and scenario."
    # Rows are keyed by their client and scenario cells; the new run's rows
    # replace the saved ones in place, new keys go after the last row, and
    # the note goes before the table.
    awk -v note="$note" '
      function key(line,   f) { split(line, f, "|"); gsub(/^ +| +$/, "", f[2]); gsub(/^ +| +$/, "", f[3]); return f[2] "|" f[3] }
      function row(line) { return line ~ /^\| / && line !~ /^\| client \|/ }
      FNR == NR { if (row($0)) { k = key($0); fresh[k] = $0; order[++n] = k }; next }
      row($0) { k = key($0); if (k in fresh) { print fresh[k]; used[k] = 1 } else print; last = FNR; next }
      /^\| client \|/ && !noted { print note; print ""; noted = 1 }
      function rest(   i) { for (i = 1; i <= n; i++) if (!(order[i] in used)) { print fresh[order[i]]; used[order[i]] = 1 } }
      { if (last && last == FNR - 1) rest(); print }
      END { if (last && last == FNR) rest() }
    ' "$out/RESULTS.md" "$saved" >"$merged"
    cp "$merged" "$saved"
    echo "== merged into $saved"
  elif [ "$save" = 2 ]; then
    echo "== not merged: the run failed (exit $status) or $saved is missing; the saved table is unchanged"
  elif [ "$save" = 1 ]; then
    cp "$out/RESULTS.md" "$saved"
    echo "== saved $saved"
  fi
  if [ "$save" != 0 ] && [ -f "$saved" ]; then
    # kaas beside Kafka, from the two saved tables.
    if [ -f docs/conformance/RESULTS.md ] && [ -f docs/conformance/RESULTS-kafka-4.4.0.md ]; then
      go test -count=1 -run 'TestSideBySide$' ./internal/conformance -args -update-side-by-side >/dev/null
      echo "== saved docs/conformance/RESULTS-side-by-side.md"
    fi
  fi
fi
exit $status
