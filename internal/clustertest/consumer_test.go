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

// TestGroupCoordinatorKilledGroupReformsAndResumes runs a franz-go consumer
// group of two members on 3 brokers, kills the group's coordinator, and
// checks that the group re-forms on the new coordinator and keeps
// consuming from the committed offsets: every record is consumed, and the
// committed offsets never go backwards.
func TestGroupCoordinatorKilledGroupReformsAndResumes(t *testing.T) {
	c := Start(t, Options{Brokers: 3, Group: func(g *group.Config) { g.InitialRebalanceDelay = 0 }})
	cl := client(t, c)
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 6, 1, nil, "cg"); err != nil {
		t.Fatal(err)
	}
	// A group whose coordinator is not the controller.
	ctrl := int32(c.Controller())
	var groupID string
	for i := 0; groupID == ""; i++ {
		g := fmt.Sprintf("cg-%d", i)
		if coordinatorOf(t, cl, g) != ctrl {
			groupID = g
		}
	}
	victim := int(coordinatorOf(t, cl, groupID))
	produce := func(from, to int) {
		t.Helper()
		var rs []*kgo.Record
		for i := from; i < to; i++ {
			rs = append(rs, &kgo.Record{Topic: "cg", Value: []byte(fmt.Sprintf("m%05d", i))})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 600)

	var mu sync.Mutex
	seen := map[string]bool{}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		m, err := kgo.NewClient(kgo.SeedBrokers(c.AllAddrs()...), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics("cg"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(100*time.Millisecond),
			kgo.HeartbeatInterval(300*time.Millisecond), kgo.SessionTimeout(6*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer m.Close()
			for cctx.Err() == nil {
				m.PollFetches(cctx).EachRecord(func(r *kgo.Record) {
					mu.Lock()
					seen[string(r.Value)] = true
					mu.Unlock()
				})
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	testutil.WaitFor(t, 20*time.Second, func() error {
		if n := count(); n < 600 {
			return fmt.Errorf("%d of 600 consumed", n)
		}
		return nil
	})
	// Committed offsets sampled before the kill: they must never go back.
	committed := func() map[int32]int64 {
		out := map[int32]int64{}
		// A fresh admin client each time: it asks FindCoordinator anew
		// rather than keep dialing a cached coordinator that died.
		fresh, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
		if err != nil {
			return nil
		}
		defer fresh.Close()
		offs, err := kadm.NewClient(fresh).FetchOffsets(ctx, groupID)
		if err != nil {
			t.Logf("fetch offsets: %v", err)
			return nil
		}
		offs.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
		return out
	}
	var before map[int32]int64
	testutil.WaitFor(t, 10*time.Second, func() error {
		before = committed()
		sum := int64(0)
		for _, v := range before {
			sum += v
		}
		if sum < 600 {
			return fmt.Errorf("committed %d of 600", sum)
		}
		return nil
	})
	killedAt := time.Now()
	c.Kill(victim)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if now := int(coordinatorOf(t, cl, groupID)); now == victim {
			return fmt.Errorf("the group is still routed to the dead broker %d", victim)
		}
		return nil
	})
	produce(600, 1200)
	testutil.WaitFor(t, 30*time.Second, func() error {
		if n := count(); n < 1200 {
			return fmt.Errorf("%d of 1200 consumed after the coordinator died", n)
		}
		return nil
	})
	testutil.WaitFor(t, 20*time.Second, func() error {
		after := committed()
		sum := int64(0)
		for p, v := range after {
			if v < before[p] {
				t.Fatalf("partition %d committed offset went back: %d -> %d", p, before[p], v)
			}
			sum += v
		}
		if sum < 1200 {
			return fmt.Errorf("committed %d of 1200", sum)
		}
		return nil
	})
	t.Logf("group committing on its new coordinator %v after the kill of coordinator %d", time.Since(killedAt), victim)
	cancel()
	wg.Wait()
}
