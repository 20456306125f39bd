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
	var md kadm.Metadata
	testutil.WaitFor(t, 10*time.Second, func() error {
		md, err = adm.Metadata(ctx, "gone")
		if err != nil {
			return err
		}
		for _, p := range md.Topics["gone"].Partitions {
			if p.Leader < 0 {
				return fmt.Errorf("partition %d has no leader yet", p.Partition)
			}
		}
		return nil
	})
	// A partition led by a broker that is not the controller.
	var victim int32 = -1
	var part int32
	for _, p := range md.Topics["gone"].Partitions {
		if p.Leader != int32(c.Controller()) {
			victim, part = p.Leader, p.Partition
			break
		}
	}
	if victim < 0 {
		t.Fatal("every partition is led by the controller")
	}
	var survivor string
	for i, a := range c.AllAddrs() {
		if int32(i) != victim {
			survivor = a
			break
		}
	}
	c.Kill(int(victim))
	one, err := kgo.NewClient(kgo.SeedBrokers(survivor))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	mr := kmsg.NewPtrMetadataRequest()
	topic := "gone"
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = &topic
	mr.Topics = append(mr.Topics, mt)
	resp, err := mr.RequestWith(ctx, one)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.Partition == part && (p.ErrorCode != 0 || p.Leader == victim) {
			t.Fatalf("Metadata right after the kill of broker %d: partition %d led by %d, error %d; want a survivor", victim, part, p.Leader, p.ErrorCode)
		}
	}
}
