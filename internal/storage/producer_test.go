package storage

import (
	"errors"
	"math"
	"testing"
)

func TestIdempotentProducer(t *testing.T) {
	type step struct {
		pid     int64
		epoch   int16
		seq     int32
		n       int
		want    error
		dup     bool
		wantOff int64 // expected base offset (original one for duplicates)
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"in order and duplicates", []step{
			{1, 0, 0, 2, nil, false, 0},
			{1, 0, 2, 3, nil, false, 2},
			{1, 0, 0, 2, nil, true, 0},
			{1, 0, 2, 3, nil, true, 2},
			{1, 0, 5, 1, nil, false, 5},
		}},
		{"gap", []step{{1, 0, 0, 1, nil, false, 0}, {1, 0, 2, 1, ErrOutOfOrderSequence, false, 0}}},
		{"new producer must start at 0", []step{{1, 0, 3, 1, ErrOutOfOrderSequence, false, 0}}},
		{"older epoch", []step{{1, 2, 0, 1, nil, false, 0}, {1, 1, 1, 1, ErrInvalidProducerEpoch, false, 0}}},
		{"newer epoch resets", []step{
			{1, 0, 0, 1, nil, false, 0}, {1, 0, 1, 1, nil, false, 1},
			{1, 1, 2, 1, ErrOutOfOrderSequence, false, 0},
			{1, 1, 0, 1, nil, false, 2},
			{1, 0, 2, 1, ErrInvalidProducerEpoch, false, 0},
		}},
		{"only the last five are remembered", []step{
			{1, 0, 0, 1, nil, false, 0}, {1, 0, 1, 1, nil, false, 1}, {1, 0, 2, 1, nil, false, 2},
			{1, 0, 3, 1, nil, false, 3}, {1, 0, 4, 1, nil, false, 4}, {1, 0, 5, 1, nil, false, 5},
			{1, 0, 1, 1, nil, true, 1},
			{1, 0, 0, 1, ErrOutOfOrderSequence, false, 0},
		}},
		{"producers are independent", []step{
			{1, 0, 0, 1, nil, false, 0}, {2, 0, 0, 1, nil, false, 1}, {1, 0, 1, 1, nil, false, 2}, {2, 0, 0, 1, nil, true, 1},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := openT(t, t.TempDir(), Options{})
			defer l.Close()
			for i, s := range tc.steps {
				leo := l.EndOffset()
				r, err := l.Append(makeBatch(spec{idem: true, pid: s.pid, pepoch: s.epoch, seq: s.seq, n: s.n}), AppendOptions{})
				if !errors.Is(err, s.want) {
					t.Fatalf("step %d: err %v, want %v", i, err, s.want)
				}
				if err != nil {
					if l.EndOffset() != leo {
						t.Fatalf("step %d: rejected batch moved the log end", i)
					}
					continue
				}
				if r.Duplicate != s.dup || r.BaseOffset != s.wantOff || r.LastOffset != s.wantOff+int64(s.n)-1 {
					t.Fatalf("step %d: %+v, want dup=%v base %d", i, r, s.dup, s.wantOff)
				}
				if s.dup && l.EndOffset() != leo {
					t.Fatalf("step %d: duplicate was written", i)
				}
			}
		})
	}
}

func TestProducerSequenceWraps(t *testing.T) {
	st := &producerState{epoch: 0, batches: []producerBatch{{firstSeq: math.MaxInt32 - 3, lastSeq: math.MaxInt32 - 1}}}
	h := batchHeader{ProducerID: 1, BaseSequence: math.MaxInt32, LastOffsetDelta: 2}
	if dup, err := checkProducer(st, &h); dup != nil || err != nil {
		t.Fatalf("wrap: %v %v", dup, err)
	}
	st = applyProducer(st, &h)
	if got := st.batches[len(st.batches)-1].lastSeq; got != 1 {
		t.Fatalf("last sequence after wrap %d, want 1", got)
	}
	next := batchHeader{ProducerID: 1, BaseSequence: 2}
	if _, err := checkProducer(st, &next); err != nil {
		t.Fatalf("after wrap: %v", err)
	}
}

func TestProducerStateSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{})
	for i := 0; i < 7; i++ {
		appendT(t, l, makeBatch(spec{idem: true, pid: 42, pepoch: 3, seq: int32(i)}))
	}
	l.Close()
	l = openT(t, dir, Options{})
	defer l.Close()
	if r := appendT(t, l, makeBatch(spec{idem: true, pid: 42, pepoch: 3, seq: 5})); !r.Duplicate || r.BaseOffset != 5 {
		t.Fatalf("duplicate after reopen: %+v", r)
	}
	if _, err := l.Append(makeBatch(spec{idem: true, pid: 42, pepoch: 2, seq: 7}), AppendOptions{}); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("old epoch after reopen: %v", err)
	}
	// A request mixing a duplicate with a new batch is refused whole.
	req := append(makeBatch(spec{idem: true, pid: 42, pepoch: 3, seq: 6}), makeBatch(spec{idem: true, pid: 42, pepoch: 3, seq: 7})...)
	if _, err := l.Append(req, AppendOptions{}); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("mixed request: %v", err)
	}
	// Two consecutive batches of one producer in one request.
	req = append(makeBatch(spec{idem: true, pid: 42, pepoch: 3, seq: 7}), makeBatch(spec{idem: true, pid: 42, pepoch: 3, seq: 8})...)
	if r := appendT(t, l, req); r.BaseOffset != 7 || r.LastOffset != 8 {
		t.Fatalf("two-batch request: %+v", r)
	}
}
