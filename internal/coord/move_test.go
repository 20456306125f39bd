package coord

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/offsets"
)

// TestMoveKeepsTheGroupThroughTheFile is the move property of
// internal/group's TestMoveKeepsTheGroup through the shell and the group's
// real file: two coordinators (two brokers) over one data dir, an
// assignment that moves the group between them (the old owner unloads it;
// the first request at the new owner loads the file), idle eviction and
// reload, and random clients (dynamic members with the KIP-394 handshake,
// static members) joining, syncing, heartbeating, committing and leaving
// on virtual time (testing/synctest), so sessions expire by their
// deadlines between the moves.
//
// At each move, taken after every answer the coordinator can give has been
// delivered:
//
//   - if the group held nothing that is not durable (no parked request, no
//     pending member id, no member waiting to sync, no initial delay), the
//     file records exactly the old owner's snapshot, and DescribeGroups and
//     every client's Heartbeat (its member id and generation) answer the
//     same at the new owner as at the old one just before;
//   - otherwise the new owner describes the group as the file's snapshot
//     loaded by group.Restore does, and each member the file records is
//     answered as docs/group.md promises (old id and generation accepted,
//     or REBALANCE_IN_PROGRESS mid-rebalance; never UNKNOWN_MEMBER_ID).
//
// An Empty group evicted as idle describes the same when loaded back. After
// every step the membership the file records loads (group.Restore), and no
// warning or error is logged (a membership the new owner refuses to load
// is logged as a warning and lost).
func TestMoveKeepsTheGroupThroughTheFile(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runShellMoves(t, uint64(seed)) })
			if t.Failed() {
				t.Logf("reproduce with: go test ./internal/coord -run 'TestMoveKeepsTheGroupThroughTheFile/^%d$'", seed)
			}
		})
	}
}

const movingGroup = "moving"

// moveRig is one seed's cluster of two coordinators and its clients.
type moveRig struct {
	t       *testing.T
	rng     *rand.Rand
	dir     string
	cfg     group.Config
	brokers []*Coordinator
	placed  *cluster.Assignment // the assignment in force
	owner   int                 // index of the broker placed routes the group to
	clients []*shellClient
	logs    *warnings
	// counts, to show the property was exercised
	quietMoves, busyMoves, evictions int
}

// shellClient is what a simulated consumer remembers.
type shellClient struct {
	name     string
	instance *string
	memberID string
	gen      int32
	protos   []group.Protocol
	join     <-chan group.JoinResult // in flight
	sync     <-chan group.SyncResult // in flight
}

var shellProtos = [][]group.Protocol{
	{{Name: "range", Metadata: []byte{0, 1}}},
	{{Name: "range", Metadata: []byte{0, 2}}, {Name: "rr"}},
	{{Name: "rr"}},
}

func runShellMoves(t *testing.T, seed uint64) {
	r := &moveRig{t: t, rng: rand.New(rand.NewPCG(seed, 14)), dir: t.TempDir(), logs: &warnings{}}
	r.cfg = group.DefaultConfig()
	r.cfg.InitialRebalanceDelay = []time.Duration{0, time.Second}[r.rng.IntN(2)]
	r.cfg.NewMemberJoinTimeout = time.Minute
	for i := range 2 {
		// The file is real; fsync is skipped to bound the test's time.
		st, err := offsets.Open(offsets.Options{Dir: offsetsDir(r.dir), NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		r.brokers = append(r.brokers, New(Config{Me: fmt.Sprintf("kaas-%d", i), Store: st, Group: r.cfg,
			Logger: slog.New(r.logs)}))
	}
	r.placed = assignment(1, 3, nil, map[string]string{movingGroup: "kaas-0"})
	for _, c := range r.brokers {
		c.Apply(nil, r.placed)
	}
	for i := range 2 + r.rng.IntN(3) {
		c := &shellClient{name: fmt.Sprintf("c%d", i), protos: shellProtos[r.rng.IntN(len(shellProtos))]}
		if i%2 == 1 {
			inst := fmt.Sprintf("i%d", i)
			c.instance = &inst
		}
		r.clients = append(r.clients, c)
	}
	steps := 120 + r.rng.IntN(80)
	for step := range steps {
		r.step(step)
		synctest.Wait()
		r.collect()
		if msgs := r.logs.take(); len(msgs) > 0 {
			t.Fatalf("step %d: logged %v", step, msgs)
		}
		// Whatever the file records, the next owner must be able to load.
		if written, ok := r.fileSnapshot(); ok {
			if _, err := group.New(movingGroup, r.cfg).Restore(time.Now(), written); err != nil {
				t.Fatalf("step %d: the file's membership does not load: %v\n%+v", step, err, written)
			}
		}
		if t.Failed() {
			return
		}
	}
	// Route the group to neither broker: both unload it, every parked
	// request is answered, no timer is left running.
	r.reassign("kaas-2")
	synctest.Wait()
	r.collect()
	for _, c := range r.clients {
		if c.join != nil || c.sync != nil {
			t.Fatalf("%s: a request was never answered", c.name)
		}
	}
	gen := int32(0)
	for _, c := range r.clients {
		gen = max(gen, c.gen)
	}
	t.Logf("%d steps: %d moves with nothing parked or pending, %d other moves, %d evictions; generation %d reached",
		steps, r.quietMoves, r.busyMoves, r.evictions, gen)
	if r.quietMoves+r.busyMoves == 0 || gen == 0 {
		t.Fatalf("no move or no generation in %d steps", steps)
	}
}

func (r *moveRig) coord() *Coordinator { return r.brokers[r.owner] }

// step sends one random request or lets time pass.
func (r *moveRig) step(step int) {
	t, rng, co := r.t, r.rng, r.coord()
	c := r.clients[rng.IntN(len(r.clients))]
	switch o := rng.IntN(100); {
	case o < 25:
		if c.join != nil {
			return
		}
		if rng.IntN(6) == 0 {
			c.protos = shellProtos[rng.IntN(len(shellProtos))]
		}
		id := c.memberID
		if c.instance != nil && rng.IntN(8) == 0 {
			id = "" // a static member restarts
		}
		ch, err := co.Join(movingGroup, group.JoinInput{Version: 5, MemberID: id, InstanceID: c.instance, ProtocolType: "consumer",
			Protocols: c.protos, SessionTimeout: time.Duration(6+rng.IntN(8)) * time.Second, RebalanceTimeout: time.Duration(6+rng.IntN(20)) * time.Second,
			ClientID: c.name, ClientHost: "/127.0.0.1"})
		if err != nil {
			t.Fatalf("step %d: join: %v", step, err)
		}
		c.join = ch
	case o < 40:
		if c.sync != nil || c.memberID == "" {
			return
		}
		var as []group.Assignment
		for _, o := range r.clients {
			if o.memberID != "" {
				as = append(as, group.Assignment{MemberID: o.memberID, Assignment: []byte(o.name + fmt.Sprint(step))})
			}
		}
		ch, err := co.Sync(movingGroup, group.SyncInput{MemberID: c.memberID, InstanceID: c.instance, Generation: c.gen, Assignments: as})
		if err != nil {
			t.Fatalf("step %d: sync: %v", step, err)
		}
		c.sync = ch
	case o < 60:
		if _, err := co.Heartbeat(movingGroup, group.HeartbeatInput{MemberID: c.memberID, InstanceID: c.instance, Generation: c.gen}); err != nil {
			t.Fatalf("step %d: heartbeat: %v", step, err)
		}
	case o < 65:
		lr, err := co.Leave(movingGroup, group.LeaveInput{Version: 3, Members: []group.LeaveMember{{MemberID: c.memberID, InstanceID: c.instance}}})
		if err != nil {
			t.Fatalf("step %d: leave: %v", step, err)
		}
		if lr.Members[0].Err == group.ErrNone {
			c.memberID = ""
		}
	case o < 70:
		wait, _, err := co.Commit(CommitInput{Group: movingGroup, Generation: c.gen, MemberID: c.memberID, InstanceID: c.instance,
			Offsets: map[offsets.TP]offsets.Offset{tp(0): {Offset: int64(step), LeaderEpoch: -1, ExpireTimestamp: -1}}})
		if err == nil {
			err = wait(context.Background())
		}
		_ = err // refused commits (ILLEGAL_GENERATION, ...) are the group's answers
	case o < 85:
		time.Sleep(time.Duration(rng.IntN(8000)) * time.Millisecond)
	case o < 95:
		synctest.Wait()
		r.collect()
		r.move(step)
	default:
		synctest.Wait()
		r.collect()
		r.evict(step)
	}
}

// collect delivers the answers that arrived to their clients.
func (r *moveRig) collect() {
	for _, c := range r.clients {
		if c.join != nil {
			select {
			case jr := <-c.join:
				c.join = nil
				switch jr.Err {
				case group.ErrNone:
					c.memberID, c.gen = jr.MemberID, jr.Generation
				case group.ErrMemberIDRequired:
					c.memberID = jr.MemberID
				case group.ErrUnknownMemberID, group.ErrFencedInstanceID:
					c.memberID = ""
				}
			default:
			}
		}
		if c.sync != nil {
			select {
			case <-c.sync:
				c.sync = nil
			default:
			}
		}
	}
}

// core runs f on the owner's resident state machine of the group, nil if
// none.
func (r *moveRig) core(f func(g *group.Group)) {
	s := r.coord().resident(movingGroup)
	if s == nil {
		f(nil)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.member == nil {
		f(nil)
		return
	}
	f(s.member.core)
}

// quiescent reports whether the owner's group holds nothing that is not
// durable: no client has a request parked, and no timer other than the
// sessions and the rebalance timeout is armed (a pending member id, a
// member waiting to sync and the initial delay each hold a timer).
func (r *moveRig) quiescent() bool {
	for _, c := range r.clients {
		if c.join != nil || c.sync != nil {
			return false
		}
	}
	quiet := true
	r.core(func(g *group.Group) {
		if g == nil {
			return
		}
		switch g.State() {
		case group.Empty, group.Stable, group.PreparingRebalance:
		default:
			quiet = false
		}
		for _, a := range g.Armed() {
			if a.Key.Kind != group.TimerSession && a.Key.Kind != group.TimerRebalanceTimeout {
				quiet = false
			}
		}
	})
	return quiet
}

// view is what the members and admins see of the group at a coordinator.
type view struct {
	Describe   group.Description
	Err        error
	Heartbeats map[string]group.Code // client → its heartbeat's answer
}

func (r *moveRig) look(c *Coordinator) view {
	d, err := c.Describe(movingGroup)
	v := view{Describe: d, Err: err, Heartbeats: map[string]group.Code{}}
	for _, cl := range r.clients {
		if cl.memberID == "" {
			continue
		}
		hb, err := c.Heartbeat(movingGroup, group.HeartbeatInput{MemberID: cl.memberID, InstanceID: cl.instance, Generation: cl.gen})
		if err != nil {
			r.t.Fatalf("heartbeat: %v", err)
		}
		v.Heartbeats[cl.name] = hb.Err
	}
	return v
}

func (r *moveRig) reassign(to string) {
	prev := r.placed
	r.placed = assignment(prev.AssignmentVersion+1, 3, nil, map[string]string{movingGroup: to})
	for _, c := range r.brokers {
		c.Apply(prev, r.placed)
	}
}

// fileSnapshot is the membership the group's file records, as a snapshot.
func (r *moveRig) fileSnapshot() (group.Snapshot, bool) {
	st, err := offsets.Open(offsets.Options{Dir: offsetsDir(r.dir)})
	if err != nil {
		r.t.Fatal(err)
	}
	defer st.Close()
	mem, _, err := st.GroupState(movingGroup, offsets.Fence{})
	if err != nil {
		r.t.Fatal(err)
	}
	if mem == nil {
		return group.Snapshot{}, false
	}
	return snapshotOf(mem), true
}

// durable is what of a snapshot a move keeps (docs/group.md, "Durable
// state"), with empty byte strings as the file stores them (absent).
func durable(s group.Snapshot) group.Snapshot {
	if len(s.Members) == 0 {
		return group.Snapshot{ProtocolType: s.ProtocolType, Generation: s.Generation}
	}
	s.Members = slices.Clone(s.Members)
	for i := range s.Members {
		m := &s.Members[i]
		if s.Rebalancing || len(m.Assignment) == 0 {
			m.Assignment = nil
		}
		m.Protocols = slices.Clone(m.Protocols)
		for j := range m.Protocols {
			if len(m.Protocols[j].Metadata) == 0 {
				m.Protocols[j].Metadata = nil
			}
		}
	}
	return s
}

// move moves the group to the other broker and compares.
func (r *moveRig) move(step int) {
	t := r.t
	quiet := r.quiescent()
	var before view
	var current group.Snapshot
	if quiet {
		before = r.look(r.coord())
		r.core(func(g *group.Group) {
			if g != nil {
				current = g.Snapshot()
			}
		})
	}
	r.owner = 1 - r.owner
	r.reassign(fmt.Sprintf("kaas-%d", r.owner))
	synctest.Wait()
	r.collect() // parked requests were answered NOT_COORDINATOR
	written, ok := r.fileSnapshot()
	if quiet {
		r.quietMoves++
		if got, want := durable(written), durable(current); !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: with nothing parked or pending the file records\n%+v\nnot the group\n%+v", step, got, want)
		}
		if after := r.look(r.coord()); !reflect.DeepEqual(after, before) {
			t.Fatalf("step %d: the group moved:\nbefore %+v\nafter  %+v", step, before, after)
		}
		return
	}
	r.busyMoves++
	r.loadedAsFile(step, "the move", written, ok)
}

// loadedAsFile checks the group that the owner loaded from the file (it
// was not resident): it is described as written loaded by group.Restore,
// and each member the file records is answered as docs/group.md promises.
func (r *moveRig) loadedAsFile(step int, what string, written group.Snapshot, ok bool) {
	t := r.t
	d, err := r.coord().Describe(movingGroup)
	if !ok {
		if err == nil && (d.State != "Empty" || len(d.Members) > 0) {
			t.Fatalf("step %d: after %s a group without membership on file is described %+v", step, what, d)
		}
		return
	}
	loaded := group.New(movingGroup, r.cfg)
	if _, err := loaded.Restore(time.Now(), written); err != nil {
		t.Fatalf("step %d: the file's membership does not load: %v", step, err)
	}
	want := loaded.Describe()
	if loaded.Empty() && loaded.Generation() == 0 {
		want = group.Description{State: "Empty"}
	}
	if err != nil || !reflect.DeepEqual(d, want) {
		t.Fatalf("step %d: after %s the group is described\n%+v (%v)\nnot as its file\n%+v", step, what, d, err, want)
	}
	code := group.ErrNone
	if written.Rebalancing {
		code = group.ErrRebalanceInProgress
	}
	for _, m := range written.Members {
		var inst *string
		if m.InstanceID != "" {
			inst = &m.InstanceID
		}
		hb, err := r.coord().Heartbeat(movingGroup, group.HeartbeatInput{MemberID: m.MemberID, InstanceID: inst, Generation: written.Generation})
		if err != nil || hb.Err != code {
			t.Fatalf("step %d: member %s's heartbeat after %s: %v %s, want %s", step, m.MemberID, what, err, hb.Err, code)
		}
	}
}

// evict evicts the group if it is idle (no members; KIP-394 pending ids
// may exist) and loads it back.
func (r *moveRig) evict(step int) {
	time.Sleep(time.Millisecond) // idle for longer than 0
	quiet := r.quiescent()
	var before view
	if quiet {
		before = r.look(r.coord())
	}
	if r.coord().EvictIdle(0) == 0 {
		return
	}
	r.evictions++
	synctest.Wait()
	r.collect()
	if !quiet {
		written, ok := r.fileSnapshot()
		r.loadedAsFile(step, "an eviction", written, ok)
		return
	}
	if after := r.look(r.coord()); !reflect.DeepEqual(after, before) {
		r.t.Fatalf("step %d: evicted and loaded back:\nbefore %+v\nafter  %+v", step, before, after)
	}
}

// warnings is a slog.Handler that keeps the messages of level Warn and
// above.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, rec slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := rec.Message
	rec.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	w.msgs = append(w.msgs, msg)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}
