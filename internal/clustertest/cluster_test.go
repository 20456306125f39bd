package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/fsutil"
	"github.com/kaas-dev/kaas/internal/node"
	"github.com/kaas-dev/kaas/internal/testutil"
)

func client(t *testing.T, c *Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func leaderCounts(a *cluster.Assignment, topic string) map[string]int {
	out := map[string]int{}
	for _, p := range a.Partitions {
		if p.Topic == topic {
			out[p.Broker]++
		}
	}
	return out
}

func current(c *Cluster) *cluster.Assignment {
	for i := range c.opts.Brokers {
		if n := c.Node(i); n != nil {
			return n.Runtime.Current()
		}
	}
	return nil
}

// produceLoop produces until stop, remembering every acknowledged value.
func produceLoop(t *testing.T, cl *kgo.Client, topic string, stop <-chan struct{}) (acked *sync.Map, count *atomic.Int64, done <-chan struct{}) {
	acked, count = &sync.Map{}, &atomic.Int64{}
	d := make(chan struct{})
	go func() {
		defer close(d)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := fmt.Sprintf("v%06d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}, func(r *kgo.Record, err error) {
				cancel()
				if err == nil {
					acked.Store(string(r.Value), true)
					count.Add(1)
				}
			})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return acked, count, d
}

func consumeAll(t *testing.T, c *Cluster, topic string, want int) map[string]bool {
	t.Helper()
	cl := client(t, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(got) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
	}
	return got
}

func TestThreeBrokersKillOneNoAckedRecordLost(t *testing.T) {
	c := Start(t, Options{Brokers: 3})
	cl := client(t, c, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond),
		kgo.RecordRetries(100), kgo.RetryTimeout(30*time.Second))
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 6, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := leaderCounts(current(c), "orders"); got["kaas-0"] != 2 || got["kaas-1"] != 2 || got["kaas-2"] != 2 {
			return fmt.Errorf("leaders %v", got)
		}
		return nil
	})
	stop := make(chan struct{})
	acked, count, done := produceLoop(t, cl, "orders", stop)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if count.Load() < 200 {
			return fmt.Errorf("%d acked", count.Load())
		}
		return nil
	})
	victim := 2
	if c.Controller() == victim {
		victim = 1
	}
	before := current(c)
	killedAt := time.Now()
	c.Kill(victim)
	name := fmt.Sprintf("kaas-%d", victim)
	// Partitions move within detection (1s here) + 1s.
	testutil.WaitFor(t, c.opts.DeadAfter+time.Second+500*time.Millisecond, func() error {
		a := current(c)
		if got := leaderCounts(a, "orders"); got[name] != 0 {
			return fmt.Errorf("still led by %s: %v", name, got)
		}
		return nil
	})
	moved := time.Since(killedAt)
	t.Logf("partitions moved %v after the kill", moved)
	mark := count.Load()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if count.Load() < mark+200 {
			return fmt.Errorf("producer stuck at %d acks", count.Load())
		}
		return nil
	})
	// The broker returns: alive again, no churn.
	afterKill := current(c)
	c.Restart(victim)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if !current(c).IsAlive(name) {
			return fmt.Errorf("%s not alive again", name)
		}
		return nil
	})
	for _, p := range afterKill.Partitions {
		for _, q := range current(c).Partitions {
			if p.Topic == q.Topic && p.Partition == q.Partition && p != q {
				t.Errorf("churn on return: %+v -> %+v", p, q)
			}
		}
	}
	close(stop)
	<-done
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	acked.Range(func(_, _ any) bool { n++; return true })
	got := consumeAll(t, c, "orders", n)
	missing := 0
	acked.Range(func(k, _ any) bool {
		if !got[k.(string)] {
			missing++
		}
		return true
	})
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged records lost", missing, n)
	}
	_ = before
	t.Logf("%d acknowledged records all read back", n)
}

func TestControllerKilledNewEpochAndOldFilesRefused(t *testing.T) {
	c := Start(t, Options{Brokers: 3})
	old := c.Controller()
	if old < 0 {
		t.Fatal("no controller")
	}
	oldEpoch := current(c).ControllerEpoch
	c.Kill(old)
	var next int
	testutil.WaitFor(t, 5*time.Second, func() error {
		next = c.Controller()
		if next < 0 || next == old {
			return fmt.Errorf("no new controller yet")
		}
		if a := c.Node(next).Runtime.Current(); a.ControllerEpoch <= oldEpoch || a.IsAlive(fmt.Sprintf("kaas-%d", old)) {
			return fmt.Errorf("assignment epoch %d, old controller alive %v", a.ControllerEpoch, a.IsAlive(fmt.Sprintf("kaas-%d", old)))
		}
		return nil
	})
	testutil.WaitFor(t, 5*time.Second, func() error {
		for i := range 3 {
			if n := c.Node(i); n != nil && (n.Runtime.KnownEpoch() <= oldEpoch || n.Runtime.Current().ControllerEpoch <= oldEpoch) {
				return fmt.Errorf("broker %d knows epoch %d, applied %d", i, n.Runtime.KnownEpoch(), n.Runtime.Current().ControllerEpoch)
			}
		}
		return nil
	})
	// The deposed controller's late write, at the old epoch, is refused by
	// every broker that knows the new epoch, and the controller puts its own
	// assignment back on disk.
	cur := c.Node(next).Runtime.Current()
	stale := *cur
	stale.ControllerEpoch, stale.AssignmentVersion, stale.Controller = oldEpoch, cur.AssignmentVersion+100, fmt.Sprintf("kaas-%d", old)
	stale.Partitions = nil
	data, _ := json.Marshal(&stale)
	if err := fsutil.WriteFile(filepath.Join(c.Dir, "__cluster", "assignment.json"), data); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		disk, err := cluster.ReadAssignment(filepath.Join(c.Dir, "__cluster", "assignment.json"))
		if err != nil || disk.ControllerEpoch == oldEpoch {
			return fmt.Errorf("stale file still on disk: %v", err)
		}
		return nil
	})
	for i := range 3 {
		if n := c.Node(i); n != nil && n.Runtime.Current().ControllerEpoch <= oldEpoch {
			t.Fatalf("broker %d applied the deposed controller's file: %+v", i, n.Runtime.Current())
		}
	}
	// The cluster keeps serving: create, produce, consume.
	cl := client(t, c)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "after"); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "after", Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if got := consumeAll(t, c, "after", 30); len(got) != 30 {
		t.Fatalf("read %d of 30", len(got))
	}
}

func TestSigtermDrainsBeforeExit(t *testing.T) {
	c := Start(t, Options{Brokers: 3})
	cl := client(t, c)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 6, 1, nil, "drain"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := len(current(c).Partitions); n != 6 {
			return fmt.Errorf("%d partitions assigned", n)
		}
		return nil
	})
	start := time.Now()
	if err := c.Shutdown(1); err != nil {
		t.Fatal(err)
	}
	// Drained well before the dead-after timeout: handed over, not detected.
	a := current(c)
	if got := leaderCounts(a, "drain"); got["kaas-1"] != 0 {
		t.Fatalf("kaas-1 still leads after shutdown: %v", got)
	}
	if r, _ := a.Row("kaas-1"); r.Health == cluster.Alive {
		t.Fatalf("kaas-1 row %+v", r)
	}
	t.Logf("drained in %v", time.Since(start))
	// The stopped report turns the row dead without waiting for detection.
	testutil.WaitFor(t, c.opts.DeadAfter/2, func() error {
		if r, _ := current(c).Row("kaas-1"); r.Health != cluster.Dead {
			return fmt.Errorf("row %+v", r)
		}
		return nil
	})
}

func TestOneMissedReportMovesNothing(t *testing.T) {
	// Reports every 100ms, dead after 1s: a broker that skips a few
	// reports (a pause shorter than dead-after) keeps its partitions.
	c := Start(t, Options{Brokers: 3})
	cl := client(t, c)
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 6, 1, nil, "steady"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := len(current(c).Partitions); n != 6 {
			return fmt.Errorf("%d partitions", n)
		}
		return nil
	})
	before := current(c)
	victim := (c.Controller() + 1) % 3
	c.Node(victim).Runtime.Pause(400 * time.Millisecond)
	time.Sleep(time.Second)
	after := current(c)
	if after.AssignmentVersion != before.AssignmentVersion {
		for _, b := range after.Brokers {
			if b.Health != cluster.Alive {
				t.Fatalf("a short pause changed health: %+v", after.Brokers)
			}
		}
		if fmt.Sprint(after.Partitions) != fmt.Sprint(before.Partitions) {
			t.Fatalf("a short pause moved partitions")
		}
	}
}

func TestBrokerFilesLiveUnderCluster(t *testing.T) {
	c := Start(t, Options{Brokers: 2})
	for _, p := range []string{"assignment.json", "brokers/kaas-0.json", "brokers/kaas-1.json", "cluster.json"} {
		if _, err := os.Stat(filepath.Join(c.Dir, "__cluster", p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// A second process started with the id of a live broker must refuse to
// start and disturb nothing: before, it started, both processes reported
// as kaas-0, the controller role flapped and the live broker was drained
// when the intruder stopped.
func TestSecondBrokerWithALiveIDIsRefused(t *testing.T) {
	c := Start(t, Options{Brokers: 2})
	// A topic and a group with a member: what kaas-0 leads and coordinates
	// must stay where it is.
	cl := client(t, c, kgo.ConsumerGroup("dup-g"), kgo.ConsumeTopics("dup-t"))
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 4, 1, nil, "dup-t"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if len(leaderCounts(current(c), "dup-t")) != 2 {
			return fmt.Errorf("partitions not spread yet: %v", leaderCounts(current(c), "dup-t"))
		}
		if _, err := kadm.NewClient(cl).DescribeGroups(context.Background(), "dup-g"); err != nil {
			return err
		}
		return nil
	})
	testutil.WaitFor(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		cl.PollFetches(ctx) // joins the group
		gs, err := kadm.NewClient(cl).DescribeGroups(context.Background(), "dup-g")
		if err != nil {
			return err
		}
		if g := gs["dup-g"]; g.State != "Stable" || len(g.Members) != 1 {
			return fmt.Errorf("group dup-g is %s with %d members", g.State, len(g.Members))
		}
		return nil
	})
	time.Sleep(3 * c.opts.DeadAfter)
	before := current(c)
	if before == nil {
		t.Fatal("no assignment")
	}
	bc := broker.Config{ID: 0, DataDir: c.Dir, Listen: "127.0.0.1:0", Logger: Logger(t)}
	n, err := node.Start(node.Config{Broker: bc, ReportInterval: c.opts.ReportInterval,
		DeadAfter: c.opts.DeadAfter, PollInterval: c.opts.PollInterval, ReadyTimeout: 10 * time.Second})
	if err == nil {
		n.Kill()
		t.Fatal("a second broker with the id kaas-0 started beside the live one")
	}
	if !strings.Contains(err.Error(), "kaas-0 is already running") {
		t.Fatalf("refusal does not say why: %v", err)
	}
	t.Logf("refused: %v", err)
	// Nothing moved: the same controller epoch, kaas-0 alive and leading
	// what it led, for several dead-after periods.
	time.Sleep(3 * c.opts.DeadAfter)
	after := current(c)
	if after.ControllerEpoch != before.ControllerEpoch {
		t.Fatalf("controller epoch %d -> %d after the refused start", before.ControllerEpoch, after.ControllerEpoch)
	}
	if b, a := leaderCounts(before, "dup-t"), leaderCounts(after, "dup-t"); fmt.Sprint(b) != fmt.Sprint(a) {
		t.Fatalf("partitions moved after the refused start: %v -> %v", b, a)
	}
	for _, p := range before.Partitions {
		for _, q := range after.Partitions {
			if p.Topic == q.Topic && p.Partition == q.Partition && (p.Broker != q.Broker || p.Epoch != q.Epoch) {
				t.Fatalf("%s-%d moved from %s (epoch %d) to %s (epoch %d)", p.Topic, p.Partition, p.Broker, p.Epoch, q.Broker, q.Epoch)
			}
		}
	}
	if fmt.Sprint(before.ConsumerGroups) != fmt.Sprint(after.ConsumerGroups) {
		t.Fatalf("group placements changed: %v -> %v", before.ConsumerGroups, after.ConsumerGroups)
	}
	for _, b := range after.Brokers {
		if b.Health != cluster.Alive {
			t.Fatalf("broker %s is %s after the refused start", b.ID, b.Health)
		}
	}
	if _, err := kadm.NewClient(cl).ListBrokers(context.Background()); err != nil {
		t.Fatal(err)
	}
}
