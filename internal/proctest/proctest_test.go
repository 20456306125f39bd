package proctest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestProcessesSharingOneFolder runs 3 brokers as separate OS processes over
// one folder and takes them through kill -9, a SIGTERM drain and a SIGSTOP
// beyond the liveness timeout, while franz-go produces acks=all to 6
// partitions. Every acknowledged record must be read back with its value,
// and no offset may be acknowledged for two different records.
func TestProcessesSharingOneFolder(t *testing.T) {
	c := Start(t, Options{Brokers: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.Client())
	const topic, parts = "chaos", 6
	if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	prod, err := StartProducer(c.Addrs(), topic, parts, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Stop(5 * time.Second)
	l := prod.Ledger
	t0 := time.Now()
	step := func(what string) {
		t.Helper()
		from := l.Ends()
		if err := WaitProgress(l, from, parts, 45*time.Second); err != nil {
			t.Fatalf("%s: produce did not progress on every partition: %v", what, err)
		}
		a, f := l.Count()
		t.Logf("%s: produce progresses on every partition (acked %d, failed %d) [%v]", what, a, f, time.Since(t0).Round(100*time.Millisecond))
	}
	step("start")

	// kill -9 one broker: its partitions move, acked records survive.
	victim := c.Brokers[1]
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	step("after kill -9 of broker 1")
	if err := ReadBack(ctx, c.Addrs(), topic, l); err != nil {
		t.Fatalf("after kill -9: %v", err)
	}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	step("broker 1 restarted")

	// SIGTERM drains another: it must exit by itself, with status 0.
	if err := c.Brokers[2].Terminate(45 * time.Second); err != nil {
		t.Fatalf("drain: %v", err)
	}
	step("after SIGTERM drain of broker 2")
	if err := c.Brokers[2].Start(); err != nil {
		t.Fatal(err)
	}
	step("broker 2 restarted")

	// SIGSTOP the leader of partition 0 beyond --dead-after. A client that
	// knows it as leader keeps sending to it; after SIGCONT it must not
	// act as leader of a partition that moved on.
	leader := leaderOf(t, ctx, adm, topic, 0)
	frozen := c.Broker(leader)
	zombie, err := kgo.NewClient(kgo.SeedBrokers(frozen.Addr), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMaxAge(time.Minute),
		kgo.MetadataMinAge(500*time.Millisecond), kgo.RecordDeliveryTimeout(40*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close()
	if err := zombie.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("zombie-warmup")}).FirstErr(); err != nil {
		t.Fatalf("warm-up produce through broker %d: %v", leader, err)
	}
	if err := frozen.Stop(); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	step(fmt.Sprintf("broker %d frozen", leader))
	if d := c.Opts.DeadAfter + 2*time.Second - time.Since(frozenAt); d > 0 {
		time.Sleep(d) // the freeze must outlast the liveness timeout
	}
	newLeader := leaderOf(t, ctx, adm, topic, 0)
	if newLeader == leader {
		t.Fatalf("partition 0 still led by frozen broker %d after %v", leader, time.Since(frozenAt))
	}
	// Queue writes through the stale client, then resume the broker: they
	// reach it the moment it runs again.
	zr := make(chan error, 20)
	for i := range 20 {
		v := fmt.Sprintf("zombie-%d", i)
		zombie.Produce(ctx, &kgo.Record{Partition: 0, Value: []byte(v)}, func(r *kgo.Record, err error) {
			if err == nil {
				err = l.Ack(r.Partition, r.Offset, v)
			} else {
				err = nil // refused or timed out: not acknowledged, nothing to check
			}
			zr <- err
		})
	}
	if err := frozen.Cont(); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		select {
		case err := <-zr:
			if err != nil {
				t.Errorf("zombie write: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("zombie writes got no answer")
		}
	}
	step(fmt.Sprintf("broker %d resumed", leader))

	if err := prod.Stop(30 * time.Second); err != nil {
		t.Errorf("producer: %v", err)
	}
	if err := ReadBack(ctx, c.Addrs(), topic, l); err != nil {
		t.Fatalf("final: %v", err)
	}
	a, f := l.Count()
	t.Logf("every one of %d acknowledged records read back (%d produces failed, allowed)", a, f)
	for _, b := range c.Brokers {
		if !b.Running() {
			t.Errorf("broker %d not running at the end", b.ID)
		}
	}
}

func leaderOf(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, p int32) int32 {
	t.Helper()
	var leader int32 = -1
	err := WaitFor(20*time.Second, func() error {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		md, err := adm.Metadata(actx, topic)
		if err != nil {
			return err
		}
		pd, ok := md.Topics[topic].Partitions[p]
		if !ok || pd.Err != nil || pd.Leader < 0 {
			return fmt.Errorf("partition %d: no leader (%v)", p, pd.Err)
		}
		leader = pd.Leader
		return nil
	})
	if err != nil {
		t.Fatalf("leader of %s/%d: %v", topic, p, err)
	}
	return leader
}
