package storage

import (
	"testing"
	"time"
)

// Defect: time retention never deleted the active segment, so a topic that
// receives less than segment.bytes per retention period kept its data for
// ever. Seen side by side: retention.ms=10000 and 11 records, Kafka's log
// start offset was 11 within minutes, kaas's still 0 after 16 minutes.
// Like Kafka, a log whose every segment is past retention now rolls a new
// empty active segment and deletes them all; the log start offset becomes
// the end offset, and appends go on from there.
func TestTimeRetentionDeletesTheActiveSegmentOfAQuietLog(t *testing.T) {
	dir := t.TempDir()
	now := time.UnixMilli(1_000_000)
	clock := func() time.Time { return now }
	o := Options{RetentionMs: 10_000, RetentionBytes: -1, Now: clock}
	l := openT(t, dir, o)
	defer l.Close()
	for i := range 11 {
		appendT(t, l, makeBatch(spec{n: 1, baseTs: 1_000_000 + int64(i)}))
	}
	syncT(t, l)
	if n, err := l.EnforceRetention(); n != 0 || err != nil {
		t.Fatalf("within retention: deleted %d, %v", n, err)
	}
	now = now.Add(20 * time.Second)
	n, err := l.EnforceRetention()
	if err != nil || n != 1 {
		t.Fatalf("past retention: deleted %d segments, %v", n, err)
	}
	if l.LogStartOffset() != 11 || l.EndOffset() != 11 {
		t.Fatalf("log start %d, end %d; want 11 and 11", l.LogStartOffset(), l.EndOffset())
	}
	if got := len(segmentFiles(t, dir)); got != 1 {
		t.Fatalf("%d segment files left, want the new empty active one", got)
	}
	if r := appendT(t, l, makeBatch(spec{n: 1, baseTs: now.UnixMilli()})); r.BaseOffset != 11 {
		t.Fatalf("the next append got offset %d, want 11", r.BaseOffset)
	}
	syncT(t, l)
	if n, err := l.EnforceRetention(); n != 0 || err != nil {
		t.Fatalf("a fresh record: deleted %d, %v", n, err)
	}
}
