package proctest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The KIP-848 flood against one broker process: 30 members of one
// group, each subscribing to 50,000 long topic names (about 360 MB sent).
// Before, RSS went from 43 MB to 2.0 GB, the group file on the volume to
// 243 MB, the broker stopped reporting alive, and 1.5 GB stayed held after
// the members expired. Now each heartbeat is refused (UNKNOWN_SERVER_ERROR,
// as on Kafka), RSS stays under 512 MiB throughout and comes back within 2×
// of where it started, and the broker still serves a normal member.
func TestKIP848SubscriptionFloodLeavesTheBrokerAsItWas(t *testing.T) {
	if testing.Short() {
		t.Skip("an OS process and 360 MB of requests; not in -short")
	}
	c := Start(t, Options{Brokers: 1})
	b := c.Brokers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before, _, err := procUsage(b.Pid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	names := make([]string, 50000)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%05d", strings.Repeat("n", 220), i)
	}
	var (
		wg       sync.Mutex
		refused  int
		peak     int64
		sampling = make(chan struct{})
	)
	go func() { // RSS while the flood runs
		for {
			select {
			case <-sampling:
				return
			case <-time.After(50 * time.Millisecond):
				if rss, _, err := procUsage(b.Pid()); err == nil {
					wg.Lock()
					peak = max(peak, rss)
					wg.Unlock()
				}
			}
		}
	}()
	var members sync.WaitGroup
	for i := range 30 {
		members.Go(func() {
			cl := c.Client(kgo.RetryTimeout(30 * time.Second))
			req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			req.SetVersion(1)
			req.Group, req.MemberID, req.MemberEpoch = "flood", fmt.Sprintf("flood-member-%02d-0123456789", i), 0
			req.RebalanceTimeoutMillis, req.SubscribedTopicNames, req.Topics = 30000, names, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				t.Errorf("member %d: %v", i, err)
				return
			}
			if resp.ErrorCode == kerr.UnknownServerError.Code {
				wg.Lock()
				refused++
				wg.Unlock()
			}
		})
	}
	members.Wait()
	close(sampling)
	// A normal member is served.
	adm := kadm.NewClient(c.Client())
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "flood-normal"); err != nil {
		t.Fatal(err)
	}
	cl := c.Client(kgo.ConsumerGroup("flood"), kgo.ConsumeTopics("flood-normal"), kgo.ServerSideBalancer())
	if err := WaitFor(30*time.Second, func() error {
		_, gen := cl.GroupMetadata()
		if gen <= 0 {
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			cl.PollFetches(pctx)
			cancel()
			return fmt.Errorf("not joined")
		}
		return nil
	}); err != nil {
		t.Fatalf("a normal member after the flood: %v\n%s", err, b.Tail(20))
	}
	cl.Close()
	var after int64
	if err := WaitFor(60*time.Second, func() error {
		if after, _, err = procUsage(b.Pid()); err != nil {
			return err
		}
		if after > 2*max(before, 64<<20) {
			return fmt.Errorf("RSS %d MiB, started at %d MiB", after>>20, before>>20)
		}
		return nil
	}); err != nil {
		t.Errorf("after the flood: %v", err)
	}
	t.Logf("30 members × 50,000 names: %d refused; RSS %d MiB before, %d MiB at peak, %d MiB after", refused, before>>20, peak>>20, after>>20)
	if refused != 30 {
		t.Errorf("%d of 30 oversized heartbeats refused", refused)
	}
	if peak > 512<<20 {
		t.Errorf("RSS peaked at %d MiB (bound 512 MiB)", peak>>20)
	}
}
