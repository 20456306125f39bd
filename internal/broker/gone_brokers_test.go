package broker

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/testutil"
)

// awayAt is a movable Cluster whose other broker is listed at a port a
// test chooses.
type awayAt struct {
	movable
	port atomic.Int32
}

func (a *awayAt) Brokers() []BrokerInfo {
	return []BrokerInfo{a.b.self(), {NodeID: otherNode, Host: "127.0.0.1", Port: a.port.Load()}}
}

// metadataPartition asks b for topic's metadata at v12 and returns
// partition 0 of it.
func metadataPartition(t *testing.T, b *Broker, topic string) kmsg.MetadataResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	resp := roundTrip(t, b, req).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("metadata of %s: %+v", topic, resp.Topics)
	}
	return resp.Topics[0].Partitions[0]
}

// TestMetadataRightAfterAKillStillNamedTheDeadLeader: a client whose
// connection to a broker killed with -9 reads EOF asks for metadata at
// once, before the cluster has declared the broker dead and moved its
// partitions. The answer named the dead broker as their leader, with no
// error, and franz-go asks again only after its metadata min age (5 s): a
// KIP-848 member did not consume for about 5 s after the kill of its
// coordinator. Kafka names no leader that is not alive (LEADER_NOT_AVAILABLE,
// leader -1), and clients retry such a partition at once. Now a broker
// whose client address refuses connections (nothing listens: its process is
// gone) is answered so until its partitions move; one that listens again, or
// that accepts connections while frozen, is named as before.
func TestMetadataRightAfterAKillStillNamedTheDeadLeader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	a := &awayAt{}
	a.port.Store(int32(port))
	b := startBroker(t, t.TempDir(), func(c *Config) { c.Cluster = a })
	a.b = b
	cl := client(t, b)
	createTopic(t, cl, "gl", 1, nil)
	a.moveAway() // led by the other broker, which listens (alive, or frozen)

	if p := metadataPartition(t, b, "gl"); p.Leader != otherNode || p.ErrorCode != 0 {
		t.Fatalf("a leader that accepts connections: leader %d (%v), want %d", p.Leader, kerr.ErrorForCode(p.ErrorCode), otherNode)
	}
	// Its process dies: the listener closes, nothing listens on the port.
	ln.Close()
	testutil.WaitFor(t, 5*time.Second, func() error {
		p := metadataPartition(t, b, "gl")
		if p.Leader != -1 || p.ErrorCode != kerr.LeaderNotAvailable.Code || p.LeaderEpoch != -1 {
			return fmt.Errorf("leader whose address refuses connections answered as leader %d epoch %d (%v), want -1 -1 LEADER_NOT_AVAILABLE",
				p.Leader, p.LeaderEpoch, kerr.ErrorForCode(p.ErrorCode))
		}
		return nil
	})
	// The broker is listed still: only its partitions are answered so.
	md := kmsg.NewPtrMetadataRequest()
	resp := roundTrip(t, b, md).(*kmsg.MetadataResponse)
	if len(resp.Brokers) != 2 {
		t.Fatalf("brokers listed: %+v, want both", resp.Brokers)
	}

	// The cluster moves the partition here: named at once.
	a.moveTo(0)
	if p := metadataPartition(t, b, "gl"); p.Leader != 0 || p.ErrorCode != 0 {
		t.Fatalf("moved here: leader %d (%v), want 0", p.Leader, kerr.ErrorForCode(p.ErrorCode))
	}

	// Back on its address (restarted) and leading again: named again.
	ln2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	a.moveAway()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if p := metadataPartition(t, b, "gl"); p.Leader != otherNode || p.ErrorCode != 0 {
			return fmt.Errorf("restarted leader: leader %d (%v), want %d", p.Leader, kerr.ErrorForCode(p.ErrorCode), otherNode)
		}
		return nil
	})
}
