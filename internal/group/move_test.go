package group

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"
)

// The property of a move (issue 14): for random sequences of joins (dynamic
// and static members, the KIP-394 handshake), leaves, syncs, heartbeats,
// commits and session expiries, a group restored from its Snapshot is the
// group it was, except for what docs/group.md ("Durable state") says is not
// durable: timers (session deadlines start afresh at the load), parked
// requests, KIP-394 pending member ids, and the members that got a JoinGroup
// answer but have not synced yet (the sync timeout's list).
//
// The driver of TestRandomized runs the workload; at random points the
// group moves, in one of two ways:
//
//   - twin: at a point where the group holds nothing that is not durable
//     (quiescent), its Snapshot (which must equal the last one the shell
//     was asked to write) is restored into a fresh group, and the same
//     continuing ops go to both, the original and the copy. Every answer,
//     write request (Persist), event and timer slot must be equal, and so
//     must the groups' state, generation, leader, protocol, snapshot,
//     Describe and subscribed topics. Expiries are explicit: time passes
//     without firing timers and a drawn slot fires in both groups, so the
//     different deadlines never decide anything. Then the copy carries on
//     as the group.
//   - real: at any point, the group is unloaded (its parked requests are
//     answered NOT_COORDINATOR, which the clients see) and the last
//     snapshot the shell was asked to write is restored, as a new
//     coordinator would; what docs/group.md promises of the loaded group is
//     probed on throwaway copies (see probeMembers). The loaded group
//     carries on as the group, its timers now firing by deadline.
//
// Every snapshot the shell is asked to write must load (Restore accepts it)
// into the promised state (promised), and loading is idempotent.
func TestMoveKeepsTheGroup(t *testing.T) {
	seeds := 100
	if testing.Short() {
		seeds = 20
	}
	var twins, moves int
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			tw, mv := runMove(t, uint64(seed))
			twins += tw
			moves += mv
			if t.Failed() {
				t.Logf("reproduce with: go test ./internal/group -run 'TestMoveKeepsTheGroup/^%d$'", seed)
			}
		})
	}
	// The property must be exercised, not vacuously true.
	t.Logf("%d twin moves, %d real moves", twins, moves)
	if twins < seeds || moves < seeds {
		t.Errorf("%d twin moves and %d real moves in %d seeds: too few", twins, moves, seeds)
	}
}

// mover is one seed's run: the driver, the current group's shell and what
// the shell was last asked to write.
type mover struct {
	t         *testing.T
	d         *driver
	s         *fakeShell
	ids       *int      // the current group's member id counter (driver.config)
	persisted *Snapshot // the last snapshot an Output asked to write; nil: none yet
}

func runMove(t *testing.T, seed uint64) (twins, moves int) {
	d := newDriver(seed)
	m := &mover{t: t, d: d, ids: new(int)}
	m.s = newFakeShell(New("g", d.config(m.ids)), t0)
	steps := 300 + d.rng.IntN(300)
	for step := range steps {
		switch {
		case m.s.g.quiescent() && d.rng.IntN(10) == 0:
			twins++
			if !m.twinMove(step, 10+d.rng.IntN(40)) {
				return twins, moves
			}
		case d.rng.IntN(30) == 0:
			moves++
			m.realMove(step)
		}
		if t.Failed() || !d.step(t, m.s, step, m.visit) || t.Failed() {
			return twins, moves
		}
	}
	d.quiesce(t, m.s, steps, m.visit)
	return twins, moves
}

// visit sees every Output of the current group before its shell applies
// it: a write request records the snapshot the shell would write, which
// must load.
func (m *mover) visit(out Output) {
	if !out.Persist {
		return
	}
	snap := m.s.g.Snapshot()
	m.persisted = &snap
	n := *m.ids
	restoreChecked(m.t, m.d, snap, &n, m.s.now, "a snapshot the shell was asked to write")
}

// quiescent reports whether the group holds nothing that docs/group.md
// calls not durable: no parked request, no pending member id, no member
// waiting to sync, no initial delay running, and a state a snapshot loads
// into (CompletingRebalance always has members waiting to sync).
func (g *Group) quiescent() bool {
	if len(g.pending) > 0 || len(g.pendingSync) > 0 || g.initialDelay {
		return false
	}
	switch g.state {
	case Empty, Stable, PreparingRebalance:
	default:
		return false
	}
	for _, m := range g.members {
		if m.awaitingJoin() || m.awaitingSync() || m.isNew {
			return false
		}
	}
	return true
}

// promised is what docs/group.md promises a group restored from s
// snapshots as: without members only the protocol type and the generation
// are kept (the group is Empty); a snapshot taken between generations
// loads with the assignments cleared; anything else exactly as written.
func promised(s Snapshot) Snapshot {
	if len(s.Members) == 0 {
		return Snapshot{ProtocolType: s.ProtocolType, Generation: s.Generation}
	}
	s.Members = slices.Clone(s.Members)
	if s.Rebalancing {
		for i := range s.Members {
			s.Members[i].Assignment = nil
		}
	}
	return s
}

// restoreChecked restores snap into a fresh group at now (member ids
// counted on in *ids) and checks what Restore promises: it accepts the
// snapshot, asks for no write and answers nothing, snapshots as promised,
// a second load changes nothing, and the timers are a session per member
// starting at now (plus the rebalance timeout when loaded mid-rebalance).
// It returns the shell of the loaded group.
func restoreChecked(t *testing.T, d *driver, snap Snapshot, ids *int, now time.Time, what string) *fakeShell {
	t.Helper()
	h := New("g", d.config(ids))
	out, err := h.Restore(now, snap)
	if err != nil {
		t.Fatalf("%s does not load: %v\nsnapshot: %+v", what, err, snap)
	}
	s := newFakeShell(h, now)
	s.states = []State{h.State()} // loading is not a transition of the table
	s.apply(out)
	checkShell(t, s, -1)
	if out.Persist || len(out.Joins)+len(out.Syncs)+len(out.Heartbeats)+len(out.Leaves) > 0 {
		t.Errorf("%s: loading wrote or answered: %+v", what, out)
	}
	if got, want := h.Snapshot(), promised(snap); !reflect.DeepEqual(got, want) {
		t.Errorf("%s loads as\n%+v\nwant\n%+v", what, got, want)
	}
	again := New("g", d.config(new(int)))
	if _, err := again.Restore(now.Add(time.Minute), h.Snapshot()); err != nil || !reflect.DeepEqual(again.Snapshot(), h.Snapshot()) {
		t.Errorf("%s: a second move changes the group: %v\n%+v\n%+v", what, err, again.Snapshot(), h.Snapshot())
	}
	want := map[TimerKey]time.Time{}
	for _, ms := range snap.Members {
		want[TimerKey{Kind: TimerSession, Member: ms.MemberID}] = now.Add(ms.SessionTimeout)
	}
	if snap.Rebalancing && len(snap.Members) > 0 {
		want[TimerKey{Kind: TimerRebalanceTimeout}] = now.Add(h.rebalanceTimeout())
	}
	got := map[TimerKey]time.Time{}
	for _, a := range h.Armed() {
		got[a.Key] = a.At
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: timers after loading %v, want %v", what, got, want)
	}
	return s
}

// twinMove restores the quiescent group's snapshot into a copy, runs
// steps more ops on both, comparing, and makes the copy the group. It
// reports false if the group was deleted.
func (m *mover) twinMove(step, steps int) bool {
	t, d, s := m.t, m.d, m.s
	t.Helper()
	snap := s.g.Snapshot()
	durable := Snapshot{}
	if m.persisted != nil {
		durable = *m.persisted
	}
	if !reflect.DeepEqual(promised(durable), promised(snap)) {
		t.Fatalf("step %d: with nothing parked or pending (%s) the group is not what the shell last wrote:\n%+v\nwritten:\n%+v",
			step, s.g.State(), snap, durable)
	}
	rids := *m.ids // the copy hands out the ids the original would
	r := restoreChecked(t, d, snap, &rids, s.now, "the snapshot of a quiescent group")
	// The subscribed topics are not durable: the loaded group derives them
	// from its members' metadata, while a group that did not move keeps
	// its last generation's until the next one (docs/group.md). They may
	// differ until a generation ends, if they differed at the move.
	gen := s.g.Generation()
	derived, known := derivedTopics(s.g)
	t1, k1 := s.g.Topics()
	staleTopics := func() bool { return (!slices.Equal(derived, t1) || known != k1) && s.g.Generation() == gen }
	m.sameGroup(step, "after the move", s.g, r.g, staleTopics())
	for i := range steps {
		o := d.next()
		var a, b Output
		var ca, cb Code
		switch o.kind {
		case opNone:
			continue
		case opAdvance:
			// Time passes on both clocks and nothing fires by deadline;
			// half of the time one slot armed in the original fires in
			// both.
			s.now = s.now.Add(o.advance)
			r.now = s.now
			armed := s.g.Armed()
			if len(armed) == 0 || d.rng.IntN(2) == 0 {
				continue
			}
			k := armed[d.rng.IntN(len(armed))].Key
			a, _ = s.fire(k)
			var ok bool
			if b, ok = r.fire(k); !ok {
				t.Fatalf("step %d+%d: timer %s armed in the original only", step, i, k)
			}
		default:
			if k := o.requestKind(); k != "" {
				s.request(k, o.ref)
				r.request(k, o.ref)
			}
			a, ca = o.apply(s.g, s.now)
			b, cb = o.apply(r.g, r.now)
		}
		if ca != cb {
			t.Fatalf("step %d+%d: op %v answered %s by the original, %s by the moved group", step, i, o.kind, ca, cb)
		}
		if ga, gb := observed(a), observed(b); !reflect.DeepEqual(ga, gb) {
			t.Fatalf("step %d+%d: op %+v\noriginal:\n%+v\nmoved:\n%+v", step, i, o, ga, gb)
		}
		d.learn(a)
		s.apply(a)
		r.apply(b)
		checkShell(t, s, step)
		checkShell(t, r, step)
		m.sameGroup(step, fmt.Sprintf("op %d after the move", i), s.g, r.g, staleTopics())
		if a.Persist {
			p := r.g.Snapshot()
			m.persisted = &p
		}
		if t.Failed() || r.g.State() == Dead {
			return false
		}
	}
	m.s, m.ids = r, &rids
	return true
}

// observation is an Output without what differs between two groups by
// design: timer sequence numbers and deadlines (the slots must agree).
type observation struct {
	Joins      []JoinResult
	Syncs      []SyncResult
	Heartbeats []HeartbeatResult
	Leaves     []LeaveResult
	Cancel     []TimerKey
	Arm        []TimerKey
	Events     []Event
	Persist    bool
}

func observed(out Output) observation {
	o := observation{Joins: out.Joins, Syncs: out.Syncs, Heartbeats: out.Heartbeats, Leaves: out.Leaves,
		Cancel: out.Cancel, Events: out.Events, Persist: out.Persist}
	for _, a := range out.Arm {
		o.Arm = append(o.Arm, a.Key)
	}
	return o
}

// sameGroup compares what can be observed of two groups, timer deadlines
// aside, and the subscribed topics unless staleTopics.
func (m *mover) sameGroup(step int, when string, a, b *Group, staleTopics bool) {
	t := m.t
	t.Helper()
	type view struct {
		State      State
		Generation int32
		Leader     string
		Protocol   string
		Type       string
		Snapshot   Snapshot
		Describe   Description
		Topics     []string
		Known      bool
		Timers     []TimerKey
		Pending    map[string]bool
		ToSync     map[string]bool
	}
	look := func(g *Group) view {
		v := view{State: g.State(), Generation: g.Generation(), Leader: g.Leader(), Protocol: g.Protocol(),
			Type: g.ProtocolType(), Snapshot: promised(g.Snapshot()), Describe: g.Describe(),
			Pending: g.pending, ToSync: g.pendingSync}
		v.Topics, v.Known = g.Topics()
		for _, a := range g.Armed() {
			v.Timers = append(v.Timers, a.Key)
		}
		return v
	}
	va, vb := look(a), look(b)
	if staleTopics {
		vb.Topics, vb.Known = va.Topics, va.Known
	}
	if !reflect.DeepEqual(va, vb) {
		t.Fatalf("step %d, %s: the groups differ\noriginal: %+v\nmoved:    %+v", step, when, va, vb)
	}
}

// realMove is a move as a coordinator makes it: the group is unloaded
// here and the last snapshot written is loaded into a fresh group.
func (m *mover) realMove(step int) {
	t, d, s := m.t, m.d, m.s
	t.Helper()
	out := s.g.Unload()
	d.learn(out)
	s.apply(out)
	checkShell(t, s, step)
	if len(s.open) > 0 {
		t.Fatalf("step %d: unloading left requests unanswered: %v", step, sortedRefs(s.open))
	}
	snap := Snapshot{} // nothing written: the new coordinator starts from New
	if m.persisted != nil {
		snap = *m.persisted
	}
	probeMembers(t, d, snap, *m.ids, s.now)
	ids := *m.ids
	m.s = restoreChecked(t, d, snap, &ids, s.now, "the last snapshot written")
	m.ids = &ids
}

// probeMembers checks, on throwaway copies loaded from snap, what
// docs/group.md promises the members of a moved group:
//
//   - settled: each member's Heartbeat, OffsetCommit and SyncGroup with
//     its old id and generation are accepted, and SyncGroup returns its
//     stored assignment;
//   - mid-rebalance: Heartbeat and SyncGroup are told
//     REBALANCE_IN_PROGRESS, never UNKNOWN_MEMBER_ID;
//   - either way, when every member rejoins with its id (the leader first)
//     nobody is refused and one more generation forms, with the same
//     leader.
func probeMembers(t *testing.T, d *driver, snap Snapshot, ids int, now time.Time) {
	t.Helper()
	if len(snap.Members) == 0 {
		return
	}
	load := func() *Group {
		n := ids
		g := New("g", d.config(&n))
		if _, err := g.Restore(now, snap); err != nil {
			t.Fatalf("the last snapshot written does not load: %v", err)
		}
		return g
	}
	want := ErrNone
	if snap.Rebalancing {
		want = ErrRebalanceInProgress
	}
	g := load()
	for _, ms := range snap.Members {
		inst := (&member{instanceID: ms.InstanceID}).instancePtr()
		hb := g.Heartbeat(now, HeartbeatInput{Ref: "hb", MemberID: ms.MemberID, InstanceID: inst, Generation: snap.Generation})
		if code := hb.Heartbeats[0].Err; code != want {
			t.Errorf("member %s's heartbeat after a move (rebalancing %v): %s, want %s", ms.MemberID, snap.Rebalancing, code, want)
		}
		if code, _ := g.CheckCommit(now, CommitCheck{MemberID: ms.MemberID, InstanceID: inst, Generation: snap.Generation}); code != ErrNone {
			t.Errorf("member %s's commit after a move: %s", ms.MemberID, code)
		}
		sr := g.Sync(now, SyncInput{Ref: "sync", MemberID: ms.MemberID, InstanceID: inst, Generation: snap.Generation})
		if len(sr.Syncs) != 1 || sr.Syncs[0].Err != want || (want == ErrNone && !slices.Equal(sr.Syncs[0].Assignment, ms.Assignment)) {
			t.Errorf("member %s's sync after a move (rebalancing %v): %+v, want %s and %q", ms.MemberID, snap.Rebalancing, sr.Syncs, want, ms.Assignment)
		}
	}
	if d.cfg.MaxSize > 0 && len(snap.Members) > d.cfg.MaxSize {
		return // rejoining would be refused GROUP_MAX_SIZE_REACHED, moved or not
	}
	g = load()
	order := slices.Clone(snap.Members)
	slices.SortStableFunc(order, func(a, b MemberSnapshot) int {
		return boolRank(b.MemberID == snap.Leader) - boolRank(a.MemberID == snap.Leader)
	})
	var answers []JoinResult
	for _, ms := range order {
		out := g.Join(now, JoinInput{Ref: ms.MemberID, Version: 5, MemberID: ms.MemberID,
			InstanceID: (&member{instanceID: ms.InstanceID}).instancePtr(), ProtocolType: snap.ProtocolType,
			Protocols: ms.Protocols, SessionTimeout: ms.SessionTimeout, RebalanceTimeout: ms.RebalanceTimeout, ClientID: ms.ClientID})
		answers = append(answers, out.Joins...)
	}
	ok := len(answers) == len(snap.Members) && g.State() == CompletingRebalance && g.Leader() == snap.Leader
	for _, a := range answers {
		ok = ok && a.Err == ErrNone && a.Generation == snap.Generation+1
	}
	if !ok {
		t.Errorf("every member rejoined after a move (generation %d, rebalancing %v): state %s, leader %s (was %s), answers %+v",
			snap.Generation, snap.Rebalancing, g.State(), g.Leader(), snap.Leader, answers)
	}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// derivedTopics is what g's subscribed topics would be if derived now from
// its members' metadata, as Restore derives them.
func derivedTopics(g *Group) ([]string, bool) {
	subscribed, known := g.subscribed, g.subKnown
	defer func() { g.subscribed, g.subKnown = subscribed, known }()
	g.computeSubscribed()
	return g.Topics()
}
