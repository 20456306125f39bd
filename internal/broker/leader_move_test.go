package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// movable is a Cluster whose leaders a test moves: every partition is led
// by leader at epoch (this broker, node 0, at first); the other broker is
// listed with an address clients can be told.
type movable struct {
	b *Broker

	mu     sync.Mutex // guards leader, epoch
	leader int32
	epoch  int32
}

const otherNode = 7

func (m *movable) Brokers() []BrokerInfo {
	return []BrokerInfo{m.b.self(), {NodeID: otherNode, Host: "127.0.0.1", Port: 1}}
}
func (m *movable) ControllerID() int32 { return 0 }
func (m *movable) Leader(string, int32) (int32, int32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leader, m.epoch, true
}

// moveAway hands every partition to the other broker and tells the broker.
func (m *movable) moveAway() {
	m.mu.Lock()
	m.leader, m.epoch = otherNode, m.epoch+1
	m.mu.Unlock()
	m.b.AssignmentChanged()
}

func startMovable(t *testing.T) (*Broker, *movable) {
	t.Helper()
	m := &movable{}
	b := startBroker(t, t.TempDir(), func(c *Config) { c.Cluster = m })
	m.b = b
	return b, m
}

// TestLongPollFetchOutlivesTheLeadershipItWaitsOn: a Fetch parked at the
// end of a partition (max wait 60 s) must answer NOT_LEADER_OR_FOLLOWER as
// soon as the partition's leadership moves away, as Kafka completes a
// delayed fetch when its broker stops leading a partition. It used to
// wait out the whole max wait (franz-go's default is 5 s: every drain
// stalled the consumers of the drained broker's partitions for 5 s).
func TestLongPollFetchOutlivesTheLeadershipItWaitsOn(t *testing.T) {
	b, m := startMovable(t)
	cl := client(t, b)
	createTopic(t, cl, "lp", 1, nil)
	produceN(t, cl, "lp", 3)

	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 60_000, 1, 1<<20
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "lp"
	td, err := kadm.NewClient(cl).ListTopics(context.Background(), "lp")
	if err != nil {
		t.Fatal(err)
	}
	rt.TopicID = td["lp"].ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 0, 3, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	raw, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	type answer struct {
		resp *kmsg.FetchResponse
		err  error
	}
	done := make(chan answer, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	go func() {
		r, err := req.RequestWith(ctx, raw.Broker(0))
		done <- answer{r, err}
	}()
	time.Sleep(300 * time.Millisecond) // let the fetch park
	select {
	case a := <-done:
		t.Fatalf("the fetch answered before the move: %+v %v", a.resp, a.err)
	default:
	}
	m.moveAway()
	select {
	case a := <-done:
		if a.err != nil {
			t.Fatal(a.err)
		}
		p := a.resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != kerr.NotLeaderForPartition {
			t.Fatalf("after the move: %v, want NOT_LEADER_OR_FOLLOWER", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the parked fetch still waits 20 s after its partition moved away (its max wait is 60 s)")
	}
}
