package clustertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/testutil"
)

// readErrors is a franz-go hook that records the requests whose answer
// could not be read (a connection the broker closed), by API key.
type readErrors struct {
	mu   sync.Mutex
	errs map[int16][]error
}

func (h *readErrors) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errs == nil {
		h.errs = map[int16][]error{}
	}
	h.errs[key] = append(h.errs[key], err)
}

func (h *readErrors) of(key int16) []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs[key]...)
}

// TestDrainedBrokerBackConsumerValidatesOnADeadConnection drains a broker
// under a franz-go consumer and starts it again on its address. The
// draining broker used to answer the consumer's fetches with KIP-951
// leader hints, so the consumer moved its partitions without a metadata
// refresh and never saw the broker leave the broker list: it kept its idle
// connection to the stopped process. When the broker came back and led
// partitions again, the consumer validated their epochs (OffsetForLeaderEpoch)
// on that dead connection, failed with EOF, and waited a fixed second
// before trying again: the longest pause of every franz-go driver in the
// rolling-restart scenario (issue 14). A broker the metadata no longer
// lists gives no hint now; the consumer's refresh drops the connections.
func TestDrainedBrokerBackConsumerValidatesOnADeadConnection(t *testing.T) {
	c := Start(t, Options{Brokers: 3})
	const topic, parts = "stale", 6
	prod := client(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := context.Background()
	if _, err := kadm.NewClient(prod).CreateTopic(ctx, parts, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := len(current(c).Partitions); n != parts {
			return fmt.Errorf("%d partitions assigned", n)
		}
		return nil
	})
	next := 0
	produce := func(n int) {
		t.Helper()
		var rs []*kgo.Record
		for range n {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(next % parts), Value: fmt.Appendf(nil, "r%05d", next)})
			next++
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// The consumer refreshes metadata only when it must: no timed refresh
	// happens to drop the dead connection within the test.
	hook := &readErrors{}
	cons := client(t, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(time.Minute), kgo.MetadataMaxAge(time.Hour),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.WithHooks(hook))
	seen := map[string]bool{}
	consumeAll := func(what string) {
		t.Helper()
		start := time.Now()
		deadline := start.Add(30 * time.Second)
		defer func() { t.Logf("%s: all %d records consumed after %v", what, next, time.Since(start)) }()
		for len(seen) < next {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d records consumed", what, len(seen), next)
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := cons.PollFetches(pctx)
			cancel()
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
		}
	}
	produce(60)
	consumeAll("before the drain")

	victim := 1
	if err := c.Shutdown(victim); err != nil {
		t.Fatal(err)
	}
	produce(60)
	consumeAll("while the broker is down")

	c.Restart(victim)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if r, _ := current(c).Row(fmt.Sprintf("kaas-%d", victim)); r.Health != cluster.Alive {
			return fmt.Errorf("kaas-%d: %+v", victim, r)
		}
		return nil
	})
	// The next broker of the roll drains: its partitions go to the two
	// others, the restarted one among them, and the consumer follows.
	if err := c.Shutdown(2); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := leaderCounts(current(c), topic)[fmt.Sprintf("kaas-%d", victim)]; n == 0 {
			return fmt.Errorf("kaas-%d leads nothing yet", victim)
		}
		return nil
	})
	produce(60)
	consumeAll("after the next drain")

	if errs := hook.of(kmsg.OffsetForLeaderEpoch.Int16()); len(errs) > 0 {
		t.Fatalf("the consumer validated epochs on a dead connection to the restarted broker (it then waits 1 s): %v", errs)
	}
	if errs := hook.of(kmsg.ListOffsets.Int16()); len(errs) > 0 {
		t.Fatalf("the consumer listed offsets on a dead connection: %v", errs)
	}
}
