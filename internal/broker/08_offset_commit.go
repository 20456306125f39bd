package broker

// OffsetCommit. Answered after the fsync that makes the
// offsets durable. Generation -1 without a member is a simple commit;
// otherwise the group's state machine checks member, instance and
// generation. Per partition: OFFSET_METADATA_TOO_LARGE over 4096 bytes,
// UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/topics"
	"github.com/kaas-dev/kaas/internal/wire"
)

// slot is a partition of a commit response, by topic and partition index.
type slot struct{ t, p int }

// refuse answers the partitions a consumer group refused on their own (a
// stale member epoch, KIP-1251) and returns the pending slots left.
func refuse(pending []slot, refused map[offsets.TP]error, at func(t, p int) (string, int32, *int16)) []slot {
	if len(refused) == 0 {
		return pending
	}
	left := pending[:0:0]
	for _, s := range pending {
		topic, partition, code := at(s.t, s.p)
		if err, ok := refused[offsets.TP{Topic: topic, Partition: partition}]; ok {
			*code = coordError(err).Code
			continue
		}
		left = append(left, s)
	}
	return left
}

// maxOffsetMetadata is Kafka's offset.metadata.max.bytes default.
const maxOffsetMetadata = 4096

// checkCommitPartition applies the per-partition rules shared by
// OffsetCommit and TxnOffsetCommit: metadata size, and a partition that
// exists. t is the topic from the registry, nil when unknown.
func checkCommitPartition(t *topics.Topic, partition int32, metadata *string) *kerr.Error {
	switch {
	case metadata != nil && len(*metadata) > maxOffsetMetadata:
		return kerr.OffsetMetadataTooLarge
	case t == nil || partition < 0 || partition >= t.Partitions:
		return kerr.UnknownTopicOrPartition
	}
	return nil
}

func init() { register(kmsg.OffsetCommit, 0, 9, (*Broker).handleOffsetCommit) }

func (b *Broker) handleOffsetCommit(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.OffsetCommitRequest)
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	nowMs := b.now().UnixMilli()
	offs := map[offsets.TP]offsets.Offset{}
	var pending []slot
	for ti, rt := range r.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		t, _ := b.topics.Get(rt.Topic)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			if e := checkCommitPartition(t, rp.Partition, rp.Metadata); e != nil {
				sp.ErrorCode = e.Code
			} else {
				o := offsets.Offset{Offset: rp.Offset, LeaderEpoch: -1, CommitTimestamp: nowMs, ExpireTimestamp: -1}
				if r.Version >= 6 {
					o.LeaderEpoch = rp.LeaderEpoch
				}
				if rp.Metadata != nil {
					o.Metadata = *rp.Metadata
				}
				if r.Version == 1 && rp.Timestamp != -1 {
					o.CommitTimestamp = rp.Timestamp
				}
				if r.Version >= 2 && r.Version <= 4 && r.RetentionTimeMillis > 0 {
					o.ExpireTimestamp = nowMs + r.RetentionTimeMillis
				}
				offs[offsets.TP{Topic: rt.Topic, Partition: rp.Partition}] = o
				pending = append(pending, slot{ti, len(st.Partitions)})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	gen, member := r.Generation, r.MemberID
	if r.Version == 0 {
		gen, member = -1, ""
	}
	setAll := func(e *kerr.Error) {
		for _, s := range pending {
			resp.Topics[s.t].Partitions[s.p].ErrorCode = e.Code
		}
	}
	if r.Group == "" {
		for ti := range resp.Topics {
			for pi := range resp.Topics[ti].Partitions {
				resp.Topics[ti].Partitions[pi].ErrorCode = kerr.InvalidGroupID.Code
			}
		}
		return now(resp)
	}
	if len(pending) == 0 {
		return now(resp)
	}
	fail := func(err error) {
		e := coordError(err)
		if e == kerr.CoordinatorNotAvailable || e == kerr.UnknownServerError {
			b.log.Error("offset commit failed", "group", r.Group, "err", err)
		}
		setAll(e)
	}
	// Checked and queued now, in request order; the fsync is waited for in
	// the response's turn, so commits pipelined on one connection share
	// durable writes without being reordered.
	wait, refused, err := b.coord.Commit(coord.CommitInput{Group: r.Group, Version: r.Version, Generation: gen, MemberID: member, InstanceID: r.InstanceID, Offsets: offs})
	if err != nil {
		fail(err)
		return now(resp)
	}
	pending = refuse(pending, refused, func(t, p int) (string, int32, *int16) {
		rt := &resp.Topics[t]
		return rt.Topic, rt.Partitions[p].Partition, &rt.Partitions[p].ErrorCode
	})
	return func() kmsg.Response {
		start := time.Now()
		if err := wait(ctx); err != nil {
			fail(err)
		} else {
			b.cfg.Metrics.Durable("group", time.Since(start))
			b.cfg.Metrics.Committed(len(pending))
		}
		return resp
	}
}
