package broker

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// settling is a movable Cluster that says whether every broker acts on its
// assignment (Settler).
type settling struct {
	movable
	settled atomic.Bool
}

func (s *settling) Settled() bool { return s.settled.Load() }

// fetcher asks b for partition 0 of topic at a version, knowing a leader
// epoch, with a max wait. The topic's id is looked up at once, while b
// still leads it (a Metadata answer naming the test's other broker, whose
// address refuses connections, would wait GoneLeaderWait).
func fetcher(t *testing.T, b *Broker, topic string) func(version int16, current, maxWaitMs int32) kmsg.FetchResponseTopicPartition {
	t.Helper()
	id := fetchOne(t, client(t, b), topic, 0, 0).Topics[0].TopicID
	return func(version int16, current, maxWaitMs int32) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version = version
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = maxWaitMs, 1, 1<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 0, 1<<20, current
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := roundTrip(t, b, req).(*kmsg.FetchResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch v%d of %s: %+v", version, topic, resp.Topics)
		}
		return resp.Topics[0].Partitions[0]
	}
}

// TestMovedPartitionFetchedBeforeV16RedirectsToItsNewLeader: a consumer
// that fetches at v11-v15 (sarama: v12) learns nothing from
// NOT_LEADER_OR_FOLLOWER, and sarama waited its 2 s Consumer.Retry.Backoff
// after it at every move of a rolling restart. A former leader now sends
// such a client, when it tracks leader epochs, to the new leader as its
// preferred read replica (KIP-392), which sarama follows at once; only once
// every broker acts on the move, and waiting for that at most the fetch's
// max wait. Clients without a leader epoch, and v16 clients (which get the
// new leader's endpoint with the error, KIP-951), are refused as before.
func TestMovedPartitionFetchedBeforeV16RedirectsToItsNewLeader(t *testing.T) {
	s := &settling{}
	b := startBroker(t, t.TempDir(), func(c *Config) { c.Cluster = s })
	s.b = b
	cl := client(t, b)
	createTopic(t, cl, "rd", 1, nil)
	produceN(t, cl, "rd", 3)
	fetchAt := fetcher(t, b, "rd")
	s.moveAway() // epoch 1, at the other broker
	s.settled.Store(true)

	if p := fetchAt(12, 0, 100); p.ErrorCode != 0 || p.PreferredReadReplica != otherNode || len(p.RecordBatches) != 0 {
		t.Fatalf("v12 with the old epoch: %v, preferred replica %d, %d bytes; want no error and a redirect to %d",
			kerr.ErrorForCode(p.ErrorCode), p.PreferredReadReplica, len(p.RecordBatches), otherNode)
	}
	for _, c := range []struct {
		what    string
		version int16
		current int32
	}{
		{"v12 without a leader epoch", 12, -1},
		{"v11 without a leader epoch", 11, -1},
		{"v16 with the old epoch", 16, 0},
		{"v10 with the old epoch", 10, 0},
		{"v12 with the new epoch", 12, 1},
	} {
		p := fetchAt(c.version, c.current, 100)
		if err := kerr.ErrorForCode(p.ErrorCode); err != kerr.NotLeaderForPartition || p.PreferredReadReplica != -1 {
			t.Errorf("%s: %v, preferred replica %d; want NOT_LEADER_OR_FOLLOWER and none", c.what, err, p.PreferredReadReplica)
		}
	}

	// Not every broker acts on the move yet: the fetch waits its max wait
	// for it, then is refused as before.
	s.settled.Store(false)
	start := time.Now()
	if p := fetchAt(12, 0, 300); kerr.ErrorForCode(p.ErrorCode) != kerr.NotLeaderForPartition {
		t.Fatalf("v12 before the cluster settled: %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(p.ErrorCode))
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("refused after %v, before the fetch's max wait (300ms)", waited)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		s.settled.Store(true)
	}()
	if p := fetchAt(12, 0, 5000); p.ErrorCode != 0 || p.PreferredReadReplica != otherNode {
		t.Fatalf("v12, the cluster settling meanwhile: %v, preferred replica %d; want a redirect to %d",
			kerr.ErrorForCode(p.ErrorCode), p.PreferredReadReplica, otherNode)
	}
}

// TestLeaderServesAnOlderLeaderEpochBeforeV16: the client a former leader
// redirected (above) fetches from the new leader with the epoch of its old
// metadata (sarama keeps it while it follows a replica). Fenced, it waited
// its 2 s backoff anyway. Before v16 the leader serves it: every leader
// reads the one log on the volume, so there is no diverged log to fence a
// reader from. From v16 it stays FENCED_LEADER_EPOCH.
func TestLeaderServesAnOlderLeaderEpochBeforeV16(t *testing.T) {
	b, m := startMovable(t)
	cl := client(t, b)
	createTopic(t, cl, "oe", 1, nil)
	m.moveAway()
	m.moveTo(0) // epoch 2, here
	produceN(t, cl, "oe", 3)
	fetchAt := fetcher(t, b, "oe")

	if p := fetchAt(12, 0, 100); p.ErrorCode != 0 || len(p.RecordBatches) == 0 || p.HighWatermark != 3 {
		t.Fatalf("v12 with epoch 0 at a leader of epoch 2: %v, %d bytes, high watermark %d; want the records",
			kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches), p.HighWatermark)
	}
	if p := fetchAt(16, 0, 100); kerr.ErrorForCode(p.ErrorCode) != kerr.FencedLeaderEpoch {
		t.Fatalf("v16 with epoch 0 at a leader of epoch 2: %v, want FENCED_LEADER_EPOCH", kerr.ErrorForCode(p.ErrorCode))
	}
	if p := fetchAt(12, 3, 100); kerr.ErrorForCode(p.ErrorCode) != kerr.UnknownLeaderEpoch {
		t.Fatalf("v12 with epoch 3 at a leader of epoch 2: %v, want UNKNOWN_LEADER_EPOCH", kerr.ErrorForCode(p.ErrorCode))
	}
}
