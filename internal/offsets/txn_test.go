package offsets

import (
	"context"
	"testing"
)

func TestStagedOffsetsInvisibleUntilCommitAndDurable(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f := Fence{1, 1}
	tp0, tp1 := TP{"orders", 0}, TP{"orders/x", 1}
	if err := s.Commit(ctx, "g", f, map[TP]Offset{tp0: {Offset: 5, LeaderEpoch: -1, ExpireTimestamp: -1}}); err != nil {
		t.Fatal(err)
	}
	stage := func(pid int64, off int64) {
		t.Helper()
		err := s.Stage(ctx, "g", f, pid, Staged{ProducerEpoch: 0, TransactionalID: "tx",
			Offsets: map[TP]Offset{tp0: {Offset: off, LeaderEpoch: 3, Metadata: "m"}, tp1: {Offset: off + 1, LeaderEpoch: -1}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	stage(7, 100)
	stage(8, 200)
	got, _ := s.Load("g", nil)
	if got[tp0].Offset != 5 || len(got) != 1 {
		t.Fatalf("staged offsets visible before commit: %+v", got)
	}
	// Another broker (a fresh store) sees the staged state on disk.
	s2, _ := Open(Options{Dir: dir})
	staged, err := s2.StagedTxns("g", nil)
	if err != nil || len(staged) != 2 || staged[7].Offsets[tp0].Offset != 100 || staged[7].Offsets[tp0].Metadata != "m" || staged[7].TransactionalID != "tx" {
		t.Fatalf("staged on disk: %+v %v", staged, err)
	}
	s2.Close()
	if found, err := s.EndTxn(ctx, "g", f, 7, true); err != nil || !found {
		t.Fatalf("commit: %v %v", found, err)
	}
	if found, err := s.EndTxn(ctx, "g", f, 8, false); err != nil || !found {
		t.Fatalf("abort: %v %v", found, err)
	}
	if found, _ := s.EndTxn(ctx, "g", f, 9, true); found {
		t.Fatal("nothing staged for 9")
	}
	s3, _ := Open(Options{Dir: dir})
	defer s3.Close()
	got, _ = s3.Load("g", nil)
	if got[tp0].Offset != 100 || got[tp0].LeaderEpoch != 3 || got[tp1].Offset != 101 {
		t.Fatalf("after commit+abort, from disk: %+v", got)
	}
	if st, _ := s3.StagedTxns("g", nil); len(st) != 0 {
		t.Fatalf("staged left after the transactions ended: %+v", st)
	}
	s.Close()
}

func TestCommitAsyncKeepsQueueOrder(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var waits []func(context.Context) error
	for i := range 200 {
		w, err := s.CommitAsync("g", Fence{1, 1}, map[TP]Offset{{"t", 0}: {Offset: int64(i), LeaderEpoch: -1, ExpireTimestamp: -1}})
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, w)
	}
	for _, w := range waits {
		if err := w(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	s2, _ := Open(Options{Dir: dir})
	defer s2.Close()
	got, _ := s2.Load("g", nil)
	if got[TP{"t", 0}].Offset != 199 {
		t.Fatalf("queued commits applied out of order: last is %d", got[TP{"t", 0}].Offset)
	}
}
