package broker

// OffsetFetch: (v8+ batches groups). A null topic list means
// every committed partition of the group; a partition with no commit, or a
// group that does not exist, answers offset -1 without an error (what the
// Apache coordinator answers). require_stable (v7+) answers
// UNSTABLE_OFFSET_COMMIT for partitions with pending transactional offsets.
// v9 (KIP-848) names the asking member and its epoch: for a consumer group
// they must be current (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH for the group).

import (
	"context"
	"errors"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/wire"
)

// fetchedPartition is one answer row, shared by the single and batched forms.
type fetchedPartition struct {
	topic     string
	partition int32
	offset    int64
	epoch     int32
	metadata  *string
	code      int16
}

// fetchGroupOffsets answers one group: its rows, or a group-level error.
func (b *Broker) fetchGroupOffsets(group string, topics []kmsg.OffsetFetchRequestTopic, all bool, requireStable bool) ([]fetchedPartition, *kerr.Error) {
	var tps []offsets.TP
	if !all {
		tps = []offsets.TP{}
		for _, t := range topics {
			for _, p := range t.Partitions {
				tps = append(tps, offsets.TP{Topic: t.Topic, Partition: p})
			}
		}
	}
	got, err := b.coord.Fetch(group, tps)
	if err != nil {
		e := coordError(err)
		if errors.Is(err, coord.ErrCoordinatorLoadError) || e == kerr.UnknownServerError {
			b.log.Error("offset fetch failed", "group", group, "err", err)
		}
		return nil, e
	}
	if all {
		for tp := range got {
			tps = append(tps, tp)
		}
		sort.Slice(tps, func(i, j int) bool {
			if tps[i].Topic != tps[j].Topic {
				return tps[i].Topic < tps[j].Topic
			}
			return tps[i].Partition < tps[j].Partition
		})
	}
	var unstable map[offsets.TP]bool
	if requireStable {
		var err error
		if unstable, err = b.coord.PendingTxnOffsets(group); err != nil {
			return nil, coordError(err)
		}
	}
	rows := make([]fetchedPartition, 0, len(tps))
	for _, tp := range tps {
		row := fetchedPartition{topic: tp.Topic, partition: tp.Partition, offset: -1, epoch: -1}
		if o, ok := got[tp]; ok {
			md := o.Metadata
			row.offset, row.epoch, row.metadata = o.Offset, o.LeaderEpoch, &md
		} else {
			empty := ""
			row.metadata = &empty
		}
		if unstable[tp] {
			row.code = kerr.UnstableOffsetCommit.Code
			row.offset = -1
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func init() { register(kmsg.OffsetFetch, 0, 9, (*Broker).handleOffsetFetch) }

func (b *Broker) handleOffsetFetch(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.OffsetFetchRequest)
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	if r.Version >= 8 {
		for _, rg := range r.Groups {
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group = rg.Group
			var topics []kmsg.OffsetFetchRequestTopic
			for _, t := range rg.Topics {
				topics = append(topics, kmsg.OffsetFetchRequestTopic{Topic: t.Topic, Partitions: t.Partitions})
			}
			var rows []fetchedPartition
			var e *kerr.Error
			if err := b.coord.CheckFetch(rg.Group, rg.MemberID, rg.MemberEpoch); err != nil {
				e = coordError(err)
			} else {
				rows, e = b.fetchGroupOffsets(rg.Group, topics, rg.Topics == nil, r.RequireStable)
			}
			if e != nil {
				g.ErrorCode = e.Code
			}
			for _, row := range rows {
				if n := len(g.Topics); n == 0 || g.Topics[n-1].Topic != row.topic {
					gt := kmsg.NewOffsetFetchResponseGroupTopic()
					gt.Topic = row.topic
					g.Topics = append(g.Topics, gt)
				}
				gp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				gp.Partition, gp.Offset, gp.LeaderEpoch, gp.Metadata, gp.ErrorCode = row.partition, row.offset, row.epoch, row.metadata, row.code
				gt := &g.Topics[len(g.Topics)-1]
				gt.Partitions = append(gt.Partitions, gp)
			}
			resp.Groups = append(resp.Groups, g)
		}
		return now(resp)
	}
	// v0-v1 have no top-level error and null topics only from v2.
	all := r.Topics == nil && r.Version >= 2
	rows, e := b.fetchGroupOffsets(r.Group, r.Topics, all, r.Version >= 7 && r.RequireStable)
	if e != nil {
		if r.Version >= 2 {
			resp.ErrorCode = e.Code
			return now(resp)
		}
		// v0-v1: the error goes on every partition asked for.
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p, -1, -1, e.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return now(resp)
	}
	for _, row := range rows {
		if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != row.topic {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = row.topic
			resp.Topics = append(resp.Topics, rt)
		}
		rp := kmsg.NewOffsetFetchResponseTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = row.partition, row.offset, row.epoch, row.metadata, row.code
		rt := &resp.Topics[len(resp.Topics)-1]
		rt.Partitions = append(rt.Partitions, rp)
	}
	return now(resp)
}
