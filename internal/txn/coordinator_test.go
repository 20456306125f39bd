package txn

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/offsets"
)

// fakeMarkers records the markers a coordinator writes; fail makes them fail.
type fakeMarkers struct {
	mu     sync.Mutex
	parts  []string
	groups []string
	fail   error
}

func (f *fakeMarkers) Partitions(_ context.Context, pid int64, epoch int16, commit bool, tps []TP) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	for _, tp := range tps {
		f.parts = append(f.parts, markerString(tp.Topic, pid, epoch, commit))
	}
	return nil
}

func (f *fakeMarkers) Groups(_ context.Context, pid int64, epoch int16, commit bool, groups []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	for _, g := range groups {
		f.groups = append(f.groups, markerString(g, pid, epoch, commit))
	}
	return nil
}

func markerString(what string, pid int64, epoch int16, commit bool) string {
	k := "abort"
	if commit {
		k = "commit"
	}
	return what + ":" + k
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newCoord(t *testing.T, dir string, m Markers, fence *offsets.Fence, clk *clock) *Coordinator {
	t.Helper()
	next := int64(100)
	var mu sync.Mutex
	c, err := New(Config{Me: "kaas-0", Dir: dir, Grant: func(string) (offsets.Fence, bool) { return *fence, true }, Markers: m, Now: clk.now,
		NewProducerID: func() (int64, error) { mu.Lock(); defer mu.Unlock(); next++; return next, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLifecycleCommitAbortAndRetries(t *testing.T) {
	dir := t.TempDir()
	m := &fakeMarkers{}
	f := offsets.Fence{ControllerEpoch: 1, AssignmentVersion: 1}
	clk := &clock{time.Unix(1000, 0)}
	c := newCoord(t, dir, m, &f, clk)
	ctx := context.Background()
	r, err := c.InitProducerID(ctx, "tx", time.Minute, -1, -1)
	if err != nil || r.ProducerID != 101 || r.ProducerEpoch != 0 {
		t.Fatalf("init: %+v %v", r, err)
	}
	if err := c.AddPartitions(ctx, "tx", r.ProducerID, r.ProducerEpoch, []TP{{"out", 0}, {"out", 1}}); err != nil {
		t.Fatal(err)
	}
	if err := c.AddOffsets(ctx, "tx", r.ProducerID, r.ProducerEpoch, "g1"); err != nil {
		t.Fatal(err)
	}
	if err := c.EndTxn(ctx, "tx", r.ProducerID, r.ProducerEpoch, true); err != nil {
		t.Fatal(err)
	}
	if strings.Join(m.parts, ",") != "out:commit,out:commit" || strings.Join(m.groups, ",") != "g1:commit" {
		t.Fatalf("markers %v %v", m.parts, m.groups)
	}
	// A retried commit of a completed transaction succeeds; an abort of it is refused.
	if err := c.EndTxn(ctx, "tx", r.ProducerID, r.ProducerEpoch, true); err != nil {
		t.Fatalf("retried commit: %v", err)
	}
	if err := c.EndTxn(ctx, "tx", r.ProducerID, r.ProducerEpoch, false); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("abort after commit: %v", err)
	}
	// Wrong producer id, and a fenced epoch.
	if err := c.AddPartitions(ctx, "tx", 999, 0, []TP{{"out", 0}}); !errors.Is(err, ErrInvalidMapping) {
		t.Fatalf("wrong pid: %v", err)
	}
	r2, err := c.InitProducerID(ctx, "tx", time.Minute, -1, -1)
	if err != nil || r2.ProducerEpoch != 1 || r2.ProducerID != r.ProducerID {
		t.Fatalf("re-init: %+v %v", r2, err)
	}
	if err := c.AddPartitions(ctx, "tx", r.ProducerID, 0, []TP{{"out", 0}}); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("old epoch: %v", err)
	}
	// An epoch ahead of the coordinator's is fenced too, as Kafka answers
	// (PRODUCER_FENCED, not INVALID_PRODUCER_ID_MAPPING; the reference
	// cluster, TestGroupAnswersMatchKafka's transaction-errors case).
	if err := c.AddOffsets(ctx, "tx", r2.ProducerID, r2.ProducerEpoch+1, "g1"); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("AddOffsets with an epoch ahead: %v, want fenced", err)
	}
	if err := c.AddPartitions(ctx, "tx", r2.ProducerID, r2.ProducerEpoch+1, []TP{{"out", 0}}); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("AddPartitions with an epoch ahead: %v, want fenced", err)
	}
	if _, err := c.InitProducerID(ctx, "tx", 16*time.Minute, -1, -1); !errors.Is(err, ErrInvalidTimeout) {
		t.Fatalf("timeout over the max: %v", err)
	}
}

func TestNewSessionAbortsTheOpenTransactionAtABumpedEpoch(t *testing.T) {
	m := &fakeMarkers{}
	f := offsets.Fence{ControllerEpoch: 1, AssignmentVersion: 1}
	c := newCoord(t, t.TempDir(), m, &f, &clock{time.Unix(1000, 0)})
	ctx := context.Background()
	r, _ := c.InitProducerID(ctx, "tx", time.Minute, -1, -1)
	c.AddPartitions(ctx, "tx", r.ProducerID, r.ProducerEpoch, []TP{{"out", 3}})
	r2, err := c.InitProducerID(ctx, "tx", time.Minute, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(m.parts, ",") != "out:abort" {
		t.Fatalf("the open transaction was not aborted: %v", m.parts)
	}
	if r2.ProducerEpoch != r.ProducerEpoch+2 {
		t.Fatalf("epoch %d, want %d (one bump to abort, one for the new session)", r2.ProducerEpoch, r.ProducerEpoch+2)
	}
}

func TestPreparedTransactionIsFinishedByTheNextCoordinator(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	f := offsets.Fence{ControllerEpoch: 1, AssignmentVersion: 1}
	broken := &fakeMarkers{fail: errors.New("leader unreachable")}
	a := newCoord(t, dir, broken, &f, &clock{time.Unix(1000, 0)})
	r, _ := a.InitProducerID(ctx, "tx", time.Minute, -1, -1)
	a.AddPartitions(ctx, "tx", r.ProducerID, r.ProducerEpoch, []TP{{"out", 0}})
	if err := a.EndTxn(ctx, "tx", r.ProducerID, r.ProducerEpoch, true); !errors.Is(err, ErrConcurrent) {
		t.Fatalf("EndTxn with failing markers: %v", err)
	}
	// The decision is on disk: a new coordinator (after a move) completes it.
	f2 := offsets.Fence{ControllerEpoch: 1, AssignmentVersion: 2}
	m := &fakeMarkers{}
	b := newCoord(t, dir, m, &f2, &clock{time.Unix(1001, 0)})
	b.Sweep(ctx, true)
	if strings.Join(m.parts, ",") != "out:commit" {
		t.Fatalf("prepared commit not finished: %v", m.parts)
	}
	recs, _ := b.Describe([]string{"tx"})
	if recs["tx"].State != CompleteCommit {
		t.Fatalf("state %s", recs["tx"].State)
	}
	// The old coordinator, holding an older fence, can no longer write.
	if err := a.AddPartitions(ctx, "tx", r.ProducerID, r.ProducerEpoch, []TP{{"out", 1}}); !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("write under an older fence: %v", err)
	}
}

func TestTimedOutTransactionIsAborted(t *testing.T) {
	m := &fakeMarkers{}
	f := offsets.Fence{ControllerEpoch: 1, AssignmentVersion: 1}
	clk := &clock{time.Unix(1000, 0)}
	c := newCoord(t, t.TempDir(), m, &f, clk)
	ctx := context.Background()
	r, _ := c.InitProducerID(ctx, "tx", 5*time.Second, -1, -1)
	c.AddPartitions(ctx, "tx", r.ProducerID, r.ProducerEpoch, []TP{{"out", 0}})
	clk.t = clk.t.Add(4 * time.Second)
	c.Sweep(ctx, false)
	if len(m.parts) != 0 {
		t.Fatal("aborted before the timeout")
	}
	clk.t = clk.t.Add(2 * time.Second)
	c.Sweep(ctx, false)
	if strings.Join(m.parts, ",") != "out:abort" {
		t.Fatalf("not aborted after the timeout: %v", m.parts)
	}
	if err := c.EndTxn(ctx, "tx", r.ProducerID, r.ProducerEpoch, true); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("commit by the timed-out producer: %v", err)
	}
}

func TestTrap8EachTransactionalIDHasItsOwnFile(t *testing.T) {
	dir := t.TempDir()
	m := &fakeMarkers{}
	f := offsets.Fence{ControllerEpoch: 1, AssignmentVersion: 1}
	c := newCoord(t, dir, m, &f, &clock{time.Unix(1000, 0)})
	ctx := context.Background()
	ids := []string{"a", "A", "../escape", "x/y", string(make([]byte, 300))}
	for _, id := range ids {
		if _, err := c.InitProducerID(ctx, id, time.Minute, -1, -1); err != nil {
			t.Fatalf("%q: %v", id, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(ids) {
		t.Fatalf("%d files for %d ids", len(ents), len(ids))
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.json")); err == nil {
		t.Fatal("an id escaped the directory")
	}
	if got := len(c.List()); got != len(ids) {
		t.Fatalf("listed %d", got)
	}
}

func TestStateTransitionTable(t *testing.T) {
	if CanTransition(Ongoing, CompleteCommit) || CanTransition(PrepareCommit, CompleteAbort) || CanTransition(PrepareAbort, Ongoing) {
		t.Fatal("an illegal transition is allowed")
	}
	if !CanTransition(Ongoing, PrepareCommit) || !CanTransition(CompleteAbort, Ongoing) {
		t.Fatal("a legal transition is refused")
	}
}

// FuzzDecodeRecord: arbitrary bytes never panic the transaction file decoder,
// and what it accepts has a known state.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"transactionalId":"tx","producerId":1,"producerEpoch":0,"timeoutMs":1000,"state":"Ongoing","partitions":[{"topic":"t","partition":0}]}`))
	f.Add([]byte(`{"state":"Nope"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err == nil {
			if _, ok := transitions[r.State]; !ok {
				t.Fatalf("accepted unknown state %q", r.State)
			}
		}
	})
}
