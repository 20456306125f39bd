package clustertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/testutil"
)

// TestDrainedCoordinatorGroupMembersGetUnknownMember drains (clean stop)
// the broker coordinating a franz-go consumer group of two members. The
// new coordinator loads the group's durable membership, so the members
// keep their member ids (an UNKNOWN_MEMBER_ID would make franz-go drop its
// id and join anew with another) and keep consuming (issue 14).
func TestDrainedCoordinatorGroupMembersGetUnknownMember(t *testing.T) {
	stopConsumingGroupsCoordinator(t, drain, nil)
}

// TestDrainedCoordinatorKIP848MembersKeepTheirEpochs is the same with
// franz-go's KIP-848 members (ConsumerGroupHeartbeat): across the drain
// they keep their member ids and epochs (nobody joined or left, so the
// group epoch did not move), and no record is consumed twice.
func TestDrainedCoordinatorKIP848MembersKeepTheirEpochs(t *testing.T) {
	stopConsumingGroupsCoordinator(t, drain, []kgo.Opt{kgo.ServerSideBalancer()})
}

// TestKilledCoordinatorKIP848MembersKeepTheirEpochs: the same when the
// coordinator is killed (no drain): the group moves once the cluster
// declares the broker dead, and its members carry on there as they were.
func TestKilledCoordinatorKIP848MembersKeepTheirEpochs(t *testing.T) {
	stopConsumingGroupsCoordinator(t, kill, []kgo.Opt{kgo.ServerSideBalancer()})
}

// A way to stop broker i of c.
var (
	drain = func(c *Cluster, i int) error { return c.Shutdown(i) }
	kill  = func(c *Cluster, i int) error { c.Kill(i); return nil }
)

// stopConsumingGroupsCoordinator stops the broker coordinating a group of
// two franz-go members (with extra options) while they consume, and checks
// that they keep consuming and committing at the new coordinator with
// their member ids; a member of a KIP-848 group keeps its epoch too, and
// consumes no record twice.
func stopConsumingGroupsCoordinator(t *testing.T, stop func(c *Cluster, i int) error, extra []kgo.Opt) {
	kip848 := len(extra) > 0
	c := Start(t, Options{Brokers: 3, Group: func(g *group.Config) { g.InitialRebalanceDelay = 0 }})
	cl := client(t, c)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 6, 1, nil, "dg"); err != nil {
		t.Fatal(err)
	}
	ctrl := int32(-1) // a group coordinated elsewhere: stopping it moves no controller
	testutil.WaitFor(t, 10*time.Second, func() error {
		if ctrl = int32(c.Controller()); ctrl < 0 {
			return fmt.Errorf("no controller yet")
		}
		return nil
	})
	var groupID string
	for i := 0; groupID == ""; i++ {
		if g := fmt.Sprintf("dg-%d", i); coordinatorOf(t, cl, g) != ctrl {
			groupID = g
		}
	}
	victim := int(coordinatorOf(t, cl, groupID))
	produce := func(from, to int) {
		t.Helper()
		var rs []*kgo.Record
		for i := from; i < to; i++ {
			rs = append(rs, &kgo.Record{Topic: "dg", Value: []byte(fmt.Sprintf("m%05d", i))})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 300)

	var mu sync.Mutex
	seen := map[string]bool{}
	twice := 0
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var members []*kgo.Client
	for range 2 {
		m, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.AllAddrs()...), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics("dg"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(100 * time.Millisecond),
			kgo.HeartbeatInterval(200 * time.Millisecond), kgo.SessionTimeout(10 * time.Second)}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				m.PollFetches(cctx).EachRecord(func(r *kgo.Record) {
					mu.Lock()
					if seen[string(r.Value)] {
						twice++
					}
					seen[string(r.Value)] = true
					mu.Unlock()
				})
			}
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
		for _, m := range members {
			m.Close()
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	type meta struct {
		id  string
		gen int32
	}
	metas := func() []meta {
		var out []meta
		for _, m := range members {
			id, gen := m.GroupMetadata()
			out = append(out, meta{id, gen})
		}
		return out
	}
	var before []meta
	testutil.WaitFor(t, 30*time.Second, func() error {
		if n := count(); n < 300 {
			return fmt.Errorf("%d of 300 consumed", n)
		}
		before = metas()
		if before[0].id == "" || before[1].id == "" || before[0].gen != before[1].gen || before[0].gen <= 0 {
			return fmt.Errorf("group not settled: %+v", before)
		}
		return nil
	})
	if err := stop(c, victim); err != nil {
		t.Fatalf("stopping broker %d: %v", victim, err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if now := int(coordinatorOf(t, cl, groupID)); now == victim {
			return fmt.Errorf("the group is still routed to the stopped broker %d", victim)
		}
		return nil
	})
	produce(300, 600)
	testutil.WaitFor(t, 30*time.Second, func() error {
		if n := count(); n < 600 {
			return fmt.Errorf("%d of 600 consumed after the stop", n)
		}
		return nil
	})
	// The members' commits (made with their member ids and generation)
	// are accepted by the new coordinator: the offsets reach 600.
	testutil.WaitFor(t, 20*time.Second, func() error {
		fresh, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
		if err != nil {
			return err
		}
		defer fresh.Close()
		offs, err := kadm.NewClient(fresh).FetchOffsets(ctx, groupID)
		if err != nil {
			return err
		}
		sum := int64(0)
		offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
		if sum < 600 {
			return fmt.Errorf("committed %d of 600 after the stop", sum)
		}
		return nil
	})
	after := metas()
	for i := range after {
		if after[i].id != before[i].id {
			t.Fatalf("member %d: id %q before the stop, %q after: it was told UNKNOWN_MEMBER_ID and joined anew", i, before[i].id, after[i].id)
		}
		if kip848 && after[i].gen != before[i].gen {
			t.Fatalf("member %d: epoch %d before the stop, %d after", i, before[i].gen, after[i].gen)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if kip848 && twice > 0 {
		t.Fatalf("%d records consumed twice across the stop", twice)
	}
	t.Logf("members %+v before the stop, %+v after; %d records consumed twice", before, after, twice)
}
