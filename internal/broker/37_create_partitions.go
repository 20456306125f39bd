package broker

// CreatePartitions. Served by the controller only (clients
// send it there; others answer NOT_CONTROLLER), so the topic file has one
// writer. Partitions can only be added; placement hints are ignored (the
// controller places leaders). The request carries no configs: the topic keeps
// the ones checked against Kafka's bounds when it was created.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/topics"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.CreatePartitions, 0, 3, (*Broker).handleCreatePartitions) }

func (b *Broker) handleCreatePartitions(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.CreatePartitionsRequest)
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	isController := b.cfg.Cluster.ControllerID() == b.cfg.ID
	var grown []*topics.Topic
	seen := map[string]int{}
	for _, rt := range r.Topics {
		seen[rt.Topic]++
	}
	for _, rt := range r.Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = rt.Topic
		fail := func(e *kerr.Error, msg string) {
			st.ErrorCode = e.Code
			st.ErrorMessage = &msg
		}
		_, internal := b.internalTopic(rt.Topic)
		switch {
		case seen[rt.Topic] > 1:
			fail(kerr.InvalidRequest, "topic named more than once")
		case internal:
			fail(kerr.InvalidPartitions, "the internal topics of kaas hold no records; their partition count is fixed at 50")
		case !isController:
			fail(kerr.NotController, "send CreatePartitions to the controller")
		default:
			t, err := b.topics.Grow(rt.Topic, rt.Count, r.ValidateOnly)
			switch {
			case errors.Is(err, topics.ErrUnknown):
				fail(kerr.UnknownTopicOrPartition, err.Error())
			case errors.Is(err, topics.ErrInvalidCount):
				fail(kerr.InvalidPartitions, err.Error())
			case err != nil:
				b.log.Error("adding partitions failed", "topic", rt.Topic, "err", err)
				fail(kerr.UnknownServerError, clientMessage(kerr.UnknownServerError, err)) // no volume paths to clients
			case !r.ValidateOnly:
				b.log.Info("partitions added", "topic", rt.Topic, "partitions", t.Partitions)
				grown = append(grown, t)
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	if len(grown) == 0 {
		return now(resp)
	}
	b.cfg.TopicsChanged()
	timeout := min(time.Duration(r.TimeoutMillis)*time.Millisecond, 10*time.Second)
	return func() kmsg.Response {
		if err := b.waitForLeaders(ctx, grown, timeout); err != nil {
			c.log.Info("CreatePartitions answered before every new partition had a leader", "err", err)
		}
		return resp
	}
}

// waitForLeaders waits until every partition of ts has a leader, as Kafka
// answers topic changes once the metadata has them.
func (b *Broker) waitForLeaders(ctx context.Context, ts []*topics.Topic, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for _, t := range ts {
		for p := int32(0); p < t.Partitions; p++ {
			for {
				if _, _, ok := b.cfg.Cluster.Leader(t.Name, p); ok {
					break
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-deadline.C:
					return fmt.Errorf("%s/%d has no leader after %v", t.Name, p, timeout)
				case <-tick.C:
				}
			}
		}
	}
	return nil
}
