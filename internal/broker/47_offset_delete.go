package broker

// OffsetDelete. GROUP_SUBSCRIBED_TO_TOPIC for topics an active
// consumer group subscribes to; GROUP_ID_NOT_FOUND for an unknown group.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.OffsetDelete, 0, 0, (*Broker).handleOffsetDelete) }

func (b *Broker) handleOffsetDelete(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.OffsetDeleteRequest)
	return func() kmsg.Response {
		resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
		var tps []offsets.TP
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				tps = append(tps, offsets.TP{Topic: t.Topic, Partition: p.Partition})
			}
		}
		refused, err := b.coord.DeleteOffsets(ctx, r.Group, tps)
		if err != nil {
			resp.ErrorCode = coordError(err).Code
			return resp
		}
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			_, known := b.topics.Get(t.Topic)
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition = p.Partition
				if e, ok := refused[t.Topic]; ok {
					rp.ErrorCode = coordError(e).Code
				} else if !known {
					rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
}
