package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/fsutil"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/testutil"
	"github.com/kaas-dev/kaas/internal/volume"
)

// Regression tests of issue 11: a change of owner never loses, rewinds or
// serves a stale committed offset.

func offsetsDir(dir string) string { return volume.OffsetsDir(dir) }

// newCoordAt is newCoord with a clock for retention decisions.
func newCoordAt(t *testing.T, dir, me string, now func() time.Time) *Coordinator {
	t.Helper()
	return newCoordWith(t, dir, me, func(c *Config) { c.Now = now })
}

// groupFile is the part of a group file these tests look at.
type groupFile struct {
	Offsets   map[string]int64   `json:"offsets"`
	Details   map[string][]int64 `json:"details"`
	Fence     offsets.Fence      `json:"-"`
	RawFence  map[string]int64   `json:"fence"`
	Pending   []json.RawMessage  `json:"pending"`
	Retention *struct {
		ProtocolType string `json:"protocolType"`
		EmptySince   int64  `json:"emptySince"`
	} `json:"retention"`
}

func readGroupFile(t *testing.T, dir, g string) (groupFile, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(offsetsDir(dir), offsets.FileName(g)))
	if errors.Is(err, os.ErrNotExist) {
		return groupFile{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var f groupFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	f.Fence = offsets.Fence{ControllerEpoch: f.RawFence["controller_epoch"], AssignmentVersion: f.RawFence["assignment_version"]}
	return f, true
}

func TestOffsetsWithoutCommitTimestampSurviveRetention(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(offsetsDir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// A group file exactly in the format of the spec (coordination.md §6):
	// no commit timestamps.
	spec := `{"offsets":{"orders/0":1042,"orders/1":977},"metadata":{"orders/0":"consumer-1"},` +
		`"fence":{"controller_epoch":1,"assignment_version":1}}`
	if err := os.WriteFile(filepath.Join(offsetsDir(dir), "legacy.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	before := time.Now().UnixMilli()
	a := newCoord(t, dir, "kaas-0")
	a.Apply(nil, assignment(1, 1, nil, nil))
	for range 3 {
		a.ExpireOffsets(context.Background())
	}
	if got := fetchAll(t, a, "legacy"); fmt.Sprint(got) != "map[0:1042 1:977]" {
		t.Fatalf("offsets after retention passes: %v", got)
	}
	// The commit time given at load is persisted, so it does not restart at
	// every load.
	f, ok := readGroupFile(t, dir, "legacy")
	if !ok {
		t.Fatal("the group file was deleted")
	}
	for k, d := range f.Details {
		if len(d) < 2 || d[1] < before || d[1] > time.Now().UnixMilli() {
			t.Fatalf("%s: details %v, want the load time as commit time", k, d)
		}
	}
}

func TestTxnOffsetsCommittedAfterReloadSurviveRetention(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	a := newCoord(t, dir, "kaas-0")
	a.Apply(nil, assignment(1, 1, nil, nil))
	staged := time.Now().UnixMilli()
	_, err := a.TxnCommit(ctx, TxnCommitInput{Group: "etl", TransactionalID: "tx", ProducerID: 7, Generation: -1,
		Offsets: map[offsets.TP]offsets.Offset{tp(0): {Offset: 42, LeaderEpoch: -1, ExpireTimestamp: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	// The group coordinator restarts (or the group moves) mid-transaction:
	// a fresh coordinator reads the staged offsets from the file.
	b := newCoord(t, dir, "kaas-0")
	b.Apply(nil, assignment(1, 1, nil, nil))
	if err := b.EndTxnOffsets(ctx, "etl", 7, true); err != nil {
		t.Fatal(err)
	}
	b.ExpireOffsets(ctx)
	got, err := b.Fetch("etl", nil)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := got[tp(0)]
	if !ok || o.Offset != 42 {
		t.Fatalf("committed transactional offset after retention: %v", got)
	}
	if o.CommitTimestamp < staged || o.CommitTimestamp > time.Now().UnixMilli() {
		t.Fatalf("commit timestamp %d, want the TxnOffsetCommit's time (≥ %d)", o.CommitTimestamp, staged)
	}
}

// swapCase is one writer racing a change of owner.
type swapCase struct {
	op    string
	setup func(t *testing.T, a *Coordinator, g string)
	run   func(a *Coordinator, g string) error
	check func(t *testing.T, before, after groupFile, existed bool)
}

func TestWriteRacingAnOwnerChangeIsRefused(t *testing.T) {
	ctx := context.Background()
	unchanged := func(t *testing.T, before, after groupFile, existed bool) {
		t.Helper()
		if !existed {
			t.Fatal("the group file was removed by the broker that lost the group")
		}
		if fmt.Sprint(after.Offsets, after.Pending) != fmt.Sprint(before.Offsets, before.Pending) {
			t.Fatalf("file changed by the broker that lost the group: %v %s -> %v %s",
				before.Offsets, before.Pending, after.Offsets, after.Pending)
		}
	}
	stage := func(t *testing.T, a *Coordinator, g string) {
		t.Helper()
		if _, err := a.TxnCommit(ctx, TxnCommitInput{Group: g, TransactionalID: "tx", ProducerID: 9, Generation: -1,
			Offsets: map[offsets.TP]offsets.Offset{tp(0): {Offset: 20, LeaderEpoch: -1, ExpireTimestamp: -1}}}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []swapCase{
		{op: "commit", run: func(a *Coordinator, g string) error { return commit(t, a, g, map[int32]int64{0: 5}) }},
		{op: "delete-offsets", run: func(a *Coordinator, g string) error {
			_, err := a.DeleteOffsets(ctx, g, []offsets.TP{tp(0)})
			return err
		}},
		{op: "delete-group", run: func(a *Coordinator, g string) error { return a.DeleteGroup(ctx, g) }},
		{op: "txn-stage", run: func(a *Coordinator, g string) error {
			_, err := a.TxnCommit(ctx, TxnCommitInput{Group: g, TransactionalID: "tx", ProducerID: 9, Generation: -1,
				Offsets: map[offsets.TP]offsets.Offset{tp(0): {Offset: 1, LeaderEpoch: -1, ExpireTimestamp: -1}}})
			return err
		}},
		{op: "txn-end", setup: stage, run: func(a *Coordinator, g string) error { return a.EndTxnOffsets(ctx, g, 9, true) }},
	}
	for _, tc := range cases {
		t.Run(tc.op, func(t *testing.T) {
			dir := t.TempDir()
			g := "racing-" + tc.op
			v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
			v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
			a := newCoord(t, dir, "kaas-0")
			b := newCoord(t, dir, "kaas-1")
			a.Apply(nil, v1)
			b.Apply(nil, v1)
			if err := commit(t, a, g, map[int32]int64{0: 10, 1: 11}); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, a, g)
			}
			before, _ := readGroupFile(t, dir, g)
			// The assignment changes between a's ownership check and its
			// write: both brokers apply v2, which moves g to kaas-1.
			var once sync.Once
			a.beforeWrite = func(op, group string) {
				if op == tc.op && group == g {
					once.Do(func() {
						a.Apply(v1, v2)
						b.Apply(v1, v2)
					})
				}
			}
			err := tc.run(a, g)
			if !errors.Is(err, ErrNotCoordinator) {
				t.Fatalf("%s after losing the group: err %v, want NOT_COORDINATOR", tc.op, err)
			}
			after, existed := readGroupFile(t, dir, g)
			check := tc.check
			if check == nil {
				check = unchanged
			}
			check(t, before, after, existed)
			if existed && !after.Fence.Less(offsets.Fence{ControllerEpoch: 1, AssignmentVersion: 2}) {
				t.Fatalf("kaas-0 wrote the file with the stamp %+v of an assignment that routes %s to kaas-1", after.Fence, g)
			}
			if slices.Contains(a.Resident(), g) {
				t.Fatalf("kaas-0 keeps a resident copy of %s after losing it", g)
			}
			// The new owner carries on from what kaas-0 had acknowledged.
			if got := fetchAll(t, b, g); got[0] != 10 && tc.op != "txn-end" {
				t.Fatalf("new owner reads %v", got)
			}
		})
	}
}

func TestRequestAfterOrphanSweepLeavesNoResidentCopy(t *testing.T) {
	for _, op := range []string{"fetch", "commit"} {
		t.Run(op, func(t *testing.T) {
			dir := t.TempDir()
			g := "swept-" + op
			v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
			v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
			a := newCoord(t, dir, "kaas-0")
			a.Apply(nil, v1)
			if err := commit(t, newOwner(t, dir, "kaas-1", v2), g, map[int32]int64{0: 3}); err != nil {
				t.Fatal(err)
			}
			a.beforeWrite = func(string, string) { a.Apply(v1, v2) } // the sweep runs mid-request
			var err error
			if op == "fetch" {
				_, err = a.Fetch(g, nil)
			} else {
				err = commit(t, a, g, map[int32]int64{0: 1})
			}
			if !errors.Is(err, ErrNotCoordinator) {
				t.Fatalf("%s after the sweep: %v, want NOT_COORDINATOR", op, err)
			}
			if slices.Contains(a.Resident(), g) {
				t.Fatalf("a request after the orphan sweep re-created a resident copy: %v", a.Resident())
			}
		})
	}
}

// newOwner is a coordinator that has applied a.
func newOwner(t *testing.T, dir, me string, a *cluster.Assignment) *Coordinator {
	c := newCoord(t, dir, me)
	c.Apply(nil, a)
	return c
}

func TestFetchFromAReplacedOwnerIsNeverStale(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	g := "stale"
	v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
	v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
	a := newOwner(t, dir, "kaas-0", v1)
	if err := commit(t, a, g, map[int32]int64{0: 10}); err != nil {
		t.Fatal(err)
	}
	if got := fetchAll(t, a, g); got[0] != 10 {
		t.Fatalf("fetch %v", got)
	}
	// kaas-0 is frozen and replaced: kaas-1 owns g under v2 and commits;
	// kaas-0 has not seen v2 when it serves again.
	b := newOwner(t, dir, "kaas-1", v2)
	if err := commit(t, b, g, map[int32]int64{0: 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TxnCommit(ctx, TxnCommitInput{Group: g, TransactionalID: "tx", ProducerID: 5, Generation: -1,
		Offsets: map[offsets.TP]offsets.Offset{tp(1): {Offset: 7, LeaderEpoch: -1, ExpireTimestamp: -1}}}); err != nil {
		t.Fatal(err)
	}
	got, err := a.Fetch(g, nil)
	if err == nil && got[tp(0)].Offset != 20 {
		t.Fatalf("the replaced owner answered its stale copy %v (the new owner holds 20)", got)
	}
	unstable, err := a.PendingTxnOffsets(g)
	if err == nil && !unstable[tp(1)] {
		t.Fatalf("require_stable on the replaced owner misses the new owner's staged offsets: %v", unstable)
	}
	// And a write from it is refused.
	if err := commit(t, a, g, map[int32]int64{0: 15}); !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("commit by the replaced owner: %v", err)
	}
	if got := fetchAll(t, b, g); got[0] != 20 {
		t.Fatalf("new owner reads %v after the replaced owner's commit", got)
	}
}

// joinAndSync makes one member join g on c and completes its generation.
func joinAndSync(t *testing.T, c *Coordinator, g string) string {
	t.Helper()
	ch, err := c.Join(g, group.JoinInput{Version: 3, ProtocolType: "consumer",
		Protocols: []group.Protocol{{Name: "range"}}, SessionTimeout: 30 * time.Second, RebalanceTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var jr group.JoinResult
	select {
	case jr = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("join did not complete")
	}
	if jr.Err != 0 {
		t.Fatalf("join: %s", group.ErrName(jr.Err))
	}
	sch, err := c.Sync(g, group.SyncInput{MemberID: jr.MemberID, Generation: jr.Generation,
		Assignments: []group.Assignment{{MemberID: jr.MemberID}}})
	if err != nil {
		t.Fatal(err)
	}
	if sr := <-sch; sr.Err != 0 {
		t.Fatalf("sync: %s", group.ErrName(sr.Err))
	}
	return jr.MemberID
}

// TestRetentionAfterAMoveFollowsKIP211 runs on virtual time: the member
// the new owner loads from the group's file times out after its session.
func TestRetentionAfterAMoveFollowsKIP211(t *testing.T) {
	synctest.Test(t, retentionAfterAMove)
}

func retentionAfterAMove(t *testing.T) {
	const day = 24 * time.Hour
	ctx := context.Background()
	old := time.Now().Add(-8 * day).UnixMilli() // older than the 7-day retention
	v1 := assignment(1, 2, nil, map[string]string{"live": "kaas-0", "left": "kaas-0"})
	v2 := assignment(2, 2, []string{"kaas-0"}, nil) // kaas-0 dies: kaas-1 owns everything
	dir := t.TempDir()
	a := newOwner(t, dir, "kaas-0", v1)
	for _, g := range []string{"live", "left"} {
		wait, _, err := a.Commit(CommitInput{Group: g, Generation: -1, Offsets: map[offsets.TP]offsets.Offset{
			tp(0): {Offset: 100, LeaderEpoch: -1, CommitTimestamp: old, ExpireTimestamp: -1}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	joinAndSync(t, a, "live") // "live" has a member when its coordinator dies
	member := joinAndSync(t, a, "left")
	lr, err := a.Leave("left", group.LeaveInput{Version: 2, Members: []group.LeaveMember{{MemberID: member}}})
	if err != nil || lr.Err != 0 {
		t.Fatalf("leave: %v %d", err, lr.Err)
	}
	emptyAt := time.Now()
	// What retention needs reaches the files without waiting for a request.
	testutil.WaitFor(t, 5*time.Second, func() error {
		for g, wantEmpty := range map[string]bool{"live": false, "left": true} {
			f, _ := readGroupFile(t, dir, g)
			if f.Retention == nil || f.Retention.ProtocolType != "consumer" || (f.Retention.EmptySince > 0) != wantEmpty {
				return fmt.Errorf("%s: retention section %+v", g, f.Retention)
			}
		}
		return nil
	})

	// One day later, kaas-1 coordinates both, neither resident there.
	clock := emptyAt.Add(day)
	b := newCoordAt(t, dir, "kaas-1", func() time.Time { return clock })
	b.Apply(nil, v2)
	b.ExpireOffsets(ctx)
	for _, g := range []string{"live", "left"} {
		if got := fetchAll(t, b, g); got[0] != 100 {
			t.Fatalf("%s: offsets committed 8 days ago expired one day after the group was last in use: %v", g, got)
		}
	}
	// kaas-1 loaded "live" with the member its file records (durable
	// membership); the member does not come back, and its session, started
	// at the load, expires: the group becomes Empty then.
	if d, err := b.Describe("live"); err != nil || d.State != "Stable" || len(d.Members) != 1 {
		t.Fatalf("live at the new owner: %+v %v", d, err)
	}
	time.Sleep(31 * time.Second)
	synctest.Wait()
	if d, err := b.Describe("live"); err != nil || d.State != "Empty" {
		t.Fatalf("live after its member's session: %+v %v", d, err)
	}
	// Seven days after the group became Empty (for "live": after its
	// member's session expired at kaas-1), they expire.
	clock = emptyAt.Add(8*day + time.Hour)
	b.ExpireOffsets(ctx)
	if got := fetchAll(t, b, "left"); len(got) != 0 {
		t.Fatalf("left: offsets kept 8 days after the group became Empty: %v", got)
	}
	if got := fetchAll(t, b, "live"); len(got) != 0 {
		t.Fatalf("live: offsets kept 7 days after the new owner found it without members: %v", got)
	}
}

// TestOwnerChangeStressNoStaleStampNoRewind swaps assignments continuously,
// now and then freezing a broker mid-request and leaving it behind for a
// while, as SIGSTOP does, while every group is committed to and read
// through whichever broker claims it: no acknowledged write carries the
// stamp of an assignment that routes its group elsewhere, and no reader
// ever sees a committed offset go backwards or below what was acknowledged
// before its read.
func TestOwnerChangeStressNoStaleStampNoRewind(t *testing.T) {
	const (
		brokers  = 3
		groups   = 6
		maxSwaps = 400
		runFor   = 3 * time.Second
	)
	dir := t.TempDir()
	var hist sync.Map // version -> *Table
	rig := newSwapRig(t, dir, brokers, nil)
	gs := make([]string, groups)
	for i := range gs {
		gs[i] = fmt.Sprintf("stress-%d", i)
	}
	place := func(v int64, rng *rand.Rand, dead []string) *cluster.Assignment {
		p := map[string]string{}
		for _, g := range gs {
			p[g] = rig.alive(rng, dead)
		}
		a := assignment(v, brokers, dead, p)
		hist.Store(v, NewTable(a))
		return a
	}
	rng := rand.New(rand.NewPCG(1, 2))
	first := place(1, rng, nil)
	rig.apply(rng, nil, first)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	// The swapper: each new assignment reaches the brokers one by one, in
	// a random order, with pauses, as brokers poll at their own pace. Now
	// and then a broker freezes in the middle of a request, is declared
	// dead and left behind for a few assignments, then resumes.
	freezes := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(stop)
		freezes = rig.churn(rng, first, maxSwaps, runFor, func(*cluster.Assignment) int { return rng.IntN(brokers) },
			func(v int64, dead []string) *cluster.Assignment { return place(v, rng, dead) }, nil)
	}()
	acked := make([]atomic.Int64, groups)
	var writes atomic.Int64
	for gi, g := range gs {
		// One committer per group, offsets strictly increasing: a file that
		// holds value v was written by the write acknowledged for v.
		wg.Add(2)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(gi), 7))
			for v := int64(1); ; {
				select {
				case <-stop:
					return
				default:
				}
				c, b, err := rig.at(r, g)
				if err != nil {
					continue
				}
				if err := commitOne(c, g, v); err != nil {
					if !errors.Is(err, ErrNotCoordinator) && !errors.Is(err, ErrLoadInProgress) {
						report(fmt.Errorf("%s commit %d via %s: %w", g, v, b.ID, err))
					}
					time.Sleep(100 * time.Microsecond)
					continue
				}
				acked[gi].Store(v)
				writes.Add(1)
				if f, ok := readGroupFileErr(dir, g); ok && f.Offsets["orders/0"] == v {
					tb, _ := hist.Load(f.Fence.AssignmentVersion)
					if owner, ok := tb.(*Table).Group(g); !ok || owner.ID != b.ID {
						report(fmt.Errorf("%s: offset %d acknowledged by %s carries the stamp of version %d, which routes it to %s",
							g, v, b.ID, f.Fence.AssignmentVersion, owner.ID))
					}
				}
				v++
			}
		}()
		// A reader of whichever broker claims the group.
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(gi), 9))
			last := int64(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				floor := acked[gi].Load()
				c, b, err := rig.at(r, g)
				if err != nil {
					continue
				}
				got, err := c.Fetch(g, nil)
				if err != nil {
					continue
				}
				o := got[tp(0)].Offset
				if o < last || o < floor {
					report(fmt.Errorf("%s read %d from %s after reading %d with %d acknowledged", g, o, b.ID, last, floor))
				}
				last = o
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for gi, g := range gs {
		if f, _ := readGroupFileErr(dir, g); f.Offsets["orders/0"] != acked[gi].Load() {
			t.Errorf("%s: file holds %d, last acknowledged %d", g, f.Offsets["orders/0"], acked[gi].Load())
		}
	}
	if writes.Load() < 50 {
		t.Fatalf("only %d acknowledged writes: the stress did not run", writes.Load())
	}
	if freezes == 0 || rig.stalled.Load() == 0 {
		t.Fatalf("%d freezes, %d requests caught by one: no broker froze mid-request", freezes, rig.stalled.Load())
	}
	t.Logf("%d acknowledged commits across owner changes and %d freezes (%d requests caught by one)", writes.Load(), freezes, rig.stalled.Load())
}

func commitOne(c *Coordinator, g string, v int64) error {
	wait, _, err := c.Commit(CommitInput{Group: g, Generation: -1,
		Offsets: map[offsets.TP]offsets.Offset{tp(0): {Offset: v, LeaderEpoch: -1, ExpireTimestamp: -1}}})
	if err != nil {
		return err
	}
	return wait(context.Background())
}

func readGroupFileErr(dir, g string) (groupFile, bool) {
	data, err := os.ReadFile(filepath.Join(offsetsDir(dir), offsets.FileName(g)))
	if err != nil {
		return groupFile{}, false
	}
	var f groupFile
	if json.Unmarshal(data, &f) != nil {
		return groupFile{}, false
	}
	f.Fence = offsets.Fence{ControllerEpoch: f.RawFence["controller_epoch"], AssignmentVersion: f.RawFence["assignment_version"]}
	return f, true
}

// swapRig is coordinators over one data dir, named kaas-0, kaas-1, ..., that
// wait for each other the way cluster.Runtime.Settled makes brokers wait: an
// assignment is settled once every one of them that the newest assignment
// does not call dead has applied it and has no write in flight granted under
// an older assignment (each store counts its writes, as a broker's does). One of them may be frozen (freeze):
// its requests and writes wait until it thaws, it applies nothing
// meanwhile, and it is not Fresh until it has applied the newest assignment
// after thawing, as a broker resumed from SIGSTOP.
type swapRig struct {
	ids     []string
	coords  []*Coordinator
	applied []atomic.Int64 // the assignment version each has applied
	writes  []*fsutil.Writes
	newest  atomic.Pointer[cluster.Assignment]

	mu     sync.Mutex // guards frozen
	frozen map[int]chan struct{}
	fresh  []atomic.Bool
	// stalled counts the requests a freeze caught between their ownership
	// check and their write.
	stalled atomic.Int64
	// pending: the coordinator freezes at its next write (freezeMidRequest),
	// whose request tells caught.
	pending []atomic.Bool
	caught  chan struct{}
}

// newSwapRig opens n coordinators over dir; cfg, when set, adjusts each
// one's configuration.
func newSwapRig(t *testing.T, dir string, n int, cfg func(*Config)) *swapRig {
	r := &swapRig{applied: make([]atomic.Int64, n), fresh: make([]atomic.Bool, n), frozen: map[int]chan struct{}{},
		pending: make([]atomic.Bool, n), caught: make(chan struct{}, 1)}
	settled := func(a *cluster.Assignment, _ bool) bool {
		newest := r.newest.Load()
		for i := range r.applied {
			if newest != nil {
				if row, ok := newest.Row(r.ids[i]); ok && row.Health == cluster.Dead {
					continue
				}
			}
			if r.applied[i].Load() < a.AssignmentVersion {
				return false
			}
			if w, ok := r.writes[i].Oldest(); ok && w.Less(fsutil.Stamp{Epoch: a.ControllerEpoch, Version: a.AssignmentVersion}) {
				return false
			}
		}
		return true
	}
	for i := range n {
		r.ids = append(r.ids, fmt.Sprintf("kaas-%d", i))
	}
	for i := range n {
		// The files are real; fsync is skipped to bound the test's time.
		w := fsutil.NewWrites()
		r.writes = append(r.writes, w)
		st, err := offsets.Open(offsets.Options{Dir: offsetsDir(dir), NoSync: true, Writes: w})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		r.fresh[i].Store(true)
		c := Config{Me: r.ids[i], Store: st, Group: group.DefaultConfig(), Settled: settled, Fresh: r.fresh[i].Load}
		if cfg != nil {
			cfg(&c)
		}
		co := New(c)
		co.beforeWrite = func(string, string) { // frozen mid-request
			if r.pending[i].CompareAndSwap(true, false) {
				r.freeze(i)
				r.caught <- struct{}{}
			}
			if r.wait(i) {
				r.stalled.Add(1)
			}
		}
		r.coords = append(r.coords, co)
	}
	return r
}

// wait blocks while coordinator i is frozen; true if it did.
func (r *swapRig) wait(i int) bool {
	r.mu.Lock()
	thaw := r.frozen[i]
	r.mu.Unlock()
	if thaw != nil {
		<-thaw
	}
	return thaw != nil
}

// freeze freezes coordinator i: it stops applying assignments, its
// requests wait, and it is no longer Fresh.
func (r *swapRig) freeze(i int) {
	r.fresh[i].Store(false)
	r.mu.Lock()
	r.frozen[i] = make(chan struct{})
	r.mu.Unlock()
}

// freezeMidRequest freezes coordinator i at the next request of it that
// reaches its write (after its ownership check), or after d without one.
func (r *swapRig) freezeMidRequest(i int, d time.Duration) {
	r.pending[i].Store(true)
	select {
	case <-r.caught:
	case <-time.After(d):
		if r.pending[i].CompareAndSwap(true, false) {
			r.freeze(i)
		} else {
			<-r.caught // a request took it meanwhile
		}
	}
}

// thaw resumes coordinator i: what waited goes on at once, with the view
// it had; it applies the newest assignment a few milliseconds later (its
// next poll), and is not Fresh until then.
func (r *swapRig) thaw(i int) {
	r.mu.Lock()
	close(r.frozen[i])
	delete(r.frozen, i)
	r.mu.Unlock()
	time.Sleep(3 * time.Millisecond)
	newest := r.newest.Load()
	r.coords[i].Apply(nil, newest)
	r.applied[i].Store(newest.AssignmentVersion)
	r.fresh[i].Store(true)
}

// apply gives next to every coordinator that is not frozen. After a first
// assignment (prev nil), it reaches them one by one, in a random order,
// with pauses of up to 1.5 ms, as brokers poll at their own pace.
func (r *swapRig) apply(rng *rand.Rand, prev, next *cluster.Assignment) {
	r.newest.Store(next)
	for _, i := range rng.Perm(len(r.coords)) {
		r.mu.Lock()
		frozen := r.frozen[i] != nil
		r.mu.Unlock()
		if frozen {
			continue
		}
		r.coords[i].Apply(prev, next)
		r.applied[i].Store(next.AssignmentVersion)
		if prev != nil {
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond)
		}
	}
}

// at is the coordinator that a random one of them says coordinates g,
// each asked once it is not frozen (a request to a frozen broker waits).
func (r *swapRig) at(rng *rand.Rand, g string) (*Coordinator, Broker, error) {
	i := rng.IntN(len(r.coords))
	r.wait(i)
	b, err := r.coords[i].FindGroup(g)
	if err != nil {
		return nil, b, err
	}
	i = slices.Index(r.ids, b.ID)
	r.wait(i)
	return r.coords[i], b, nil
}

// ask sends a request (req, given the coordinator and its id) to the
// coordinator that a random one of them names for g, again after
// ErrNotCoordinator or ErrLoadInProgress, pausing 100 µs, for at most 10 s.
// It returns how many times it sent it again and req's last error (nil:
// answered).
func (r *swapRig) ask(rng *rand.Rand, g string, req func(c *Coordinator, at string) error) (again int, err error) {
	give := time.Now().Add(10 * time.Second)
	for ; ; again++ {
		c, b, err := r.at(rng, g)
		if err == nil {
			if err = req(c, b.ID); err == nil {
				return again, nil
			}
		}
		if !errors.Is(err, ErrNotCoordinator) && !errors.Is(err, ErrLoadInProgress) {
			return again, err
		}
		if time.Now().After(give) {
			return again, fmt.Errorf("not answered in 10s: %w", err)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// askCode is ask for a request answered with a group error code: one
// answered NOT_COORDINATOR (a JoinGroup or SyncGroup parked when the group
// moved) is sent again too.
func (r *swapRig) askCode(rng *rand.Rand, g string, req func(c *Coordinator, at string) (group.Code, error)) (code group.Code, again int, err error) {
	again, err = r.ask(rng, g, func(c *Coordinator, at string) error {
		var err error
		if code, err = req(c, at); err == nil && code == group.ErrNotCoordinator {
			return ErrNotCoordinator
		}
		return err
	})
	return code, again, err
}

// churn issues the assignments place gives, from version 2, until runFor
// has passed or maxSwaps were issued; each reaches the coordinators as
// apply gives it, then a pause of up to 3 ms. Now and then (one in 25) the
// coordinator victim names freezes in the middle of a request
// (freezeMidRequest), is dead in the next 3 to 10 assignments, and thaws.
// each, when set, sees every assignment and the one before it. It returns
// the freezes.
func (r *swapRig) churn(rng *rand.Rand, first *cluster.Assignment, maxSwaps int64, runFor time.Duration,
	victim func(prev *cluster.Assignment) int, place func(v int64, dead []string) *cluster.Assignment,
	each func(prev, next *cluster.Assignment)) (freezes int) {
	prev := first
	deadline := time.Now().Add(runFor)
	frozen, thawAt := -1, int64(0)
	for v := int64(2); v <= maxSwaps && time.Now().Before(deadline); v++ {
		if frozen < 0 && rng.IntN(25) == 0 {
			frozen, thawAt = victim(prev), v+3+int64(rng.IntN(8))
			r.freezeMidRequest(frozen, 20*time.Millisecond)
			freezes++
		}
		var dead []string
		if frozen >= 0 {
			dead = []string{r.ids[frozen]}
		}
		next := place(v, dead)
		if each != nil {
			each(prev, next)
		}
		r.apply(rng, prev, next)
		if frozen >= 0 && v >= thawAt {
			r.thaw(frozen)
			frozen = -1
		}
		prev = next
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
	}
	if frozen >= 0 {
		r.thaw(frozen)
	}
	return freezes
}

// placeGroup is an assignment of version v that places g on a random
// coordinator that is not dead.
func (r *swapRig) placeGroup(rng *rand.Rand, v int64, g string, dead []string) *cluster.Assignment {
	return assignment(v, len(r.ids), dead, map[string]string{g: r.alive(rng, dead)})
}

// alive is a random coordinator that is not dead.
func (r *swapRig) alive(rng *rand.Rand, dead []string) string {
	for {
		if id := r.ids[rng.IntN(len(r.ids))]; !slices.Contains(dead, id) {
			return id
		}
	}
}

// ownerOf is the index of the coordinator a places g on.
func (r *swapRig) ownerOf(a *cluster.Assignment, g string) int {
	b, _ := NewTable(a).Group(g)
	return slices.Index(r.ids, b.ID)
}

// churnSeeds runs a churn test for seeds 0, 1 and 2 (0 alone in short mode).
func churnSeeds(t *testing.T, run func(t *testing.T, seed uint64)) {
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { run(t, seed) })
	}
}

// oldestApplied is the oldest assignment version a coordinator has applied.
func (r *swapRig) oldestApplied() int64 {
	v := r.applied[0].Load()
	for i := range r.applied {
		v = min(v, r.applied[i].Load())
	}
	return v
}
