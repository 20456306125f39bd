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

func runRandom(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*7919+1))
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay = []time.Duration{0, time.Second, 3 * time.Second}[rng.IntN(3)]
	cfg.MaxSize = []int{0, 0, 3, 5}[rng.IntN(4)]
	cfg.NewMemberJoinTimeout = time.Minute
	n := 0
	cfg.NewMemberID = func(prefix string) string { n++; return fmt.Sprintf("%s-%d", prefix, n) }
	g := New("g", cfg)
	s := newFakeShell(g, t0)
	protos := [][]Protocol{
		{{Name: "range", Metadata: []byte("r")}},
		{{Name: "range", Metadata: []byte("r")}, {Name: "rr"}},
		{{Name: "rr"}, {Name: "range", Metadata: []byte("r2")}},
		{{Name: "sticky"}},
	}
	var clients []*client
	for i := range 2 + rng.IntN(8) {
		c := &client{name: fmt.Sprintf("c%d", i), proto: protos[rng.IntN(len(protos))]}
		if rng.IntN(3) == 0 {
			inst := fmt.Sprintf("i%d", i)
			c.instance = &inst
		}
		clients = append(clients, c)
	}
	refN := 0
	newRef := func(kind string, c *client) string {
		refN++
		r := fmt.Sprintf("%s-%s-%d", kind, c.name, refN)
		s.request(kind, r)
		return r
	}
	owner := map[any]*client{}
	// learn applies responses to the clients that sent them.
	learn := func(out Output) {
		for _, j := range out.Joins {
			c := owner[j.Ref]
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
			owner[r.Ref].syncing = false
		}
	}
	do := func(out Output) {
		learn(out)
		s.apply(out)
	}
	steps := 300 + rng.IntN(300)
	for step := range steps {
		c := clients[rng.IntN(len(clients))]
		memberID := c.memberID
		gen := c.gen
		if rng.IntN(10) == 0 {
			memberID = []string{"", "bogus", clients[rng.IntN(len(clients))].memberID}[rng.IntN(3)]
		}
		if rng.IntN(10) == 0 {
			gen += int32(rng.IntN(3)) - 1
		}
		switch op := rng.IntN(100); {
		case op < 25:
			if c.joining && rng.IntN(4) != 0 {
				break
			}
			if rng.IntN(8) == 0 {
				c.proto = protos[rng.IntN(len(protos))]
			}
			if rng.IntN(10) == 0 && c.instance != nil {
				memberID = "" // static restart
			}
			ref := newRef("join", c)
			owner[ref] = c
			c.joining = true
			do(g.Join(s.now, JoinInput{
				Ref: ref, Version: int16(rng.IntN(10)), MemberID: memberID, InstanceID: c.instance,
				ProtocolType: "consumer", Protocols: c.proto,
				SessionTimeout: time.Duration(6+rng.IntN(10)) * time.Second, RebalanceTimeout: time.Duration(5+rng.IntN(30)) * time.Second,
				ClientID: c.name,
			}))
		case op < 40:
			ref := newRef("sync", c)
			owner[ref] = c
			c.syncing = true
			var as []Assignment
			for _, o := range clients {
				if o.memberID != "" && rng.IntN(4) != 0 {
					as = append(as, Assignment{MemberID: o.memberID, Assignment: []byte(o.name)})
				}
			}
			do(g.Sync(s.now, SyncInput{Ref: ref, MemberID: memberID, InstanceID: c.instance, Generation: gen, Assignments: as}))
		case op < 65:
			do(g.Heartbeat(s.now, HeartbeatInput{Ref: newRef("heartbeat", c), MemberID: memberID, InstanceID: c.instance, Generation: gen}))
		case op < 70:
			in := LeaveInput{Ref: newRef("leave", c), Version: int16(rng.IntN(6))}
			in.Members = append(in.Members, LeaveMember{MemberID: memberID, InstanceID: c.instance})
			if in.Version >= 3 && rng.IntN(3) == 0 && c.instance != nil {
				in.Members = append(in.Members, LeaveMember{InstanceID: c.instance})
			}
			do(g.Leave(s.now, in))
		case op < 78:
			_, out := g.CheckCommit(s.now, CommitCheck{MemberID: memberID, InstanceID: c.instance, Generation: gen, Transactional: rng.IntN(4) == 0})
			do(out)
		case op < 79:
			if rng.IntN(5) == 0 {
				_, out := g.Delete()
				do(out)
				if g.State() == Dead {
					checkShell(t, s, step)
					return
				}
			}
		case op < 80:
			// The shell delivers a stale firing of some slot.
			for _, a := range g.Armed() {
				do(g.Timer(s.now, a.Key, a.Seq-1))
				break
			}
		default:
			s.advance(time.Duration(rng.IntN(4000))*time.Millisecond, func(_ TimerArm, out Output) { learn(out) })
		}
		checkShell(t, s, step)
		if t.Failed() {
			return
		}
	}
	// Quiesce: with no more input every parked request must be answered.
	for i := 0; i < 100 && len(s.open) > 0; i++ {
		s.advance(10*time.Second, func(_ TimerArm, out Output) { learn(out) })
	}
	checkShell(t, s, steps)
	if len(s.open) > 0 {
		t.Fatalf("requests never answered: %v (state %s)", sortedRefs(s.open), g.State())
	}
	do(g.Unload())
	checkShell(t, s, steps+1)
	if g.State() != Dead || len(s.timers) != 0 {
		t.Fatalf("after Unload: state %s, %d timers", g.State(), len(s.timers))
	}
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
