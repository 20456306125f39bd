package storage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func txnBatch(pid int64, epoch int16, seq int32, n int) []byte {
	return makeBatch(spec{n: n, pid: pid, idem: true, pepoch: epoch, seq: seq, txn: true})
}

func TestTransactionMarkersMoveTheLastStableOffset(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendT(t, l, makeBatch(spec{n: 2})) // 0-1 plain
	appendT(t, l, txnBatch(7, 0, 0, 3))  // 2-4 open txn of 7
	appendT(t, l, makeBatch(spec{n: 1})) // 5 plain
	appendT(t, l, txnBatch(8, 0, 0, 2))  // 6-7 open txn of 8
	syncT(t, l)
	if got := l.LastStableOffset(); got != 2 {
		t.Fatalf("LSO %d, want 2 (first offset of the oldest open txn)", got)
	}
	data, err := l.ReadCommitted(0, 1<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	if hs := headersOf(t, data); len(hs) != 1 || hs[0].lastOffset() != 1 {
		t.Fatalf("read_committed returned %d batches past the LSO", len(hs))
	}
	// Commit 7: LSO moves to 8's first offset. Abort 8: LSO reaches the end.
	if _, err := l.AppendMarker(7, 0, true, 1); err != nil {
		t.Fatal(err)
	}
	syncT(t, l)
	if got := l.LastStableOffset(); got != 6 {
		t.Fatalf("LSO after commit %d, want 6", got)
	}
	off, err := l.AppendMarker(8, 0, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	syncT(t, l)
	if got, hw := l.LastStableOffset(), l.HighWatermark(); got != hw || hw != off+1 {
		t.Fatalf("LSO %d HW %d after abort marker at %d", got, hw, off)
	}
	ab := l.AbortedTxns(0, hwOf(l))
	if len(ab) != 1 || ab[0] != (AbortedTxn{ProducerID: 8, FirstOffset: 6, LastOffset: off}) {
		t.Fatalf("aborted %+v", ab)
	}
	if got := l.AbortedTxns(off+1, off+10); len(got) != 0 {
		t.Fatalf("aborted txns past their marker: %+v", got)
	}
	// A marker from an older producer epoch (a fenced coordinator) is refused.
	appendT(t, l, txnBatch(9, 3, 0, 1))
	if _, err := l.AppendMarker(9, 2, true, 1); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("stale marker: %v", err)
	}
	// An abort marker at a bumped epoch fences the producer's late writes.
	if _, err := l.AppendMarker(9, 4, false, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(txnBatch(9, 3, 1, 1), AppendOptions{}); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("write from the fenced epoch: %v", err)
	}
	syncT(t, l)
	wantAborted := l.AbortedTxns(0, hwOf(l))
	wantLSO := l.LastStableOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen from the snapshot, and from a full scan (no snapshot).
	for _, name := range []string{"snapshot", "scan"} {
		if name == "scan" {
			os.Remove(filepath.Join(dir, snapshotFileName))
		}
		l2 := openT(t, dir, Options{})
		if got := l2.AbortedTxns(0, hwOf(l2)); len(got) != len(wantAborted) || got[0] != wantAborted[0] || got[1] != wantAborted[1] {
			t.Fatalf("%s: aborted %+v, want %+v", name, got, wantAborted)
		}
		if got := l2.LastStableOffset(); got != wantLSO {
			t.Fatalf("%s: LSO %d, want %d", name, got, wantLSO)
		}
		if err := l2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenTransactionSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	appendT(t, l, txnBatch(5, 0, 0, 2))
	syncT(t, l)
	l.crash()
	l2 := openT(t, dir, Options{})
	if got := l2.LastStableOffset(); got != 0 {
		t.Fatalf("open transaction forgotten after a crash: LSO %d", got)
	}
	if _, err := l2.AppendMarker(5, 0, true, 1); err != nil {
		t.Fatal(err)
	}
	syncT(t, l2)
	if got := l2.LastStableOffset(); got != 3 {
		t.Fatalf("LSO %d after commit", got)
	}
}

func hwOf(l *Log) int64 { return l.HighWatermark() }

func headersOf(t *testing.T, data []byte) []batchHeader {
	t.Helper()
	var out []batchHeader
	for len(data) > 0 {
		h := parseHeader(data)
		out = append(out, h)
		data = data[h.size():]
	}
	return out
}
