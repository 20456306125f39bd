package cgroup

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// subscription encodes a ConsumerProtocol subscription (v1: with owned
// partitions) of topic a.
func subscription(owned ...int32) []byte {
	s := kmsg.ConsumerMemberMetadata{Version: 1, Topics: []string{"a"}}
	if len(owned) > 0 {
		s.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "a", Partitions: owned}}
	}
	return s.AppendTo(nil)
}

func assignmentOf(parts ...int32) []byte {
	a := kmsg.ConsumerMemberAssignment{Version: 1, Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: "a", Partitions: parts}}}
	return a.AppendTo(nil)
}

func decodeAssignment(t *testing.T, b []byte) []int32 {
	t.Helper()
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(b); err != nil {
		t.Fatalf("assignment: %v", err)
	}
	var out []int32
	for _, tp := range a.Topics {
		out = append(out, tp.Partitions...)
	}
	slices.Sort(out)
	return out
}

func classicJoin(id string, owned ...int32) ClassicJoinInput {
	return ClassicJoinInput{Version: 9, MemberID: id, SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second,
		ProtocolType: "consumer", Protocols: []Protocol{{Name: "cooperative-sticky", Metadata: subscription(owned...)}}}
}

// TestOnlineUpgradeAndDowngrade walks a classic group of two cooperative
// members upgraded by a consumer-protocol member, the classic members
// reconciling through JoinGroup, SyncGroup and Heartbeat (no partition
// ever with two owners), then the consumer member leaving: the group asks
// to be a classic group again, with every partition assigned.
func TestOnlineUpgradeAndDowngrade(t *testing.T) {
	f := newFixture(t)
	proto := []Protocol{{Name: "cooperative-sticky", Metadata: subscription()}}
	g, err := FromClassic("g", f.g.cfg, f.now, f.im, ClassicGroup{Generation: 4, Protocol: "cooperative-sticky", Leader: "c1",
		Members: []ClassicMember{
			{ID: "c1", SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second, Protocols: proto, Assignment: assignmentOf(0, 1, 2)},
			{ID: "c2", SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second, Protocols: proto, Assignment: assignmentOf(3, 4, 5)},
		}})
	if err != nil {
		t.Fatal(err)
	}
	f.g = g
	if g.Epoch() != 4 || g.TargetEpoch() != 4 || g.State() != "Stable" || g.ClassicMemberCount() != 2 {
		t.Fatalf("converted: epoch %d target %d state %s classic %d", g.Epoch(), g.TargetEpoch(), g.State(), g.ClassicMemberCount())
	}
	// The classic members carry on in their generation.
	for _, id := range []string{"c1", "c2"} {
		if code, _ := g.ClassicHeartbeat(f.now, id, nil, 4); code != ErrNone {
			t.Fatalf("heartbeat of %s after the conversion: %v", id, code)
		}
	}
	if code, _ := g.CheckCommit(CommitCheck{MemberID: "c1", MemberEpoch: 4, Version: 8}, nil); code != ErrNone {
		t.Fatalf("classic commit in its generation: %v", code)
	}
	if code, _ := g.CheckCommit(CommitCheck{MemberID: "c1", MemberEpoch: 3, Version: 8}, nil); code != ErrIllegalGeneration {
		t.Fatalf("classic commit with an old generation: %v", code)
	}

	// A consumer-protocol member joins: new epoch, new target.
	res := f.ok(f.joinIn("k1", "a"))
	if res.MemberEpoch != 5 || len(flat(res.Assignment)) != 0 {
		t.Fatalf("consumer member joined: %+v (its partitions are still owned)", res)
	}
	// The classic members are told to rejoin; they rejoin owning what they
	// have and get back what they keep, the same generation.
	keep := map[string][]int32{}
	for _, id := range []string{"c1", "c2"} {
		if code, _ := g.ClassicHeartbeat(f.now, id, nil, 4); code != ErrRebalanceInProgress {
			t.Fatalf("heartbeat of %s behind the target: %v", id, code)
		}
		owned := []int32{0, 1, 2}
		if id == "c2" {
			owned = []int32{3, 4, 5}
		}
		jr, _ := g.ClassicJoin(f.now, f.im, classicJoin(id, owned...))
		f.checkDisjoint()
		if jr.Err != ErrNone || jr.Generation != 4 || jr.ProtocolName != "cooperative-sticky" {
			t.Fatalf("rejoin of %s with partitions to revoke: %+v", id, jr)
		}
		sr, _ := g.ClassicSync(f.now, f.im, ClassicSyncInput{MemberID: id, Generation: 4})
		if sr.Err != ErrNone {
			t.Fatalf("sync of %s: %v", id, sr.Err)
		}
		keep[id] = decodeAssignment(t, sr.Assignment)
		if len(keep[id]) != 2 {
			t.Fatalf("%s keeps %v, want 2 of its 3", id, keep[id])
		}
		// Having revoked, it rejoins and moves to the target epoch.
		jr, _ = g.ClassicJoin(f.now, f.im, classicJoin(id, keep[id]...))
		f.checkDisjoint()
		if jr.Err != ErrNone || jr.Generation != 5 {
			t.Fatalf("rejoin of %s after revoking: %+v", id, jr)
		}
		if sr, _ := g.ClassicSync(f.now, f.im, ClassicSyncInput{MemberID: id, Generation: 5}); sr.Err != ErrNone || !slices.Equal(decodeAssignment(t, sr.Assignment), keep[id]) {
			t.Fatalf("sync of %s at the target: %+v", id, sr)
		}
		if code, _ := g.ClassicHeartbeat(f.now, id, nil, 5); code != ErrNone {
			t.Fatalf("heartbeat of %s at the target: %v", id, code)
		}
	}
	res = f.ok(steady("k1", 5, nil))
	if len(flat(res.Assignment)) != 2 || g.State() != "Stable" {
		t.Fatalf("consumer member after the revocations: %+v, group %s", res, g.State())
	}
	// A consumer heartbeat naming a classic member is refused.
	if r := f.hb(steady("c1", 5, nil)); r.Err != ErrUnknownMemberID {
		t.Fatalf("consumer heartbeat for a classic member: %v", r.Err)
	}

	// The consumer member leaves: the group asks to be classic again.
	_, out := g.Heartbeat(f.now, f.im, HeartbeatInput{Version: 1, MemberID: "k1", MemberEpoch: LeaveEpoch, RebalanceTimeoutMs: -1})
	if !out.Downgrade {
		t.Fatal("the last consumer member left classic members behind, but no downgrade was asked for")
	}
	cg, err := g.ToClassic(f.im)
	if err != nil {
		t.Fatal(err)
	}
	// The members' generation (5), not the group epoch the leave bumped
	// (6): commits they make before they rejoin still land.
	if cg.Generation != 5 || cg.Protocol != "cooperative-sticky" || cg.Leader != "c1" || len(cg.Members) != 2 {
		t.Fatalf("classic group: %+v", cg)
	}
	all := map[int32]bool{}
	for _, m := range cg.Members {
		for _, p := range decodeAssignment(t, m.Assignment) {
			if all[p] {
				t.Fatalf("partition %d assigned twice in %+v", p, cg)
			}
			all[p] = true
		}
		if m.SessionTimeout != 10*time.Second || m.RebalanceTimeout != 20*time.Second {
			t.Fatalf("timeouts of %s: %v %v", m.ID, m.SessionTimeout, m.RebalanceTimeout)
		}
	}
	if len(all) != 6 {
		t.Fatalf("the classic group's assignment covers %d of 6 partitions", len(all))
	}
}

// TestClassicMembersOfAConsumerGroup covers the errors and deadlines of
// classic members: KIP-394, protocols, generations, a missed rejoin, and
// the snapshot keeping what makes them classic.
func TestClassicMembersOfAConsumerGroup(t *testing.T) {
	f := newFixture(t)
	f.ok(f.joinIn("k1", "a"))
	g := f.g
	in := classicJoin("")
	jr, _ := g.ClassicJoin(f.now, f.im, in)
	if jr.Err != ErrMemberIDRequired || jr.MemberID == "" {
		t.Fatalf("dynamic classic member without an id: %+v", jr)
	}
	if g.Members() != 1 {
		t.Fatal("a KIP-394 answer kept a member")
	}
	static := classicJoin("s-1")
	static.InstanceID = ptr("instance-1")
	if r, _ := g.ClassicJoin(f.now, f.im, static); r.Err != ErrUnknownMemberID {
		t.Fatalf("a static member with an id the group does not know: %+v", r)
	}
	in.MemberID = jr.MemberID
	jr, _ = g.ClassicJoin(f.now, f.im, in)
	if jr.Err != ErrNone || jr.Generation != 3 || jr.MemberID != in.MemberID {
		t.Fatalf("classic member joins with the id it was given: %+v", jr)
	}
	c := jr.MemberID
	if old := classicJoin(""); true {
		old.Version = 3 // before KIP-394: joins at once
		if r, _ := g.ClassicJoin(f.now, f.im, old); r.Err != ErrNone || r.Generation != 4 {
			t.Fatalf("JoinGroup v3 without an id: %+v", r)
		}
	}
	bad := classicJoin(c)
	bad.ProtocolType = "connect"
	if r, _ := g.ClassicJoin(f.now, f.im, bad); r.Err != ErrInconsistentGroupProto {
		t.Fatalf("protocol type connect: %+v", r)
	}
	if r, _ := g.ClassicSync(f.now, f.im, ClassicSyncInput{MemberID: c, Generation: 2}); r.Err != ErrIllegalGeneration {
		t.Fatalf("sync with another generation: %v", r.Err)
	}
	if r, _ := g.ClassicSync(f.now, f.im, ClassicSyncInput{MemberID: c, Generation: 3, ProtocolName: ptr("range")}); r.Err != ErrInconsistentGroupProto {
		t.Fatalf("sync naming another protocol: %v", r.Err)
	}
	if code, _ := g.ClassicHeartbeat(f.now, "k1", nil, 3); code != ErrUnknownMemberID {
		t.Fatalf("classic heartbeat for a consumer member: %v", code)
	}

	// Durable: a move keeps the classic member classic.
	snap := g.Snapshot()
	moved := New("g", g.cfg)
	if err := moved.Restore(f.now, snap); err != nil {
		t.Fatal(err)
	}
	for _, m := range moved.Describe().Members {
		if m.Classic != (m.MemberID != "k1") {
			t.Fatalf("restored members: %+v, want all but k1 classic", moved.Describe().Members)
		}
	}
	if moved.ClassicMemberCount() != 2 {
		t.Fatalf("restored: %d classic members, want 2", moved.ClassicMemberCount())
	}

	// The classic member owes a SyncGroup within its rebalance timeout
	// (20 s), heartbeats (its session is 10 s) notwithstanding.
	f.now = f.now.Add(15 * time.Second)
	f.ok(steady("k1", g.members["k1"].epoch, assignedOf(g.members["k1"])))
	if code, _ := g.ClassicHeartbeat(f.now, c, nil, 3); code != ErrRebalanceInProgress {
		t.Fatalf("classic heartbeat behind the group epoch (another member joined): %v", code)
	}
	if out := g.Expire(f.now, f.im); g.members[c] == nil {
		t.Fatalf("a classic member removed before its sync deadline: %+v", out.Events)
	}
	f.now = f.now.Add(6 * time.Second)
	f.ok(steady("k1", g.members["k1"].epoch, assignedOf(g.members["k1"])))
	out := g.Expire(f.now, f.im)
	if g.members[c] != nil || len(out.Events) == 0 || out.Events[0].Why != "the classic member did not sync within the rebalance timeout" {
		t.Fatalf("a classic member that never synced: still in %v, events %+v", g.members[c] != nil, out.Events)
	}
	if out.Downgrade {
		t.Fatal("a classic member leaving asked for a downgrade")
	}
}

// TestRandomMixedGroupsKeepTheInvariants drives a consumer group of
// classic (cooperative) and consumer-protocol model clients with random
// heartbeats, rejoins, leaves and clock steps, and checks after every
// input that no partition is owned by two clients (by what each was told)
// nor by two members on the coordinator, and that once every client just
// heartbeats for a while, all partitions are assigned and the group is
// Stable.
func TestRandomMixedGroupsKeepTheInvariants(t *testing.T) {
	for seed := range uint64(200) {
		t.Run("", func(t *testing.T) { randomMixedRun(t, seed) })
	}
}

type mixedClient struct {
	id      string
	classic bool
	in      bool
	epoch   int32 // generation (classic) or member epoch
	owned   map[TP]struct{}
}

func randomMixedRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*13+5))
	f := newFixture(t)
	// A consumer member first: the group is a consumer group.
	var clients []*mixedClient
	for i := range 2 + rng.IntN(5) {
		clients = append(clients, &mixedClient{id: fmt.Sprintf("x%d", i), classic: i > 0 && rng.IntN(2) == 0, owned: map[TP]struct{}{}})
	}
	check := func(step string) {
		t.Helper()
		f.checkDisjoint()
		f.checkEncoding()
		seen := map[TP]string{}
		for _, c := range clients {
			for tp := range c.owned {
				if o, dup := seen[tp]; dup {
					t.Fatalf("seed %d %s: clients %s and %s both own %v", seed, step, o, c.id, tp)
				}
				seen[tp] = c.id
			}
		}
	}
	reset := func(c *mixedClient) { c.in, c.epoch, c.owned = false, 0, map[TP]struct{}{} }
	act := func(c *mixedClient, quiet bool) {
		if !c.classic {
			in := steady(c.id, c.epoch, grouped(c.owned))
			if !c.in {
				in = f.joinIn(c.id, "a")
			}
			if !quiet && c.in && rng.IntN(15) == 0 {
				in.MemberEpoch = LeaveEpoch
				f.g.Heartbeat(f.now, f.im, in)
				reset(c)
				return
			}
			res, _ := f.g.Heartbeat(f.now, f.im, in)
			switch res.Err {
			case ErrNone:
				c.in, c.epoch = true, res.MemberEpoch
				if res.HasAssignment {
					c.owned = flat(res.Assignment)
				}
			case ErrUnknownMemberID, ErrFencedMemberEpoch:
				reset(c)
			default:
				t.Fatalf("seed %d: heartbeat of %s: %v %s", seed, c.id, res.Err, res.ErrMessage)
			}
			return
		}
		rejoin := !c.in
		if c.in {
			if !quiet && rng.IntN(15) == 0 {
				f.g.ClassicLeave(f.now, f.im, []ClassicLeaver{{MemberID: c.id}})
				reset(c)
				return
			}
			switch code, _ := f.g.ClassicHeartbeat(f.now, c.id, nil, c.epoch); code {
			case ErrNone:
			case ErrRebalanceInProgress:
				rejoin = true
			case ErrUnknownMemberID, ErrIllegalGeneration:
				reset(c)
				rejoin = true
			default:
				t.Fatalf("seed %d: classic heartbeat of %s: %v", seed, c.id, code)
			}
		}
		if !rejoin {
			return
		}
		var owned []int32
		for tp := range c.owned {
			owned = append(owned, tp.Partition)
		}
		jr, _ := f.g.ClassicJoin(f.now, f.im, classicJoin(c.id, owned...))
		if jr.Err != ErrNone {
			t.Fatalf("seed %d: classic join of %s: %+v", seed, c.id, jr)
		}
		check("classic join")
		sr, _ := f.g.ClassicSync(f.now, f.im, ClassicSyncInput{MemberID: c.id, Generation: jr.Generation})
		if sr.Err == ErrRebalanceInProgress {
			c.in, c.epoch = true, jr.Generation // it rejoins at its next turn
			return
		}
		if sr.Err != ErrNone {
			t.Fatalf("seed %d: classic sync of %s: %v", seed, c.id, sr.Err)
		}
		c.in, c.epoch, c.owned = true, jr.Generation, map[TP]struct{}{}
		for _, p := range decodeAssignment(t, sr.Assignment) {
			c.owned[TP{topicA, p}] = struct{}{}
		}
	}
	for step := range 300 {
		c := clients[rng.IntN(len(clients))]
		f.now = f.now.Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
		act(c, false)
		check(fmt.Sprint("step ", step))
		out := f.g.Expire(f.now, f.im)
		for _, ev := range out.Events {
			for _, c := range clients {
				if c.id == ev.Member && (ev.What == "session expired" || ev.What == "member fenced" || ev.What == "revocation timed out") {
					reset(c)
				}
			}
		}
		check(fmt.Sprint("expire ", step))
	}
	// Quiet: everyone just heartbeats (and rejoins when told) for a while.
	for range 40 {
		for _, c := range clients {
			f.now = f.now.Add(100 * time.Millisecond)
			act(c, true)
			check("quiet")
		}
	}
	owned := 0
	for _, c := range clients {
		owned += len(c.owned)
	}
	if owned != 6 || f.g.State() != "Stable" {
		t.Fatalf("seed %d: after a quiet while: %d of 6 partitions owned, group %s", seed, owned, f.g.State())
	}
}

// TestStaticMembersChangeProtocolInPlace: a static member rolled from the
// classic protocol to the consumer protocol takes its instance's place at
// once with its partitions (Kafka's UNRELEASED_INSTANCE_ID is between
// consumer-protocol members only), and rolled back, a classic member taking
// the place of the last consumer-protocol member (left with -2) asks for
// the downgrade, keeping the partitions.
func TestStaticMembersChangeProtocolInPlace(t *testing.T) {
	f := newFixture(t)
	proto := []Protocol{{Name: "cooperative-sticky", Metadata: subscription()}}
	g, err := FromClassic("g", f.g.cfg, f.now, f.im, ClassicGroup{Generation: 3, Protocol: "cooperative-sticky",
		Members: []ClassicMember{
			{ID: "c1", InstanceID: "i1", SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second, Protocols: proto, Assignment: assignmentOf(0, 1, 2)},
			{ID: "c2", SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second, Protocols: proto, Assignment: assignmentOf(3, 4, 5)},
		}})
	if err != nil {
		t.Fatal(err)
	}
	f.g = g
	join := f.joinIn("k1", "a")
	join.InstanceID = ptr("i1")
	res := f.ok(join)
	if got := flat(res.Assignment); len(got) != 3 || res.MemberEpoch != 3 {
		t.Fatalf("consumer member taking classic instance i1's place: %+v, want c1's 3 partitions at epoch 3", res)
	}
	if code, _ := g.ClassicHeartbeat(f.now, "c1", nil, 3); code != ErrUnknownMemberID {
		t.Fatalf("the replaced classic member: %v", code)
	}
	// Rolled back: k1 leaves for now (-2), a classic member of the same
	// instance takes its place.
	leave := steady("k1", 3, res.Assignment)
	leave.MemberEpoch, leave.InstanceID = StaticLeaveEpoch, ptr("i1")
	if r, _ := g.Heartbeat(f.now, f.im, leave); r.Err != ErrNone {
		t.Fatalf("static leave: %v", r.Err)
	}
	back := classicJoin("")
	back.InstanceID = ptr("i1")
	jr, out := g.ClassicJoin(f.now, f.im, back)
	f.checkDisjoint()
	if jr.Err != ErrNone || !out.Downgrade || g.ClassicMemberCount() != 2 || g.Members() != 2 {
		t.Fatalf("classic member back in instance i1: %+v, downgrade %v, %d classic of %d", jr, out.Downgrade, g.ClassicMemberCount(), g.Members())
	}
	sr, _ := g.ClassicSync(f.now, f.im, ClassicSyncInput{MemberID: jr.MemberID, InstanceID: ptr("i1"), Generation: jr.Generation})
	if sr.Err != ErrNone || !slices.Equal(decodeAssignment(t, sr.Assignment), []int32{0, 1, 2}) {
		t.Fatalf("its assignment: %+v", sr)
	}
}
