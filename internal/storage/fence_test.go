package storage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestFenceTakeover: two Logs on one directory, the second with a higher
// epoch. Everything the old leader acknowledged survives; what it writes
// after the takeover is refused and never becomes visible.
func TestFenceTakeover(t *testing.T) {
	dir := t.TempDir()
	old := openT(t, dir, Options{LeaderEpoch: 1})
	for i := 0; i < 3; i++ {
		appendT(t, old, makeBatch(spec{n: 2, idem: true, pid: 7, seq: int32(2 * i)}))
	}
	syncT(t, old) // acknowledged: offsets 0..5

	nw := openT(t, dir, Options{LeaderEpoch: 2})
	if nw.EndOffset() != 6 || nw.HighWatermark() != 6 {
		t.Fatalf("new leader: leo %d hw %d", nw.EndOffset(), nw.HighWatermark())
	}

	// The deposed leader still thinks it leads: its write lands in the old
	// segment, past the seal, and its Sync refuses to acknowledge it.
	if _, err := old.Append(makeBatch(spec{n: 2, idem: true, pid: 7, seq: 6}), AppendOptions{}); err != nil {
		t.Fatalf("deposed append (not yet aware): %v", err)
	}
	if err := old.Sync(); !errors.Is(err, ErrFenced) {
		t.Fatalf("deposed Sync: %v, want ErrFenced", err)
	}
	if old.HighWatermark() != 6 {
		t.Fatalf("deposed hw moved to %d", old.HighWatermark())
	}
	if _, err := old.Append(makeBatch(spec{}), AppendOptions{}); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after fence: %v", err)
	}
	if _, err := old.EnforceRetention(); !errors.Is(err, ErrFenced) {
		t.Fatalf("retention after fence: %v", err)
	}

	// The producer's retry goes to the new leader: not a duplicate, since the
	// old leader's copy never became part of the log.
	r := appendT(t, nw, makeBatch(spec{n: 2, idem: true, pid: 7, seq: 6}))
	if r.Duplicate || r.BaseOffset != 6 {
		t.Fatalf("retry on the new leader: %+v", r)
	}
	if r := appendT(t, nw, makeBatch(spec{n: 2, idem: true, pid: 7, seq: 4})); !r.Duplicate || r.BaseOffset != 4 {
		t.Fatalf("the new leader lost the old leader's producer state: %+v", r)
	}
	syncT(t, nw)
	check := func(l *Log) {
		t.Helper()
		got := readAll(t, l)
		if len(got) != 4 {
			t.Fatalf("%d batches, want 4", len(got))
		}
		for i, h := range got {
			wantEpoch := int32(1)
			if i == 3 {
				wantEpoch = 2
			}
			if h.BaseOffset != int64(2*i) || h.LeaderEpoch != wantEpoch {
				t.Fatalf("batch %d: offset %d epoch %d", i, h.BaseOffset, h.LeaderEpoch)
			}
		}
	}
	check(nw)

	if err := old.Close(); err != nil {
		t.Fatalf("closing the deposed log: %v", err)
	}
	if err := nw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, epoch := range []int32{2, 3} { // restart, then another takeover
		l := openT(t, dir, Options{LeaderEpoch: epoch})
		check(l)
		if l.EndOffset() != 8 {
			t.Fatalf("epoch %d: leo %d", epoch, l.EndOffset())
		}
		l.Close()
	}
}

// TestFenceDeposedRoll: a deposed leader whose next append would roll a
// segment is refused before it creates a file.
func TestFenceDeposedRoll(t *testing.T) {
	dir := t.TempDir()
	old := openT(t, dir, Options{LeaderEpoch: 1, SegmentBytes: 100})
	appendT(t, old, makeBatch(spec{n: 3}))
	syncT(t, old)
	nw := openT(t, dir, Options{LeaderEpoch: 2})
	defer nw.Close()
	if _, err := old.Append(makeBatch(spec{n: 3}), AppendOptions{}); !errors.Is(err, ErrFenced) {
		t.Fatalf("deposed roll: %v", err)
	}
	old.Close()
	if n := len(segmentFiles(t, dir)); n != 2 {
		t.Fatalf("%d segment files", n)
	}
}

// TestFenceStraySegment: a segment file a deposed leader created after the
// takeover, continuing exactly where the new leader's log ends, is recognised
// by its batches' old epoch and moved aside on the next open.
func TestFenceStraySegment(t *testing.T) {
	dir := t.TempDir()
	a := openT(t, dir, Options{LeaderEpoch: 1})
	appendT(t, a, makeBatch(spec{n: 2}))
	syncT(t, a)
	a.Close()
	b := openT(t, dir, Options{LeaderEpoch: 2}) // active segment starts at 2
	b.Close()
	// Forge what a deposed epoch-1 leader could leave: a segment at offset 2
	// holding an epoch-1 batch, replacing b's empty one.
	stray := makeBatch(spec{n: 1})
	stray[offBaseOffset+7] = 2
	stray[offLeaderEpoch+3], stray[offLeaderEpoch], stray[offLeaderEpoch+1], stray[offLeaderEpoch+2] = 1, 0, 0, 0
	if err := os.WriteFile(filepath.Join(dir, segmentName(2, logSuffix)), stray, 0o644); err != nil {
		t.Fatal(err)
	}
	c := openT(t, dir, Options{LeaderEpoch: 2})
	defer c.Close()
	if c.EndOffset() != 2 {
		t.Fatalf("deposed leader's batch was accepted: leo %d", c.EndOffset())
	}
}
