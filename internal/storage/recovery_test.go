package storage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCrashRecovery: synced batches survive a crash that tears or pollutes the
// unsynced tail; nothing after the cut is kept; appends continue at the right
// offset. Run both as a restart of the same leader and as a takeover.
func TestCrashRecovery(t *testing.T) {
	for _, tc := range []struct {
		name      string
		damage    func(t *testing.T, path string, synced int64)
		nextEpoch int32
	}{
		{"torn mid-batch", func(t *testing.T, path string, synced int64) {
			if err := os.Truncate(path, synced+70); err != nil {
				t.Fatal(err)
			}
		}, 1},
		{"torn mid-header", func(t *testing.T, path string, synced int64) { os.Truncate(path, synced+20) }, 1},
		{"garbage appended", func(t *testing.T, path string, synced int64) {
			os.Truncate(path, synced)
			f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			f.Write([]byte("\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01\x00garbage garbage garbage garbage garbage garbage garbage garbage"))
			f.Close()
		}, 1},
		{"unsynced batch corrupted", func(t *testing.T, path string, synced int64) {
			f, _ := os.OpenFile(path, os.O_WRONLY, 0)
			f.WriteAt([]byte{0xde, 0xad}, synced+65)
			f.Close()
		}, 1},
		{"torn, takeover", func(t *testing.T, path string, synced int64) { os.Truncate(path, synced+70) }, 2},
		{"garbage, takeover", func(t *testing.T, path string, synced int64) {
			os.Truncate(path, synced)
			f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			f.Write(make([]byte, 300))
			f.Close()
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openT(t, dir, Options{LeaderEpoch: 1, SegmentBytes: 1 << 20, indexInterval: 100})
			for i := 0; i < 5; i++ {
				appendT(t, l, makeBatch(spec{n: 2, idem: true, pid: 9, seq: int32(2 * i)}))
			}
			syncT(t, l)
			seg := filepath.Join(dir, segmentName(0, logSuffix))
			synced := fileSize(t, seg)
			for i := 5; i < 8; i++ { // never synced
				appendT(t, l, makeBatch(spec{n: 2, idem: true, pid: 9, seq: int32(2 * i)}))
			}
			l.crash()
			tc.damage(t, seg, synced)

			l = openT(t, dir, Options{LeaderEpoch: tc.nextEpoch, SegmentBytes: 1 << 20, indexInterval: 100})
			defer l.Close()
			if l.EndOffset() != 10 || l.HighWatermark() != 10 {
				t.Fatalf("after recovery: leo %d hw %d, want 10", l.EndOffset(), l.HighWatermark())
			}
			if got := readAll(t, l); len(got) != 5 {
				t.Fatalf("recovered %d batches, want 5", len(got))
			}
			// Producer state was rebuilt from the log: seq 10 is next, 8 is a duplicate.
			r := appendT(t, l, makeBatch(spec{n: 2, idem: true, pid: 9, seq: 8}))
			if !r.Duplicate || r.BaseOffset != 8 {
				t.Fatalf("resend of the last synced batch: %+v", r)
			}
			r = appendT(t, l, makeBatch(spec{n: 2, idem: true, pid: 9, seq: 10}))
			if r.Duplicate || r.BaseOffset != 10 {
				t.Fatalf("next batch: %+v", r)
			}
			syncT(t, l)
			if got := readAll(t, l); len(got) != 6 {
				t.Fatalf("%d batches after append", len(got))
			}
		})
	}
}

func TestOpenEpochRules(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{LeaderEpoch: 5})
	appendT(t, l, makeBatch(spec{}))
	l.Close()
	if _, err := Open(dir, Options{LeaderEpoch: 4}); !errors.Is(err, ErrFenced) {
		t.Fatalf("open with an older epoch: %v", err)
	}
	// Same epoch: a restart; it continues in the same segment.
	l = openT(t, dir, Options{LeaderEpoch: 5})
	appendT(t, l, makeBatch(spec{}))
	l.Close()
	if n := len(segmentFiles(t, dir)); n != 1 {
		t.Fatalf("%d segments after a same-epoch restart", n)
	}
	// A corrupt epoch file is an error, not a silent reset.
	os.WriteFile(filepath.Join(dir, epochFileName), []byte("KLE1junk"), 0o644)
	if _, err := Open(dir, Options{LeaderEpoch: 9}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt epoch file: %v", err)
	}
}

func TestProducerSnapshotNotTrustedPastLog(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	for i := 0; i < 3; i++ {
		appendT(t, l, makeBatch(spec{idem: true, pid: 1, seq: int32(i)}))
	}
	l.Close() // snapshot covers offsets 0..2
	// The log loses its last batch (and would be rewritten differently).
	seg := filepath.Join(dir, segmentName(0, logSuffix))
	os.Truncate(seg, fileSize(t, seg)-5)
	l = openT(t, dir, Options{})
	defer l.Close()
	if l.EndOffset() != 2 {
		t.Fatalf("leo %d", l.EndOffset())
	}
	// seq 2 is no longer in the log: it is new, not a duplicate.
	r := appendT(t, l, makeBatch(spec{idem: true, pid: 1, seq: 2}))
	if r.Duplicate || r.BaseOffset != 2 {
		t.Fatalf("%+v", r)
	}
}

func TestProducerSnapshotRewrittenLog(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendT(t, l, makeBatch(spec{idem: true, pid: 1, seq: 0}))
	appendT(t, l, makeBatch(spec{idem: true, pid: 1, seq: 1}))
	l.Close()
	snap, _ := os.ReadFile(filepath.Join(dir, snapshotFileName))
	// Another history at the same offsets (a different producer).
	os.Remove(filepath.Join(dir, segmentName(0, logSuffix)))
	os.Remove(filepath.Join(dir, segmentName(0, indexSuffix)))
	l = openT(t, dir, Options{})
	appendT(t, l, makeBatch(spec{idem: true, pid: 2, seq: 0}))
	appendT(t, l, makeBatch(spec{idem: true, pid: 2, seq: 1}))
	l.Close()
	os.WriteFile(filepath.Join(dir, snapshotFileName), snap, 0o644) // stale snapshot
	l = openT(t, dir, Options{})
	defer l.Close()
	if _, err := l.Append(makeBatch(spec{idem: true, pid: 1, seq: 2}), AppendOptions{}); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("stale snapshot was trusted: %v", err)
	}
	if r := appendT(t, l, makeBatch(spec{idem: true, pid: 2, seq: 1})); !r.Duplicate {
		t.Fatalf("state not rebuilt from the log: %+v", r)
	}
}
