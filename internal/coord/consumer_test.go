package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/testutil"
)

func consumerImage() *cgroup.Image {
	return cgroup.NewImage(cgroup.Topic{Name: "t", ID: cgroup.TopicID{7}, Partitions: 4})
}

func consumerJoin(id string) cgroup.HeartbeatInput {
	return cgroup.HeartbeatInput{Version: 1, MemberID: id, RebalanceTimeoutMs: 30_000,
		SubscribedTopicNames: []string{"t"}, OwnedSent: true, OwnedTopicPartitions: []cgroup.TopicPartitions{}}
}

func consumerBeat(id string, epoch int32, owned []cgroup.TopicPartitions) cgroup.HeartbeatInput {
	if owned == nil {
		owned = []cgroup.TopicPartitions{}
	}
	return cgroup.HeartbeatInput{Version: 1, MemberID: id, MemberEpoch: epoch, RebalanceTimeoutMs: -1, OwnedSent: true, OwnedTopicPartitions: owned}
}

// TestConsumerGroupMovesWithItsEpochs: a KIP-848 group in the middle of a
// reconciliation moves to another coordinator (the assignment changes
// owner); the new owner loads it from the group's file and its members
// carry on with their member ids and epochs: no UNKNOWN_MEMBER_ID, no
// FENCED_MEMBER_EPOCH, and the revocation in flight completes there. The
// replaced owner can no longer write the group.
func TestConsumerGroupMovesWithItsEpochs(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	g := "moving-848"
	v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
	v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
	a := newOwner(t, dir, "kaas-0", v1)
	a.SetTopics(consumerImage)
	beat := func(c *Coordinator, in cgroup.HeartbeatInput) cgroup.HeartbeatResult {
		t.Helper()
		res, err := c.ConsumerHeartbeat(ctx, g, in)
		if err != nil || res.Err != cgroup.ErrNone {
			t.Fatalf("heartbeat %s epoch %d: %v %v %s", in.MemberID, in.MemberEpoch, err, res.Err, res.ErrMessage)
		}
		return res
	}
	r1 := beat(a, consumerJoin("m1"))
	r2 := beat(a, consumerJoin("m2"))
	r1 = beat(a, consumerBeat("m1", r1.MemberEpoch, r1.Assignment)) // asked to give up half
	if r1.MemberEpoch != 2 || len(r1.Assignment) != 1 || len(r1.Assignment[0].Partitions) != 2 {
		t.Fatalf("m1 before the move: %+v", r1)
	}
	before, err := a.ConsumerDescribe(g)
	if err != nil {
		t.Fatal(err)
	}

	b := newOwner(t, dir, "kaas-1", v2)
	b.SetTopics(consumerImage)
	after, err := b.ConsumerDescribe(g)
	if err != nil {
		t.Fatal(err)
	}
	if after.GroupEpoch != before.GroupEpoch || after.AssignmentEpoch != before.AssignmentEpoch || len(after.Members) != 2 {
		t.Fatalf("loaded group %+v, was %+v", after, before)
	}
	for i, m := range after.Members {
		if m.MemberEpoch != before.Members[i].MemberEpoch || m.State != before.Members[i].State {
			t.Fatalf("member %s loaded at epoch %d %v, was %d %v", m.MemberID, m.MemberEpoch, m.State, before.Members[i].MemberEpoch, before.Members[i].State)
		}
	}
	// The revocation completes at the new owner, then m2 gets its share.
	r1 = beat(b, consumerBeat("m1", 2, r1.Assignment))
	if r1.MemberEpoch != 3 {
		t.Fatalf("m1 after revoking at the new owner: %+v", r1)
	}
	r2 = beat(b, consumerBeat("m2", r2.MemberEpoch, nil))
	if !r2.HasAssignment || len(r2.Assignment) != 1 || len(r2.Assignment[0].Partitions) != 2 {
		t.Fatalf("m2 at the new owner: %+v", r2)
	}
	// Commits with the members' epochs land at the new owner.
	wait, refused, err := b.Commit(CommitInput{Group: g, Version: 9, Generation: r2.MemberEpoch, MemberID: "m2",
		Offsets: map[offsets.TP]offsets.Offset{{Topic: "t", Partition: r2.Assignment[0].Partitions[0]}: {Offset: 5, LeaderEpoch: -1, ExpireTimestamp: -1}}})
	if err != nil || len(refused) != 0 {
		t.Fatalf("commit at the new owner: %v %v", err, refused)
	}
	if err := wait(ctx); err != nil {
		t.Fatal(err)
	}
	// The replaced owner cannot write the group any more.
	if _, err := a.ConsumerHeartbeat(ctx, g, consumerBeat("m1", 2, nil)); !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("heartbeat at the replaced owner: %v", err)
	}
}

// TestConsumerChangesShareOneSnapshotWrite: a change made while no write is
// under way is taken at once and written by its own request; changes made
// while that write is under way join the one scheduled behind it (one more
// write, both answers wait for it), and what lands holds the last of them;
// a group moved away before the scheduled write is taken writes nothing
// more and its waiters are told NOT_COORDINATOR.
func TestConsumerChangesShareOneSnapshotWrite(t *testing.T) {
	g := "coalesced-848"
	a, s := joinedConsumerGroup(t, g)
	writes := countMembershipWrites(a, g)

	// Three joins under one hold of the lock: the first is taken at once,
	// the two others wait behind it in one write.
	s.mu.Lock()
	cg := s.consumer
	var (
		first *snapshotWrite
		waits []*snapshotWrite
	)
	for i, id := range []string{"m2", "m3", "m4"} {
		_, out := cg.core.Heartbeat(a.cfg.Now(), a.image(), consumerJoin(id))
		w, run := cg.apply(out)
		if w == nil || run != (i == 0) {
			t.Fatalf("join %s: write %v, run %v; want a write, run only by the first", id, w != nil, run)
		}
		if i == 0 {
			first = w
		} else {
			waits = append(waits, w)
		}
	}
	s.mu.Unlock()
	if waits[0] != waits[1] || waits[0] == first {
		t.Fatal("the joins made while a write was under way do not share the next write")
	}
	cg.perform(first)
	for _, w := range append(waits, first) {
		if <-w.done; w.err != nil {
			t.Fatalf("a join's durable write failed: %v", w.err)
		}
	}
	if n := writes.Load(); n != 2 {
		t.Fatalf("%d snapshot writes for three changes, the last two made while the first was under way; want 2", n)
	}
	mem, _, err := a.store.GroupState(g, a.owner(g))
	if err != nil || mem == nil {
		t.Fatal(err)
	}
	var snap cgroup.Snapshot
	if err := json.Unmarshal(mem.Consumer, &snap); err != nil || len(snap.Members) != 4 {
		t.Fatalf("the file holds %d members (%v), want the 4 of the last change", len(snap.Members), err)
	}

	// A change under way, another behind it, then the group moves away
	// before the second is taken. (An answer goes out before its write's
	// bookkeeping: wait until none is under way.)
	waitNoWrite(t, s)
	writes.Store(0)
	s.mu.Lock()
	_, out := cg.core.Heartbeat(a.cfg.Now(), a.image(), consumerJoin("m5"))
	w5, run := cg.apply(out)
	_, out = cg.core.Heartbeat(a.cfg.Now(), a.image(), consumerJoin("m6"))
	w6, _ := cg.apply(out)
	s.unload()
	s.mu.Unlock()
	if !run {
		t.Fatal("a change made with no write under way was not taken at once")
	}
	cg.perform(w5)
	if <-w6.done; !errors.Is(w6.err, ErrNotCoordinator) {
		t.Fatalf("the wait of a change whose group moved away: %v, want NOT_COORDINATOR", w6.err)
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("%d snapshot writes after the group was unloaded, want only the one taken before", n)
	}
}

// TestConsumerHeartbeatWhoseWriteWasDroppedIsNotAnswered: a heartbeat whose
// change waits in the write scheduled behind one under way, when the group
// moves away before that write is taken, is answered NOT_COORDINATOR, not
// with the state that was never written (the first cut of the
// one-write-under-way rule answered it as if written).
func TestConsumerHeartbeatWhoseWriteWasDroppedIsNotAnswered(t *testing.T) {
	ctx := context.Background()
	g := "dropped-848"
	a, s := joinedConsumerGroup(t, g)
	s.mu.Lock()
	cg := s.consumer
	_, out := cg.core.Heartbeat(a.cfg.Now(), a.image(), consumerJoin("m2"))
	first, run := cg.apply(out) // under way, performed below
	s.mu.Unlock()
	if !run {
		t.Fatal("a change made with no write under way was not taken at once")
	}
	answered := make(chan error, 1)
	go func() {
		res, err := a.ConsumerHeartbeat(ctx, g, consumerJoin("m3"))
		if err == nil && res.Err != cgroup.ErrNone {
			err = fmt.Errorf("refused: %v", res.Err)
		}
		answered <- err
	}()
	testutil.WaitFor(t, 5*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if cg.pending == nil {
			return errors.New("the join does not wait behind the write under way yet")
		}
		return nil
	})
	s.mu.Lock()
	s.unload()
	s.mu.Unlock()
	cg.perform(first)
	if err := <-answered; !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("the join whose write was dropped was answered %v, want NOT_COORDINATOR", err)
	}
}

// joinedConsumerGroup starts the owner of consumer group g with member m1
// joined, and returns it with the group's shell once the join's write is
// done.
func joinedConsumerGroup(t *testing.T, g string) (*Coordinator, *shell) {
	t.Helper()
	a := newOwner(t, t.TempDir(), "kaas-0", assignment(1, 2, nil, map[string]string{g: "kaas-0"}))
	a.SetTopics(consumerImage)
	if res, err := a.ConsumerHeartbeat(context.Background(), g, consumerJoin("m1")); err != nil || res.Err != cgroup.ErrNone {
		t.Fatal(err, res.Err)
	}
	a.mu.Lock()
	s := a.groups[g]
	a.mu.Unlock()
	waitNoWrite(t, s)
	return a, s
}

// waitNoWrite waits until no snapshot write of the group is under way (an
// answer goes out before its write's bookkeeping is done).
func waitNoWrite(t *testing.T, s *shell) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.consumer != nil && s.consumer.inflight != nil {
			return errors.New("a snapshot write is still under way")
		}
		return nil
	})
}

// TestConsumerMembersJoiningTogetherGetTheirSharesAtOnce: members that join
// a consumer group within the join linger of each other are answered
// together, each with its final share, at one epoch, durably. Answered one
// by one, the first took every partition and the others nothing until it
// had revoked them at its next heartbeat (a heartbeat interval, 5 s by
// default) and they had heartbeated again.
func TestConsumerMembersJoiningTogetherGetTheirSharesAtOnce(t *testing.T) {
	const g = "together-848"
	dir := t.TempDir()
	a := newOwner(t, dir, "kaas-0", assignment(1, 2, nil, map[string]string{g: "kaas-0"}))
	a.cfg.Consumer.JoinLinger = 200 * time.Millisecond // a loaded CI machine still joins four within it
	a.SetTopics(consumerImage)
	ids := []string{"m1", "m2", "m3", "m4"}
	results := make([]cgroup.HeartbeatResult, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { results[i], errs[i] = a.ConsumerHeartbeat(context.Background(), g, consumerJoin(id)) })
	}
	wg.Wait()
	owner := map[int32]string{}
	for i, res := range results {
		if errs[i] != nil || res.Err != cgroup.ErrNone {
			t.Fatalf("join of %s: %v %v %s", ids[i], errs[i], res.Err, res.ErrMessage)
		}
		if !res.HasAssignment {
			t.Fatalf("join of %s answered without an assignment", ids[i])
		}
		if res.MemberEpoch != results[0].MemberEpoch {
			t.Errorf("%s at epoch %d, %s at epoch %d: want one epoch", ids[i], res.MemberEpoch, ids[0], results[0].MemberEpoch)
		}
		n := 0
		for _, tps := range res.Assignment {
			for _, p := range tps.Partitions {
				if o, ok := owner[p]; ok {
					t.Fatalf("partition %d given to %s and %s", p, o, ids[i])
				}
				owner[p] = ids[i]
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s's join answered with %d partitions of 4, want its share of 1: %+v", ids[i], n, res.Assignment)
		}
	}
	d, err := a.ConsumerDescribe(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range d.Members {
		if m.MemberEpoch != d.GroupEpoch || m.MemberEpoch != d.AssignmentEpoch || len(m.Revoking) > 0 {
			t.Errorf("member %s at epoch %d revoking %v; group epoch %d, assignment epoch %d: want all reconciled", m.MemberID, m.MemberEpoch, m.Revoking, d.GroupEpoch, d.AssignmentEpoch)
		}
	}
	// Durable as answered: the next owner loads every member as it was
	// answered.
	b := newOwner(t, dir, "kaas-1", assignment(2, 2, nil, map[string]string{g: "kaas-1"}))
	b.SetTopics(consumerImage)
	loaded, err := b.ConsumerDescribe(g)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded.Members) != len(ids) || loaded.GroupEpoch != d.GroupEpoch {
		t.Fatalf("the next owner loaded %d members at epoch %d, want %d at %d", len(loaded.Members), loaded.GroupEpoch, len(ids), d.GroupEpoch)
	}
	for i, m := range loaded.Members {
		if m.MemberEpoch != d.Members[i].MemberEpoch || fmt.Sprint(m.Assignment) != fmt.Sprint(d.Members[i].Assignment) {
			t.Errorf("member %s loaded at epoch %d with %v, answered at %d with %v", m.MemberID, m.MemberEpoch, m.Assignment, d.Members[i].MemberEpoch, d.Members[i].Assignment)
		}
	}
}
