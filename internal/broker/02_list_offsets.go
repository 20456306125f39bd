package broker

// ListOffsets. Timestamps -1 latest, -2 earliest, -3 max
// timestamp (v7+), -4 earliest local (v8+, the same as earliest: kaas has no
// tiered storage), otherwise the first offset at or after the timestamp.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.ListOffsets, 1, 8, (*Broker).handleListOffsets) }

func (b *Broker) handleListOffsets(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.ListOffsetsRequest)
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range r.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		it, internal := b.internalTopic(rt.Topic)
		if _, ok := b.topics.Get(rt.Topic); ok {
			internal = false
		}
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			if internal { // an empty log at offset 0 (internal_topics.go)
				switch ts := rp.Timestamp; {
				case rp.Partition < 0 || rp.Partition >= it.Partitions:
					sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				case ts == -1 || ts == -2 || (ts == -4 && r.Version >= 8):
					sp.Offset, sp.LeaderEpoch = 0, 0
				case ts == -3 && r.Version >= 7, ts >= 0:
				default:
					sp.ErrorCode = kerr.InvalidRequest.Code
				}
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			p, err := b.partitionFor(rt.Topic, rp.Partition)
			if err != nil {
				sp.ErrorCode = storageError(err).Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			if e := checkLeaderEpoch(rp.CurrentLeaderEpoch, p.epoch); e != nil {
				sp.ErrorCode = e.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			l := p.log
			switch ts := rp.Timestamp; {
			case ts == -1 && r.IsolationLevel == 1:
				sp.Offset, sp.LeaderEpoch = l.LastStableOffset(), p.epoch
			case ts == -1:
				sp.Offset, sp.LeaderEpoch = l.HighWatermark(), p.epoch
			case ts == -2 || (ts == -4 && r.Version >= 8):
				sp.Offset, sp.LeaderEpoch = l.LogStartOffset(), p.epoch
			case ts == -3 && r.Version >= 7:
				if off, t, ok := l.MaxTimestamp(); ok {
					sp.Offset, sp.Timestamp, sp.LeaderEpoch = off, t, p.epoch
				}
			case ts < 0:
				sp.ErrorCode = kerr.InvalidRequest.Code
			default:
				if off, t, epoch, ok := l.OffsetForTimestamp(ts); ok && off < l.HighWatermark() {
					sp.Offset, sp.Timestamp, sp.LeaderEpoch = off, t, epoch
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return now(resp)
}
