package coord

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestConsumerGroupOwnerChurnFencesNoMember is the KIP-848 side of
// TestOwnerChangeStressNoStaleStampNoRewind: three coordinators over one
// data dir, a swapper that moves one consumer group between them while
// its members heartbeat from their own goroutines (each new assignment
// reaches the brokers one by one, in a random order, with pauses), the
// topic growing now and then, and members leaving and rejoining. Two of
// the six are classic members of the consumer group (JoinGroup, SyncGroup,
// Heartbeat, LeaveGroup; a consumer-protocol member stays in throughout,
// so the group never turns classic). A member asks whichever broker a
// random one names, and on NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
// sends its request there again (a full heartbeat), as the clients do.
// Throughout:
//
//   - no member that heartbeats is ever answered UNKNOWN_MEMBER_ID or
//     FENCED_MEMBER_EPOCH (a classic one ILLEGAL_GENERATION or
//     UNKNOWN_MEMBER_ID), nor refused a commit: a move is invisible to it;
//   - no partition is owned by two members at once, by what each was told
//     (a member gives up a revoked partition before it says so);
//   - a member's epoch never goes back;
//
// and once the swapper stops, the group reaches one epoch with every
// partition owned once and shared evenly.
func TestConsumerGroupOwnerChurnFencesNoMember(t *testing.T) {
	churnSeeds(t, runConsumerChurn)
}

// churnMember is what a simulated consumer remembers.
type churnMember struct {
	id       string
	instance *string // a static member's group.instance.id
	classic  bool    // speaks JoinGroup, SyncGroup and Heartbeat
	rejoin   bool    // classic: told to rejoin
	in       bool
	epoch    int32
	owned    map[cgroup.TP]bool
	sent     map[cgroup.TP]bool // what it last reported owning
	full     bool               // the next heartbeat repeats every field
}

func (m *churnMember) ownedList() []cgroup.TopicPartitions {
	byTopic := map[cgroup.TopicID][]int32{}
	for tp := range m.owned {
		byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
	}
	out := []cgroup.TopicPartitions{}
	for id, ps := range byTopic {
		slices.Sort(ps)
		out = append(out, cgroup.TopicPartitions{Topic: id, Partitions: ps})
	}
	return out
}

func runConsumerChurn(t *testing.T, seed uint64) {
	const (
		brokers  = 3
		members  = 6
		classics = 2 // the last members are classic ones
		maxSwaps = 300
		runFor   = 2 * time.Second
		settleBy = 20 * time.Second
		g        = "churn-848"
	)
	topic := cgroup.TopicID{8, 4, 8}
	var parts atomic.Int32
	parts.Store(8)
	image := func() *cgroup.Image {
		return cgroup.NewImage(cgroup.Topic{Name: "t", ID: topic, Partitions: parts.Load()})
	}
	rng := rand.New(rand.NewPCG(seed, 848))
	cc := cgroup.DefaultConfig()
	cc.JoinLinger = []time.Duration{0, cgroup.DefaultJoinLinger}[seed%2]
	rig := newSwapRig(t, t.TempDir(), brokers, func(c *Config) { c.Consumer = cc })
	for _, c := range rig.coords {
		c.SetTopics(image)
	}
	first := rig.placeGroup(rng, 1, g, nil)
	rig.apply(rng, nil, first)

	var (
		mu    sync.Mutex // guards ms and the counts below
		ms    = make([]*churnMember, members)
		fails []string
		// counts, to show the property was exercised
		answers, revoked, retried, lostN, leaves, commits, syncs int
	)
	for i := range ms {
		ms[i] = &churnMember{id: fmt.Sprintf("m%d", i), owned: map[cgroup.TP]bool{}, classic: i >= members-classics}
		if ms[i].classic {
			ms[i].id = "" // the coordinator names it
		} else if i%2 == 1 {
			inst := fmt.Sprintf("i%d", i)
			ms[i].instance = &inst
		}
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(fails) < 10 {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	// disjoint reports a partition two members were told they own; mu held.
	disjoint := func() error {
		seen := map[cgroup.TP]string{}
		for _, m := range ms {
			for tp := range m.owned {
				if o, dup := seen[tp]; dup {
					return fmt.Errorf("members %s and %s both own %v", o, m.id, tp)
				}
				seen[tp] = m.id
			}
		}
		return nil
	}

	// take makes what member m owns the partitions each topic's list
	// names, counting a revocation; mu held.
	take := func(m *churnMember, topics map[cgroup.TopicID][]int32) {
		now := map[cgroup.TP]bool{}
		for id, ps := range topics {
			for _, p := range ps {
				now[cgroup.TP{Topic: id, Partition: p}] = true
			}
		}
		for tp := range m.owned {
			if !now[tp] {
				revoked++
				break
			}
		}
		m.owned = now
		answers++
		if err := disjoint(); err != nil {
			fails = append(fails, err.Error())
		}
	}

	// send delivers one heartbeat where a random broker says the group is,
	// again (a full request) while the group is moving, as a client does
	// after NOT_COORDINATOR; false when it is not answered.
	send := func(r *rand.Rand, m *churnMember, in cgroup.HeartbeatInput) (cgroup.HeartbeatResult, bool) {
		var res cgroup.HeartbeatResult
		again, err := rig.ask(r, g, func(c *Coordinator, _ string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			if res, err = c.ConsumerHeartbeat(ctx, g, in); err != nil {
				if in.MemberEpoch >= 0 {
					in.RebalanceTimeoutMs, in.SubscribedTopicNames = 30_000, []string{"t"}
				}
				if in.MemberEpoch > 0 && !in.OwnedSent {
					mu.Lock()
					in.OwnedSent, in.OwnedTopicPartitions = true, m.ownedList()
					mu.Unlock()
				}
			}
			return err
		})
		mu.Lock()
		retried += again
		mu.Unlock()
		if err != nil {
			fail("%s epoch %d: %v", in.MemberID, in.MemberEpoch, err)
			return res, false
		}
		return res, true
	}

	// commit commits offsets for what member m owns at its epoch, with
	// OffsetCommit v9 or in a transaction (TxnOffsetCommit with the
	// member's id and epoch, then the commit marker), and checks OffsetFetch
	// v9's member gate and reads the offsets back, each where a random
	// broker says the group is, again after NOT_COORDINATOR: none is
	// refused, and the offsets read are those committed.
	var offset atomic.Int64
	commit := func(r *rand.Rand, id string, classic bool, epoch int32, owned []cgroup.TopicPartitions) {
		txn := r.IntN(2) == 0
		pid := 1000 + offset.Add(1) // a producer of its own
		offs := map[offsets.TP]offsets.Offset{}
		for _, tps := range owned {
			for _, p := range tps.Partitions {
				offs[offsets.TP{Topic: "t", Partition: p}] = offsets.Offset{Offset: offset.Add(1), LeaderEpoch: -1, ExpireTimestamp: -1}
			}
		}
		steps := []string{"commit", "fetch"}
		if txn {
			steps = []string{"transactional commit", "transaction marker", "fetch"}
		}
		for _, step := range steps {
			var refused map[offsets.TP]error
			_, err := rig.ask(r, g, func(c *Coordinator, _ string) error {
				var err error
				switch step {
				case "commit":
					version := int16(9)
					if classic {
						version = 8
					}
					var wait func(context.Context) error
					wait, refused, err = c.Commit(CommitInput{Group: g, Version: version, Generation: epoch, MemberID: id, Offsets: offs})
					if err == nil && len(refused) == 0 {
						err = wait(context.Background())
					}
				case "transactional commit":
					refused, err = c.TxnCommit(context.Background(), TxnCommitInput{Group: g, TransactionalID: fmt.Sprint("tx-", pid),
						ProducerID: pid, Generation: epoch, MemberID: id, Offsets: offs})
				case "transaction marker":
					err = c.EndTxnOffsets(context.Background(), g, pid, true)
				default:
					// The member reads back what it committed: nobody
					// else may commit its partitions meanwhile.
					if !classic {
						err = c.CheckFetch(g, &id, epoch)
					}
					if err == nil {
						var got map[offsets.TP]offsets.Offset
						if got, err = c.Fetch(g, nil); err == nil {
							for tp, o := range offs {
								if got[tp].Offset != o.Offset {
									fail("%s epoch %d: %v read back %d after committing %d", id, epoch, tp, got[tp].Offset, o.Offset)
								}
							}
						}
					}
				}
				return err
			})
			switch {
			case err != nil:
				fail("%s epoch %d: %s: %v", id, epoch, step, err)
				return
			case len(refused) > 0:
				fail("%s epoch %d: %s refused %v", id, epoch, step, refused)
				return
			}
		}
	}

	// classicAt delivers one classic request where a random broker says
	// the group is, again after NOT_COORDINATOR or
	// COORDINATOR_LOAD_IN_PROGRESS; false when it is not answered.
	classicAt := func(r *rand.Rand, what string, do func(c *Coordinator) (group.Code, error)) (group.Code, bool) {
		code, again, err := rig.askCode(r, g, func(c *Coordinator, _ string) (group.Code, error) { return do(c) })
		mu.Lock()
		retried += again
		mu.Unlock()
		if err != nil {
			fail("classic %s: %v", what, err)
			return code, false
		}
		return code, true
	}

	// classicStep is one turn of a classic (cooperative) member: heartbeat,
	// and join and sync when told to rejoin; while churn, now and then it
	// leaves (LeaveGroup) and joins again under a new member id. It owns
	// what its last SyncGroup gave it. False when a request went unanswered.
	classicStep := func(m *churnMember, churn bool, r *rand.Rand) bool {
		mu.Lock()
		id, gen, rejoin := m.id, m.epoch, !m.in || m.rejoin
		ready := ms[0].in // a classic join into an empty group would make it classic
		leaving := churn && m.in && !m.rejoin && r.IntN(200) == 0
		if leaving {
			m.owned, m.in, m.epoch, m.id = map[cgroup.TP]bool{}, false, 0, ""
			leaves++
		}
		var owned []int32
		for tp := range m.owned {
			owned = append(owned, tp.Partition)
		}
		mu.Unlock()
		switch {
		case !ready:
			return true
		case leaving:
			code, ok := classicAt(r, "leave", func(c *Coordinator) (group.Code, error) {
				res, err := c.Leave(g, group.LeaveInput{Version: 3, Members: []group.LeaveMember{{MemberID: id}}})
				if err == nil && res.Err == group.ErrNone && len(res.Members) == 1 {
					return res.Members[0].Err, nil
				}
				return res.Err, err
			})
			// A leave whose first try landed before the group moved
			// finds the member gone at the next owner.
			if ok && code != group.ErrNone && code != group.ErrUnknownMemberID {
				fail("leave of %s: %s", id, group.ErrName(code))
			}
			return ok
		case !rejoin:
			code, ok := classicAt(r, "heartbeat", func(c *Coordinator) (group.Code, error) {
				res, err := c.Heartbeat(g, group.HeartbeatInput{MemberID: id, Generation: gen})
				return res.Err, err
			})
			switch {
			case !ok:
				return false
			case code == group.ErrRebalanceInProgress:
				mu.Lock()
				m.rejoin = true
				mu.Unlock()
			case code != group.ErrNone:
				fail("classic heartbeat of %s at generation %d: %s", id, gen, group.ErrName(code))
			}
			return true
		}
		var jr group.JoinResult
		code, ok := classicAt(r, "join", func(c *Coordinator) (group.Code, error) {
			ch, err := c.Join(g, classicJoinIn(id, owned...))
			return await(ch, err, &jr, func(r group.JoinResult) group.Code { return r.Err })
		})
		if !ok {
			return false
		}
		if code != group.ErrNone {
			fail("classic join of %q owning %v: %s", id, owned, group.ErrName(code))
			return true
		}
		var sr group.SyncResult
		code, ok = classicAt(r, "sync", func(c *Coordinator) (group.Code, error) {
			ch, err := c.Sync(g, group.SyncInput{MemberID: jr.MemberID, Generation: jr.Generation})
			return await(ch, err, &sr, func(r group.SyncResult) group.Code { return r.Err })
		})
		if !ok {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		m.id, m.in, m.rejoin = jr.MemberID, true, false
		if jr.Generation < m.epoch {
			fails = append(fails, fmt.Sprintf("%s generation went back %d -> %d", m.id, m.epoch, jr.Generation))
		}
		m.epoch = jr.Generation
		switch code {
		case group.ErrNone:
		case group.ErrRebalanceInProgress:
			m.rejoin = true // the group moved on meanwhile: it rejoins
			return true
		default:
			fails = append(fails, fmt.Sprintf("classic sync of %s at generation %d: %s", m.id, jr.Generation, group.ErrName(code)))
			return true
		}
		var a kmsg.ConsumerMemberAssignment
		if err := a.ReadFrom(sr.Assignment); err != nil {
			fails = append(fails, fmt.Sprintf("classic sync of %s: assignment %v", m.id, err))
			return true
		}
		topics := map[cgroup.TopicID][]int32{}
		for _, at := range a.Topics {
			topics[topic] = append(topics[topic], at.Partitions...)
		}
		take(m, topics)
		syncs++
		if churn && len(m.owned) > 0 && r.IntN(3) == 0 {
			// Commits with its generation, as a classic consumer does.
			commits++
			id, gen, owned := m.id, m.epoch, m.ownedList()
			mu.Unlock()
			commit(r, id, true, gen, owned)
			mu.Lock()
		}
		return true
	}

	// run is member i's loop until stop: join, heartbeat, and while churn
	// now and then leave and join again, or lose an answer.
	run := func(i int, stop <-chan struct{}, churn bool, r *rand.Rand) {
		m := ms[i]
		for {
			select {
			case <-stop:
				return
			default:
			}
			if m.classic {
				if !classicStep(m, churn, r) {
					return
				}
				time.Sleep(time.Duration(200+r.IntN(1500)) * time.Microsecond)
				continue
			}
			mu.Lock()
			in := cgroup.HeartbeatInput{Version: 1, MemberID: m.id, MemberEpoch: m.epoch, RebalanceTimeoutMs: -1, InstanceID: m.instance}
			// m0 stays: with a consumer-protocol member always in, the
			// group never turns classic.
			leaving := churn && i > 0 && m.in && r.IntN(200) == 0
			switch {
			case !m.in:
				in.MemberEpoch, in.RebalanceTimeoutMs, in.SubscribedTopicNames = cgroup.JoinEpoch, 30_000, []string{"t"}
				in.OwnedSent, in.OwnedTopicPartitions = true, []cgroup.TopicPartitions{}
			case leaving:
				// It gives everything up before it says so. A static
				// member leaves for good or for a restart (-2: its
				// instance keeps the assignment for its next member id).
				in.MemberEpoch = cgroup.LeaveEpoch
				if m.instance != nil && r.IntN(2) == 0 {
					in.MemberEpoch = cgroup.StaticLeaveEpoch
					m.id += "'"
				}
				m.owned, m.in, m.epoch = map[cgroup.TP]bool{}, false, 0
			default:
				if m.full {
					in.RebalanceTimeoutMs, in.SubscribedTopicNames = 30_000, []string{"t"}
				}
				if m.full || !maps.Equal(m.owned, m.sent) || r.IntN(4) == 0 {
					in.OwnedSent, in.OwnedTopicPartitions = true, m.ownedList()
					m.sent = maps.Clone(m.owned)
				}
			}
			mu.Unlock()
			if in.OwnedSent && in.OwnedTopicPartitions == nil {
				in.OwnedTopicPartitions = []cgroup.TopicPartitions{}
			}
			res, ok := send(r, m, in)
			if !ok {
				return
			}
			mu.Lock()
			// Now and then an answer is lost on its way (not that of a
			// join or a leave): the member heartbeats again with what it
			// had, in full. Never two in a row: a member that missed two
			// answers may be two epochs behind, and is fenced (as on
			// Kafka, which accepts only the previous epoch).
			lost := churn && !leaving && !m.full && in.MemberEpoch > 0 && res.Err == cgroup.ErrNone && r.IntN(30) == 0
			switch {
			case lost:
				m.full = true
				lostN++
			case leaving:
				leaves++
				// A leave whose first try landed before the group moved
				// finds the member gone at the next owner.
				if res.Err != cgroup.ErrNone && res.Err != cgroup.ErrUnknownMemberID {
					fails = append(fails, fmt.Sprintf("leave of %s: %v %s", m.id, res.Err, res.ErrMessage))
				}
			case res.Err != cgroup.ErrNone:
				fails = append(fails, fmt.Sprintf("%s at epoch %d: %v %s", m.id, in.MemberEpoch, res.Err, res.ErrMessage))
				m.owned, m.in, m.epoch = map[cgroup.TP]bool{}, false, 0
			default:
				if res.MemberEpoch < m.epoch {
					fails = append(fails, fmt.Sprintf("%s epoch went back %d -> %d", m.id, m.epoch, res.MemberEpoch))
				}
				m.in, m.epoch, m.full = true, res.MemberEpoch, false
				if in.MemberEpoch == cgroup.JoinEpoch {
					m.sent = map[cgroup.TP]bool{}
				}
				if res.HasAssignment {
					topics := map[cgroup.TopicID][]int32{}
					for _, tps := range res.Assignment {
						topics[tps.Topic] = append(topics[tps.Topic], tps.Partitions...)
					}
					take(m, topics)
				} else {
					answers++
				}
			}
			id, epoch, owned := m.id, m.epoch, m.ownedList()
			commitNow := m.in && !m.full && len(owned) > 0 && r.IntN(5) == 0
			if commitNow {
				commits++
			}
			mu.Unlock()
			if commitNow {
				commit(r, id, m.classic, epoch, owned)
			}
			time.Sleep(time.Duration(200+r.IntN(1500)) * time.Microsecond)
		}
	}

	busy := make(chan struct{})
	var wg sync.WaitGroup
	for i := range ms {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() { run(i, busy, true, r) })
	}
	// Now and then the group's coordinator freezes (SIGSTOP) mid-request;
	// it is declared dead and the group moves on without it, until it
	// thaws a few assignments later. The topic grows now and then.
	owners, grown := 0, 0
	freezes := rig.churn(rng, first, maxSwaps, runFor, func(prev *cluster.Assignment) int { return rig.ownerOf(prev, g) },
		func(v int64, dead []string) *cluster.Assignment { return rig.placeGroup(rng, v, g, dead) },
		func(prev, next *cluster.Assignment) {
			if rig.ownerOf(prev, g) != rig.ownerOf(next, g) {
				owners++
			}
			if rng.IntN(20) == 0 && parts.Load() < 16 {
				parts.Add(1)
				grown++
			}
		})
	close(busy)
	wg.Wait()
	mu.Lock()
	t.Logf("seed %d: %d owner changes (%d freezing the owner, %d requests frozen before their write), topic grown %d times; %d answers (%d revoking, %d lost, %d classic syncs), %d leaves, %d commits, %d requests sent again to the next owner",
		seed, owners, freezes, rig.stalled.Load(), grown, answers, revoked, lostN, syncs, leaves, commits, retried)
	if owners == 0 || freezes == 0 || revoked == 0 || retried == 0 || commits == 0 || syncs == 0 {
		t.Fatal("the group never moved, its owner never froze, or no member revoked a partition, committed or met a move")
	}
	if len(fails) > 0 {
		t.Fatalf("while the group moved:\n%s", strings.Join(fails, "\n"))
	}
	for _, m := range ms {
		m.full = true // it heartbeats again after a pause
	}
	mu.Unlock()

	// Quiet: the members heartbeat on at one owner until the group is
	// reconciled.
	quiet := make(chan struct{})
	for i := range ms {
		r := rand.New(rand.NewPCG(seed, uint64(100+i)))
		wg.Go(func() { run(i, quiet, false, r) })
	}
	reconciled := func() error {
		mu.Lock()
		defer mu.Unlock()
		n, epoch, owned := int(parts.Load()), int32(-1), 0
		for _, m := range ms {
			if !m.in || (epoch >= 0 && m.epoch != epoch) {
				return fmt.Errorf("%s not in at epoch %d", m.id, epoch)
			}
			epoch = m.epoch
			if k := len(m.owned); k < n/members || k > n/members+1 {
				return fmt.Errorf("%s owns %d of %d partitions", m.id, k, n)
			}
			owned += len(m.owned)
		}
		if owned != n {
			return fmt.Errorf("%d of %d partitions owned", owned, n)
		}
		return disjoint()
	}
	notReconciled := testutil.Poll(settleBy, reconciled)
	close(quiet)
	wg.Wait()
	if len(fails) > 0 {
		t.Fatalf("after the group stopped moving:\n%s", strings.Join(fails, "\n"))
	}
	if notReconciled != nil {
		for _, m := range ms {
			t.Logf("%s in=%v epoch=%d owned=%v", m.id, m.in, m.epoch, m.ownedList())
		}
		t.Fatalf("not reconciled after the last move: %v", notReconciled)
	}
}

// await takes the answer of a long-poll request (JoinGroup, SyncGroup)
// into *into and returns its error code, or err when the request was not
// taken.
func await[T any](ch <-chan T, err error, into *T, code func(T) group.Code) (group.Code, error) {
	if err != nil {
		return 0, err
	}
	*into = <-ch
	return code(*into), nil
}
