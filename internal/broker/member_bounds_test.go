package broker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Defect: a KIP-848 member's subscription had no bound: 30 members each
// subscribing to 50,000 long topic names took a broker from 43 MB to 2 GB,
// wrote a 243 MB group file on every change, and the memory stayed held
// after they left. Kafka keeps a member's subscription in one record of
// __consumer_offsets, at most message.max.bytes (1 MiB), and fails a
// heartbeat whose record would be larger with UNKNOWN_SERVER_ERROR; so
// does kaas now, before the member is added.
func TestOversizedConsumerSubscriptionIsRefused(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := make([]string, 50000)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%05d", strings.Repeat("t", 200), i)
	}
	join := func(topics []string) *kmsg.ConsumerGroupHeartbeatResponse {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.SetVersion(1)
		req.Group, req.MemberID, req.MemberEpoch = "flood", "m-flood-0123456789ab", 0
		req.RebalanceTimeoutMillis, req.SubscribedTopicNames, req.Topics = 30000, topics, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := join(names)
	if resp.ErrorCode != kerr.UnknownServerError.Code {
		t.Fatalf("a 10 MB subscription: %v, want UNKNOWN_SERVER_ERROR", kerr.ErrorForCode(resp.ErrorCode))
	}
	d := kmsg.NewPtrConsumerGroupDescribeRequest()
	d.Groups = []string{"flood"}
	dr, err := d.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(dr.Groups) == 1 && len(dr.Groups[0].Members) != 0 {
		t.Fatalf("the refused member was added: %d members", len(dr.Groups[0].Members))
	}
	if resp := join(names[:100]); resp.ErrorCode != 0 {
		t.Fatalf("a 21 KB subscription: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
}
