package group

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// client is what a simulated consumer remembers.
type client struct {
	name     string
	instance *string
	memberID string
	gen      int32
	joining  bool // has a JoinGroup in flight
	syncing  bool
	proto    []Protocol
}

// TestRandomized drives one group with many simulated clients doing random
// joins, syncs, heartbeats, leaves, commits and restarts (plus nonsense ids
// and generations) and random time steps. After every input the shell
// checks: no panic, the invariants, every transition in the table, no bug
// event, each request answered at most once, the generation never going
// back. At the end time runs on with no input until nothing is parked (every
// request answered exactly once), then Unload.
func TestRandomized(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 20
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runRandom(t, uint64(seed)) })
	}
}

// driver is the random workload of one seed: simulated clients and the
// next input they send. An op it draws can be given to more than one group
// (TestMoveKeepsTheGroup gives it to a group and to its restored copy).
type driver struct {
	rng     *rand.Rand
	cfg     Config // without NewMemberID: see config
	clients []*client
	protos  [][]Protocol
	refN    int
	owner   map[any]*client
}

// driverProtos are the protocol lists clients pick from: "range" with
// consumer metadata (so the group knows its subscribed topics) or with
// bytes that do not decode as such, "rr" without metadata.
var driverProtos = [][]Protocol{
	{{Name: "range", Metadata: consumerMeta("orders")}},
	{{Name: "range", Metadata: consumerMeta("orders", "payments")}, {Name: "rr"}},
	{{Name: "rr"}, {Name: "range", Metadata: []byte("r2")}},
	{{Name: "sticky", Metadata: consumerMeta("audit")}},
	{{Name: "rr"}},
	{{Name: "range", Metadata: consumerMeta("payments")}, {Name: "sticky", Metadata: consumerMeta("payments")}},
}

func newDriver(seed uint64) *driver {
	rng := rand.New(rand.NewPCG(seed, seed*7919+1))
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay = []time.Duration{0, time.Second, 3 * time.Second}[rng.IntN(3)]
	cfg.MaxSize = []int{0, 0, 3, 5}[rng.IntN(4)]
	cfg.NewMemberJoinTimeout = time.Minute
	d := &driver{rng: rng, cfg: cfg, protos: driverProtos, owner: map[any]*client{}}
	for i := range 2 + rng.IntN(8) {
		c := &client{name: fmt.Sprintf("c%d", i), proto: d.protos[rng.IntN(len(d.protos))]}
		if rng.IntN(3) == 0 {
			inst := fmt.Sprintf("i%d", i)
			c.instance = &inst
		}
		d.clients = append(d.clients, c)
	}
	return d
}

// config is the driver's Config with member ids "<prefix>-<n>" counted in
// *n: a group restored from another one's snapshot gets a copy of the
// other's counter, so it never hands out an id in use and, given the same
// inputs, hands out the same ids.
func (d *driver) config(n *int) Config {
	cfg := d.cfg
	cfg.NewMemberID = func(prefix string) string { *n++; return fmt.Sprintf("%s-%d", prefix, *n) }
	return cfg
}

// opKind is what an op does.
type opKind int

const (
	opNone opKind = iota
	opJoin
	opSync
	opHeartbeat
	opLeave
	opCommit
	opDelete
	opStaleTimer // the shell delivers a stale firing of the first armed slot
	opAdvance    // time passes: due timers fire
)

// op is one input drawn by the driver, replayable on any group.
type op struct {
	kind    opKind
	ref     string
	join    JoinInput
	sync    SyncInput
	hb      HeartbeatInput
	leave   LeaveInput
	commit  CommitCheck
	advance time.Duration
}

// next draws the next op. It marks the client's request in flight; the
// shells the op is given to record its ref (fakeShell.request).
func (d *driver) next() op {
	rng := d.rng
	clients := d.clients
	c := clients[rng.IntN(len(clients))]
	memberID := c.memberID
	gen := c.gen
	if rng.IntN(10) == 0 {
		memberID = []string{"", "bogus", clients[rng.IntN(len(clients))].memberID}[rng.IntN(3)]
	}
	if rng.IntN(10) == 0 {
		gen += int32(rng.IntN(3)) - 1
	}
	newRef := func(kind string) string {
		d.refN++
		r := fmt.Sprintf("%s-%s-%d", kind, c.name, d.refN)
		d.owner[r] = c
		return r
	}
	switch o := rng.IntN(100); {
	case o < 25:
		if c.joining && rng.IntN(4) != 0 {
			return op{}
		}
		if rng.IntN(8) == 0 {
			c.proto = d.protos[rng.IntN(len(d.protos))]
		}
		if rng.IntN(10) == 0 && c.instance != nil {
			memberID = "" // static restart
		}
		c.joining = true
		ref := newRef("join")
		return op{kind: opJoin, ref: ref, join: JoinInput{
			Ref: ref, Version: int16(rng.IntN(10)), MemberID: memberID, InstanceID: c.instance,
			ProtocolType: "consumer", Protocols: c.proto,
			SessionTimeout: time.Duration(6+rng.IntN(10)) * time.Second, RebalanceTimeout: time.Duration(5+rng.IntN(30)) * time.Second,
			ClientID: c.name,
		}}
	case o < 40:
		c.syncing = true
		var as []Assignment
		for _, o := range clients {
			if o.memberID != "" && rng.IntN(4) != 0 {
				as = append(as, Assignment{MemberID: o.memberID, Assignment: []byte(o.name)})
			}
		}
		ref := newRef("sync")
		return op{kind: opSync, ref: ref, sync: SyncInput{Ref: ref, MemberID: memberID, InstanceID: c.instance, Generation: gen, Assignments: as}}
	case o < 65:
		ref := newRef("heartbeat")
		return op{kind: opHeartbeat, ref: ref, hb: HeartbeatInput{Ref: ref, MemberID: memberID, InstanceID: c.instance, Generation: gen}}
	case o < 70:
		ref := newRef("leave")
		in := LeaveInput{Ref: ref, Version: int16(rng.IntN(6))}
		in.Members = append(in.Members, LeaveMember{MemberID: memberID, InstanceID: c.instance})
		if in.Version >= 3 && rng.IntN(3) == 0 && c.instance != nil {
			in.Members = append(in.Members, LeaveMember{InstanceID: c.instance})
		}
		return op{kind: opLeave, ref: ref, leave: in}
	case o < 78:
		return op{kind: opCommit, commit: CommitCheck{MemberID: memberID, InstanceID: c.instance, Generation: gen, Transactional: rng.IntN(4) == 0}}
	case o < 79:
		if rng.IntN(5) == 0 {
			return op{kind: opDelete}
		}
		return op{}
	case o < 80:
		return op{kind: opStaleTimer}
	default:
		return op{kind: opAdvance, advance: time.Duration(rng.IntN(4000)) * time.Millisecond}
	}
}

// requestKind is the fakeShell kind of an op's request, "" if it has none.
func (o op) requestKind() string {
	switch o.kind {
	case opJoin:
		return "join"
	case opSync:
		return "sync"
	case opHeartbeat:
		return "heartbeat"
	case opLeave:
		return "leave"
	}
	return ""
}

// apply gives op (not opAdvance) to g at now. code is the CheckCommit or
// Delete answer.
func (o op) apply(g *Group, now time.Time) (out Output, code Code) {
	switch o.kind {
	case opJoin:
		out = g.Join(now, o.join)
	case opSync:
		out = g.Sync(now, o.sync)
	case opHeartbeat:
		out = g.Heartbeat(now, o.hb)
	case opLeave:
		out = g.Leave(now, o.leave)
	case opCommit:
		code, out = g.CheckCommit(now, o.commit)
	case opDelete:
		code, out = g.Delete()
	case opStaleTimer:
		for _, a := range g.Armed() {
			out = g.Timer(now, a.Key, a.Seq-1)
			break
		}
	}
	return out, code
}

// learn applies responses to the clients that sent them.
func (d *driver) learn(out Output) {
	for _, j := range out.Joins {
		c := d.owner[j.Ref]
		c.joining = false
		switch j.Err {
		case ErrNone:
			c.memberID, c.gen = j.MemberID, j.Generation
		case ErrMemberIDRequired:
			c.memberID = j.MemberID
		case ErrUnknownMemberID, ErrFencedInstanceID:
			c.memberID = ""
		}
	}
	for _, r := range out.Syncs {
		d.owner[r.Ref].syncing = false
	}
}

// step draws one op and performs it on the group of s, checking the shell.
// It reports false when the group was deleted (the run ends).
func (d *driver) step(t *testing.T, s *fakeShell, step int, visit func(Output)) bool {
	t.Helper()
	o := d.next()
	switch o.kind {
	case opNone:
	case opAdvance:
		s.advance(o.advance, func(_ TimerArm, out Output) { d.learn(out); visit(out) })
	default:
		if k := o.requestKind(); k != "" {
			s.request(k, o.ref)
		}
		out, _ := o.apply(s.g, s.now)
		d.learn(out)
		visit(out)
		s.apply(out)
	}
	checkShell(t, s, step)
	return s.g.State() != Dead
}

// quiesce runs time on with no input until nothing is parked, checks that
// every request was answered exactly once, and unloads the group.
func (d *driver) quiesce(t *testing.T, s *fakeShell, step int, visit func(Output)) {
	t.Helper()
	for i := 0; i < 100 && len(s.open) > 0; i++ {
		s.advance(10*time.Second, func(_ TimerArm, out Output) { d.learn(out); visit(out) })
	}
	checkShell(t, s, step)
	if len(s.open) > 0 {
		t.Fatalf("requests never answered: %v (state %s)", sortedRefs(s.open), s.g.State())
	}
	out := s.g.Unload()
	d.learn(out)
	s.apply(out)
	checkShell(t, s, step+1)
	if s.g.State() != Dead || len(s.timers) != 0 {
		t.Fatalf("after Unload: state %s, %d timers", s.g.State(), len(s.timers))
	}
}

func runRandom(t *testing.T, seed uint64) {
	d := newDriver(seed)
	n := 0
	s := newFakeShell(New("g", d.config(&n)), t0)
	nop := func(Output) {}
	steps := 300 + d.rng.IntN(300)
	for step := range steps {
		if !d.step(t, s, step, nop) {
			return
		}
		if t.Failed() {
			return
		}
	}
	d.quiesce(t, s, steps, nop)
}

func checkShell(t *testing.T, s *fakeShell, step int) {
	t.Helper()
	for _, e := range s.errs {
		t.Errorf("step %d: %v", step, e)
	}
	s.errs = nil
}

// TestRandomizedUnloadMidway unloads at a random point: every parked
// request must be answered NOT_COORDINATOR by Unload itself.
func TestRandomizedUnloadMidway(t *testing.T) {
	for seed := range 50 {
		rng := rand.New(rand.NewPCG(uint64(seed), 3))
		cfg := DefaultConfig()
		g := New("g", cfg)
		s := newFakeShell(g, t0)
		ids := []string{""}
		for i := range 20 + rng.IntN(40) {
			ref := fmt.Sprintf("r%d", i)
			switch rng.IntN(4) {
			case 0, 1:
				s.request("join", ref)
				out := g.Join(s.now, JoinInput{Ref: ref, Version: int16(rng.IntN(10)), MemberID: ids[rng.IntN(len(ids))], ProtocolType: "consumer",
					Protocols: []Protocol{{Name: "range"}}, SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second, ClientID: "c"})
				for _, j := range out.Joins {
					if j.MemberID != "" {
						ids = append(ids, j.MemberID)
					}
				}
				s.apply(out)
			case 2:
				s.request("sync", ref)
				s.apply(g.Sync(s.now, SyncInput{Ref: ref, MemberID: ids[rng.IntN(len(ids))], Generation: g.Generation()}))
			case 3:
				s.advance(time.Duration(rng.IntN(5000))*time.Millisecond, nil)
			}
		}
		s.apply(g.Unload())
		checkShell(t, s, 0)
		if len(s.open) != 0 || len(s.timers) != 0 {
			t.Fatalf("seed %d: after Unload: open %v, %d timers", seed, sortedRefs(s.open), len(s.timers))
		}
	}
}
