package broker

// OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch's records
// end, from the partition's leader-epoch history. Consumers ask it after a
// leader change to check that their position is still in the log; clients
// that see the API (v2+) also track leader epochs from Metadata, which lets
// them follow a moved partition from a NOT_LEADER_OR_FOLLOWER answer's
// leader hint (KIP-951) without a metadata round trip.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.OffsetForLeaderEpoch, 2, 4, (*Broker).handleOffsetForLeaderEpoch) }

func (b *Broker) handleOffsetForLeaderEpoch(ctx context.Context, _ *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.OffsetForLeaderEpochRequest)
	var want map[string]map[int32]int32
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			want = b.ifBehind(want, rt.Topic, rp.Partition, rp.CurrentLeaderEpoch)
		}
	}
	if len(want) == 0 {
		return now(b.offsetForLeaderEpoch(r))
	}
	return func() kmsg.Response {
		b.catchUp(ctx, want)
		return b.offsetForLeaderEpoch(r)
	}
}

func (b *Broker) offsetForLeaderEpoch(r *kmsg.OffsetForLeaderEpochRequest) *kmsg.OffsetForLeaderEpochResponse {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range r.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LeaderEpoch, sp.EndOffset = -1, -1
			p, err := b.partitionFor(rt.Topic, rp.Partition)
			switch {
			case err != nil:
				sp.ErrorCode = storageError(err).Code
			case checkLeaderEpoch(rp.CurrentLeaderEpoch, p.epoch) != nil:
				sp.ErrorCode = checkLeaderEpoch(rp.CurrentLeaderEpoch, p.epoch).Code
			default:
				sp.LeaderEpoch, sp.EndOffset = p.log.EpochEnd(rp.LeaderEpoch)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
