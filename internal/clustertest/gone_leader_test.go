package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/testutil"
)

// TestMetadataRightAfterAKillNamesTheSurvivors: a client whose connection
// to a broker killed with -9 reads EOF asks at once for metadata, before the
// cluster has declared the broker dead (a report interval later) and moved
// its partitions. The answer named the dead broker, and franz-go asked again
// only after its metadata min age (5 s): a KIP-848 member did not consume
// for about 5 s after the kill of its coordinator. Asked right after the
// kill, a survivor now answers with the broker that took over: the leader is
// never the dead broker.
func TestMetadataRightAfterAKillNamesTheSurvivors(t *testing.T) {
	c := Start(t, Options{ReportInterval: time.Second, DeadAfter: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "gone"); err != nil {
		t.Fatal(err)
	}
	// ask sends one Metadata request for the topic to addr alone (a new
	// client sends its first request to its seed).
	ask := func(addr string) (*kmsg.MetadataResponse, error) {
		one, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			return nil, err
		}
		defer one.Close()
		mr := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr("gone")
		mr.Topics = append(mr.Topics, mt)
		return mr.RequestWith(ctx, one)
	}
	// The broker asked after the kill is the controller, and the victim a
	// partition's leader as the controller names it. Each broker applies an
	// assignment on its own poll: until the controller names a leader for
	// every partition, its answer (LEADER_NOT_AVAILABLE) says nothing about
	// the kill.
	var victim int32 = -1
	var part int32
	var survivor string
	testutil.WaitFor(t, 10*time.Second, func() error {
		ctrl := int32(c.Controller())
		survivor = c.AllAddrs()[ctrl]
		md, err := ask(survivor)
		if err != nil {
			return err
		}
		victim = -1
		for _, p := range md.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 {
				return fmt.Errorf("partition %d has no leader yet at the controller", p.Partition)
			}
			if p.Leader != ctrl {
				victim, part = p.Leader, p.Partition
			}
		}
		if victim < 0 {
			return fmt.Errorf("every partition is led by the controller")
		}
		return nil
	})
	c.Kill(int(victim))
	resp, err := ask(survivor)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.Partition == part && (p.ErrorCode != 0 || p.Leader == victim) {
			t.Fatalf("Metadata right after the kill of broker %d: partition %d led by %d, error %d; want a survivor", victim, part, p.Leader, p.ErrorCode)
		}
	}
}
