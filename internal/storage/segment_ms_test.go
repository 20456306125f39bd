package storage

import (
	"testing"
	"time"
)

// Defect: segment.ms was accepted and ignored: segments rolled by size
// only. Like Kafka, a batch whose timestamp is segment.ms or more past the
// first batch of the active segment now starts a new segment.
func TestSegmentMsRollsBySegmentAge(t *testing.T) {
	dir := t.TempDir()
	now := time.UnixMilli(1_000_000)
	l := openT(t, dir, Options{SegmentMs: 2000, RetentionMs: -1, RetentionBytes: -1, Now: func() time.Time { return now }})
	defer l.Close()
	appendT(t, l, makeBatch(spec{n: 1, baseTs: 1_000_000}))
	appendT(t, l, makeBatch(spec{n: 1, baseTs: 1_001_000})) // 1 s in: same segment
	if got := len(segmentFiles(t, dir)); got != 1 {
		t.Fatalf("%d segments after 1 s, want 1", got)
	}
	appendT(t, l, makeBatch(spec{n: 1, baseTs: 1_002_500})) // 2.5 s in: rolls
	if got := len(segmentFiles(t, dir)); got != 2 {
		t.Fatalf("%d segments after 2.5 s, want 2", got)
	}
	appendT(t, l, makeBatch(spec{n: 1, baseTs: 1_003_000})) // 0.5 s into the new one
	if got := len(segmentFiles(t, dir)); got != 2 {
		t.Fatalf("%d segments, want 2", got)
	}
	syncT(t, l)
	if l.EndOffset() != 4 {
		t.Fatalf("end %d", l.EndOffset())
	}
}
