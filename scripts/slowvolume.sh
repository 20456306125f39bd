#!/usr/bin/env bash
# The long slow-volume mode: 3 kaas broker processes, each on its own powerfs
# mount of one folder caching names and attributes for 2 s (an NFS client's
# actimeo=2, lookupcache=positive), the volume holding one group-file rename
# in four for 0-6 s; franz-go cooperative and KIP-848 members and a committer
# through 20 coordinator moves (SIGTERM, kill -9, SIGSTOP past --dead-after)
# (internal/slowvolume). Needs root and /dev/fuse (the tests skip otherwise).
# Usage: scripts/slowvolume.sh [extra go test flags]
# KAAS_SLOWVOLUME_MOVES (default 20) and KAAS_SLOWVOLUME_SEED change the run;
# the brokers' logs go to $KAAS_SLOWVOLUME_LOGS, default a fresh temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."

logs="${KAAS_SLOWVOLUME_LOGS:-$(mktemp -d -t kaas-slowvolume-XXXXXX)}"
mkdir -p "$logs"
export KAAS_SLOWVOLUME=long KAAS_SLOWVOLUME_LOGS="$logs"
start=$(date +%s)
status=0
go test -count=1 -v -timeout 40m -run 'TestCoordinatorMovesOnAVolumeThatHoldsRenames$' "$@" ./internal/slowvolume \
  >"$logs/go-test.log" 2>&1 || status=$?
grep -E '^\s*--- (PASS|FAIL|SKIP)|moves_test.go:[0-9]+:' "$logs/go-test.log" || true
echo "== took $(( $(date +%s) - start ))s; exit $status; logs in $logs"
exit "$status"
