package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/testutil"
)

// TestClassicGroupOwnerChurnFencesNoMember is the classic protocol's side of
// TestConsumerGroupOwnerChurnFencesNoMember: three coordinators over one
// data dir, about 200 moves of one classic group (now and then freezing its
// coordinator in the middle of a request and leaving it behind for a few
// assignments), and four eager members, one static, each from its own
// goroutine: joining (the leader assigning the partitions), syncing,
// heartbeating, committing with their generation, rejoining when told, and
// now and then leaving. A request that meets NOT_COORDINATOR or
// COORDINATOR_LOAD_IN_PROGRESS goes to the next owner (a JoinGroup or
// SyncGroup parked when the group moved is answered NOT_COORDINATOR, and
// the member joins again there). Throughout, no member that has synced
// (so that a completed generation, which the group's file records, holds
// it) is answered UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION or
// FENCED_INSTANCE_ID, nor refused a commit; no partition is owned by two
// members; no generation a member completes goes back; and once the moves
// stop the group is Stable at one generation with every partition owned
// once. What a move may lose, as on Kafka (docs/group.md, "Durable
// state"), and only if an assignment came after the one a coordinator
// acted on when the member's id was given: a KIP-394 pending id or a
// member whose first generation was not completed (UNKNOWN_MEMBER_ID: it
// joins again without an id), and a join answer of a generation not
// completed (ILLEGAL_GENERATION at SyncGroup: it joins again). It found a follower's SyncGroup answered NONE for a
// generation whose write was refused
// (TestFollowerSyncBehindARefusedGenerationWriteFails).
func TestClassicGroupOwnerChurnFencesNoMember(t *testing.T) {
	churnSeeds(t, runClassicChurn)
}

// classicChurnMember is what a simulated eager consumer remembers.
type classicChurnMember struct {
	name     string
	instance *string
	id       string // "" until the coordinator names it
	gen      int32  // the last generation it synced in
	in       bool   // joined and synced, not told to rejoin since
	// durable: the member has synced with its id, so a completed
	// generation holds it and the group's file records it. Before that
	// (a KIP-394 pending id, a join whose generation was not completed)
	// a move may lose it: the next owner answers UNKNOWN_MEMBER_ID, as
	// Kafka's does, and the member joins again without an id.
	durable bool
	// since: the oldest assignment a coordinator acted on when the
	// request that gave the member its id was sent.
	since int64
	owned map[int32]bool
}

func runClassicChurn(t *testing.T, seed uint64) {
	const (
		brokers    = 3
		members    = 4
		partitions = 8
		maxSwaps   = 300
		runFor     = 2 * time.Second
		settleBy   = 20 * time.Second
		g          = "churn-classic"
	)
	rng := rand.New(rand.NewPCG(seed, 1))
	rig := newSwapRig(t, t.TempDir(), brokers, func(c *Config) { c.Group.InitialRebalanceDelay = 0 })
	first := rig.placeGroup(rng, 1, g, nil)
	rig.apply(rng, nil, first)

	var churn atomic.Bool // members leave now and then
	var (
		mu    sync.Mutex // guards ms, fails and the counts
		ms    = make([]*classicChurnMember, members)
		fails []string
		tlog  []string // see trace
		// counts, to show the property was exercised
		syncs, rejoins, parked, leaves, commits, retried, lostIDs, illegal int
	)
	for i := range ms {
		ms[i] = &classicChurnMember{name: fmt.Sprintf("c%d", i), owned: map[int32]bool{}}
		if i == 1 {
			inst := "static-1"
			ms[i].instance = &inst
		}
	}
	// trace keeps the last requests and their answers, shown when the
	// test fails; mu held.
	trace := func(line string) {
		if len(tlog) >= 2000 {
			tlog = slices.Delete(tlog, 0, 1000)
		}
		tlog = append(tlog, line)
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fails = append(fails, fmt.Sprintf(format, args...))
	}
	disjoint := func() error { // mu held
		seen := map[int32]string{}
		for _, m := range ms {
			for p := range m.owned {
				if o, dup := seen[p]; dup {
					return fmt.Errorf("members %s and %s both own partition %d", o, m.name, p)
				}
				seen[p] = m.name
			}
		}
		return nil
	}
	protos := []group.Protocol{{Name: "range", Metadata: []byte{0, 1}}}

	// do sends one request where a random broker says the group is, again
	// after NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (as an error
	// or as the answer of a request parked when the group moved); false
	// when it was not answered.
	do := func(r *rand.Rand, what string, req func(c *Coordinator) (group.Code, error)) (group.Code, bool) {
		code, again, err := rig.askCode(r, g, func(c *Coordinator, at string) (group.Code, error) {
			code, err := req(c)
			mu.Lock()
			defer mu.Unlock()
			trace(fmt.Sprintf("%s %s at %s: %v %v", time.Now().Format("05.000000"), what, at, group.ErrName(code), err))
			if err == nil && code == group.ErrNotCoordinator {
				parked++
			}
			return code, err
		})
		mu.Lock()
		retried += again
		mu.Unlock()
		if err != nil {
			fail("%s: %v", what, err)
			return code, false
		}
		return code, true
	}

	// join runs a join and a sync for m (the leader assigns the partitions
	// over the members, in the order of their ids); false when a request
	// went unanswered.
	join := func(r *rand.Rand, m *classicChurnMember) bool {
		mu.Lock()
		// Eager: it gives everything up before it joins.
		m.owned, m.in = map[int32]bool{}, false
		id, inst, durable, given := m.id, m.instance, m.durable, m.since
		mu.Unlock()
		// What a move may lose, it may lose only if the group may have
		// moved since the request that gave it: an assignment newer than
		// one some coordinator still acted on then.
		version := func() int64 { return rig.newest.Load().AssignmentVersion }
		var jr group.JoinResult
		for {
			sent := rig.oldestApplied()
			if id == "" {
				given = sent
			}
			code, ok := do(r, "join of "+m.name, func(c *Coordinator) (group.Code, error) {
				ch, err := c.Join(g, group.JoinInput{Version: 5, MemberID: id, InstanceID: inst, ProtocolType: "consumer",
					Protocols: protos, SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second})
				return await(ch, err, &jr, func(r group.JoinResult) group.Code { return r.Err })
			})
			if !ok {
				return false
			}
			switch {
			case code == group.ErrMemberIDRequired:
				id = jr.MemberID // KIP-394: join again with the id given
				continue
			case code == group.ErrUnknownMemberID && !durable && version() > given:
				mu.Lock()
				lostIDs++
				mu.Unlock()
				id = ""
				continue
			case code != group.ErrNone:
				fail("join of %s (%q): %s", m.name, id, group.ErrName(code))
				return true
			}
			break
		}
		var as []group.Assignment
		if jr.Leader == jr.MemberID {
			ids := make([]string, 0, len(jr.Members))
			for _, jm := range jr.Members {
				ids = append(ids, jm.MemberID)
			}
			slices.Sort(ids)
			share := map[string][]int32{}
			for p := range int32(partitions) {
				id := ids[int(p)%len(ids)]
				share[id] = append(share[id], p)
			}
			for _, id := range ids {
				data, _ := json.Marshal(share[id])
				as = append(as, group.Assignment{MemberID: id, Assignment: data})
			}
		}
		var sr group.SyncResult
		code, ok := do(r, "sync of "+m.name, func(c *Coordinator) (group.Code, error) {
			ch, err := c.Sync(g, group.SyncInput{MemberID: jr.MemberID, InstanceID: inst, Generation: jr.Generation, Assignments: as})
			return await(ch, err, &sr, func(r group.SyncResult) group.Code { return r.Err })
		})
		if !ok {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if jr.MemberID != m.id {
			m.durable = false
		}
		m.id, m.since = jr.MemberID, given
		switch {
		case code == group.ErrNone:
		case code == group.ErrRebalanceInProgress:
			rejoins++
			return true // it joins again at its next turn
		case code == group.ErrIllegalGeneration && version() > given:
			// It held the answer of a join phase the move cut short:
			// the next owner is at the generation before, and it joins
			// again (docs/group.md, "Durable state").
			illegal++
			return true
		case code == group.ErrUnknownMemberID && !m.durable && version() > given:
			lostIDs++
			m.id = ""
			return true
		default:
			fails = append(fails, fmt.Sprintf("sync of %s at generation %d: %s", m.name, jr.Generation, group.ErrName(code)))
			return true
		}
		var owned []int32
		trace(fmt.Sprintf("   %s joined generation %d (leader %v), synced %s", m.name, jr.Generation, jr.Leader == jr.MemberID, sr.Assignment))
		if err := json.Unmarshal(sr.Assignment, &owned); err != nil && len(sr.Assignment) > 0 {
			fails = append(fails, fmt.Sprintf("sync of %s: assignment %q: %v", m.name, sr.Assignment, err))
			return true
		}
		// The generations it completes never go back (one whose join
		// answer a move cut short may: the next owner is at the one
		// before).
		if jr.Generation < m.gen {
			fails = append(fails, fmt.Sprintf("%s: generation went back %d -> %d", m.name, m.gen, jr.Generation))
		}
		m.gen, m.in, m.durable = jr.Generation, true, true
		for _, p := range owned {
			m.owned[p] = true
		}
		syncs++
		if err := disjoint(); err != nil {
			fails = append(fails, err.Error())
		}
		return true
	}

	// run is member i's loop until stop: heartbeat, join again when told,
	// commit, and while churn now and then leave.
	run := func(i int, stop <-chan struct{}, r *rand.Rand) {
		m := ms[i]
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			id, gen, inst, in := m.id, m.gen, m.instance, m.in
			leaving := churn.Load() && in && r.IntN(150) == 0
			if leaving {
				m.owned, m.in, m.id, m.gen, m.durable = map[int32]bool{}, false, "", 0, false
				leaves++
			}
			owned := slices.Sorted(maps.Keys(m.owned))
			mu.Unlock()
			switch {
			case leaving:
				code, ok := do(r, "leave of "+m.name, func(c *Coordinator) (group.Code, error) {
					res, err := c.Leave(g, group.LeaveInput{Version: 3, Members: []group.LeaveMember{{MemberID: id, InstanceID: inst}}})
					if err == nil && res.Err == group.ErrNone && len(res.Members) == 1 {
						return res.Members[0].Err, nil
					}
					return res.Err, err
				})
				if !ok {
					return
				}
				// A leave whose first try landed before the group moved
				// finds the member gone at the next owner.
				if code != group.ErrNone && code != group.ErrUnknownMemberID {
					fail("leave of %s: %s", m.name, group.ErrName(code))
				}
			case !in:
				if !join(r, m) {
					return
				}
			default:
				code, ok := do(r, "heartbeat of "+m.name, func(c *Coordinator) (group.Code, error) {
					res, err := c.Heartbeat(g, group.HeartbeatInput{MemberID: id, InstanceID: inst, Generation: gen})
					return res.Err, err
				})
				if !ok {
					return
				}
				switch code {
				case group.ErrNone:
				case group.ErrRebalanceInProgress:
					mu.Lock()
					m.in = false
					rejoins++
					mu.Unlock()
				default:
					fail("heartbeat of %s (%s) at generation %d: %s", m.name, id, gen, group.ErrName(code))
				}
				if code == group.ErrNone && len(owned) > 0 && r.IntN(5) == 0 {
					mu.Lock()
					commits++
					mu.Unlock()
					offs := map[offsets.TP]offsets.Offset{}
					for _, p := range owned {
						offs[tp(p)] = offsets.Offset{Offset: int64(r.IntN(1000)), LeaderEpoch: -1, ExpireTimestamp: -1}
					}
					code, ok := do(r, "commit of "+m.name, func(c *Coordinator) (group.Code, error) {
						wait, refused, err := c.Commit(CommitInput{Group: g, Version: 8, Generation: gen, MemberID: id, InstanceID: inst, Offsets: offs})
						if err == nil && len(refused) > 0 {
							return 0, fmt.Errorf("partitions refused: %v", refused)
						}
						if err == nil {
							err = wait(context.Background())
						}
						var ce CodeError
						if errors.As(err, &ce) {
							return group.Code(ce), nil
						}
						return group.ErrNone, err
					})
					switch {
					case !ok:
						return
					case code == group.ErrRebalanceInProgress:
						// A rebalance began since the heartbeat: the
						// commit is refused as on Kafka, and the member
						// learns of it at its next heartbeat.
					case code != group.ErrNone:
						fail("commit of %s at generation %d: %s", m.name, gen, group.ErrName(code))
					}
				}
			}
			time.Sleep(time.Duration(200+r.IntN(1500)) * time.Microsecond)
		}
	}

	// The members run until the group is Stable after the moves; they
	// stop leaving once the moves stop.
	stop := make(chan struct{})
	churn.Store(true)
	var wg sync.WaitGroup
	for i := range ms {
		r := rand.New(rand.NewPCG(seed, uint64(10+i)))
		wg.Go(func() { run(i, stop, r) })
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	owners := 0
	freezes := rig.churn(rng, first, maxSwaps, runFor, func(prev *cluster.Assignment) int { return rig.ownerOf(prev, g) },
		func(v int64, dead []string) *cluster.Assignment { return rig.placeGroup(rng, v, g, dead) },
		func(prev, next *cluster.Assignment) {
			if rig.ownerOf(prev, g) != rig.ownerOf(next, g) {
				owners++
			}
		})
	churn.Store(false)
	mu.Lock()
	summary := fmt.Sprintf("seed %d: %d owner changes (%d freezing the owner, %d requests frozen before their write); %d syncs, %d rejoins, %d leaves, %d commits, %d requests sent again to the next owner (%d answered NOT_COORDINATOR); ids not yet durable lost by a move %d, joins cut short %d",
		seed, owners, freezes, rig.stalled.Load(), syncs, rejoins, leaves, commits, retried, parked, lostIDs, illegal)
	exercised := owners > 0 && syncs > 0 && rejoins > 0 && retried > 0 && commits > 0
	moving := slices.Clone(fails)
	lastRequests := strings.Join(tlog, "\n")
	mu.Unlock()
	t.Log(summary)
	if !exercised {
		t.Fatal("the group never moved, or no member synced, rejoined, committed or met a move")
	}
	if len(moving) > 0 {
		t.Logf("the last requests:\n%s", lastRequests)
		t.Fatalf("while the group moved:\n%s", strings.Join(moving, "\n"))
	}

	// Quiet: the members go on at one owner until the group is Stable.
	settled := func() error {
		mu.Lock()
		defer mu.Unlock()
		owned := 0
		for _, m := range ms {
			if !m.in || m.gen != ms[0].gen {
				return fmt.Errorf("%s not in generation %d", m.name, ms[0].gen)
			}
			owned += len(m.owned)
		}
		if owned != partitions {
			return fmt.Errorf("%d of %d partitions owned", owned, partitions)
		}
		return disjoint()
	}
	notSettled := testutil.Poll(settleBy, settled)
	close(stop)
	wg.Wait()
	if len(fails) > 0 {
		t.Fatalf("after the group stopped moving:\n%s", strings.Join(fails, "\n"))
	}
	if notSettled != nil {
		for _, m := range ms {
			t.Logf("%s (%s) in=%v generation=%d owned=%v", m.name, m.id, m.in, m.gen, slices.Sorted(maps.Keys(m.owned)))
		}
		t.Fatalf("not Stable after the last move: %v", notSettled)
	}
}
