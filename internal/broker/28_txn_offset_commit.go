package broker

// TxnOffsetCommit. Stages offsets on the group coordinator
// (durably, in the group's file) until the transaction's marker commits or
// aborts them; v3+ carries the member information of KIP-447.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.TxnOffsetCommit, 0, 5, (*Broker).handleTxnOffsetCommit) }

func (b *Broker) handleTxnOffsetCommit(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.TxnOffsetCommitRequest)
	resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	offs := map[offsets.TP]offsets.Offset{}
	var pending []slot
	for ti, rt := range r.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		t, _ := b.topics.Get(rt.Topic)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			e := checkCommitPartition(t, rp.Partition, rp.Metadata)
			switch {
			case r.Group == "":
				sp.ErrorCode = kerr.InvalidGroupID.Code
			case e != nil:
				sp.ErrorCode = e.Code
			default:
				o := offsets.Offset{Offset: rp.Offset, LeaderEpoch: -1, ExpireTimestamp: -1}
				if r.Version >= 2 {
					o.LeaderEpoch = rp.LeaderEpoch
				}
				if rp.Metadata != nil {
					o.Metadata = *rp.Metadata
				}
				offs[offsets.TP{Topic: rt.Topic, Partition: rp.Partition}] = o
				pending = append(pending, slot{ti, len(st.Partitions)})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if len(pending) == 0 {
		return now(resp)
	}
	in := coord.TxnCommitInput{Group: r.Group, TransactionalID: r.TransactionalID, ProducerID: r.ProducerID,
		ProducerEpoch: r.ProducerEpoch, Generation: -1, Offsets: offs}
	if r.Version >= 3 {
		in.Generation, in.MemberID, in.InstanceID = r.Generation, r.MemberID, r.InstanceID
	}
	return func() kmsg.Response {
		refused, err := b.coord.TxnCommit(ctx, in)
		pending := refuse(pending, refused, func(t, p int) (string, int32, *int16) {
			rt := &resp.Topics[t]
			return rt.Topic, rt.Partitions[p].Partition, &rt.Partitions[p].ErrorCode
		})
		if err != nil {
			e := coordError(err)
			if e == kerr.CoordinatorNotAvailable || e == kerr.UnknownServerError {
				b.log.Error("transactional offset commit failed", "group", r.Group, "err", err)
			}
			for _, s := range pending {
				resp.Topics[s.t].Partitions[s.p].ErrorCode = e.Code
			}
		}
		return resp
	}
}
