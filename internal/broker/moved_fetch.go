package broker

// A consumer fetching a partition that moved away, at Fetch v11-v15. From
// v16 a NOT_LEADER_OR_FOLLOWER answer names the new leader and its endpoint
// (KIP-951, leader_hints.go) and the client follows at once. Before v16 the
// client learns nothing from it but to look again, and sarama (Fetch v12)
// waits out its Consumer.Retry.Backoff (2 s) first, at every move of a
// rolling restart. A client from v11 follows a preferred read replica at
// once (KIP-392): sarama skips that wait for it.
//
// So a former leader answers such a fetch, from a client that tracks leader
// epochs (CurrentLeaderEpoch >= 0) and knows one older than the move's,
// without an error, with no records, and with the new leader as the
// preferred read replica. It does so only once every broker acts on the
// assignment that moved the partition (the new leader serves it): the fetch
// waits for that, at most its max wait, and is refused as before if it does
// not come. Clients that send no leader epoch (librdkafka before KIP-320,
// kafkajs, kafka-go) are refused as before, as are v16+ clients.
//
// The new leader then serves the client, whose fetch still carries the
// epoch of its old metadata (sarama keeps it while it follows a replica):
// at v11-v15 an older epoch is served instead of fenced. Kafka fences it
// because a former leader's log may have diverged (KIP-320); here every
// leader reads the one log on the volume, and offsets never change meaning
// on a move, so there is nothing to fence a reader from. From v16 the
// answer stays FENCED_LEADER_EPOCH with the leader's hint.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Settler is implemented by a Cluster that knows whether every live broker
// acts on the assignment this broker acts on.
type Settler interface{ Settled() bool }

// settledTick is how often a wait for the cluster to settle (a fetch
// redirect here, a held Metadata answer in gone_leaders.go) checks again.
const settledTick = 50 * time.Millisecond

// followsReplicas reports whether a fetch is from a consumer at a version
// whose answers carry a preferred read replica but no leader endpoints.
func followsReplicas(r *kmsg.FetchRequest) bool {
	replica := r.ReplicaID
	if r.Version >= 15 {
		replica = r.ReplicaState.ID
	}
	return r.Version >= 11 && r.Version < 16 && replica < 0
}

// servesOlderEpoch reports whether a fetch with a leader epoch older than
// the leader's is served rather than fenced (see the file comment).
func servesOlderEpoch(r *kmsg.FetchRequest) bool { return followsReplicas(r) }

// redirectMoved rewrites, in resp, the partitions refused because they moved
// to another listed broker into redirects to it (see the file comment),
// once the cluster settled on their move.
func (b *Broker) redirectMoved(ctx context.Context, r *kmsg.FetchRequest, resp *kmsg.FetchResponse) {
	if !followsReplicas(r) {
		return
	}
	s, ok := b.cfg.Cluster.(Settler)
	if !ok || !anyNotLeader(resp) || !b.movedToListed(r, resp, false) {
		return
	}
	b.awaitApplied(ctx, time.Duration(r.MaxWaitMillis)*time.Millisecond, settledTick, func() bool { return !s.Settled() })
	if !s.Settled() {
		return
	}
	b.movedToListed(r, resp, true)
}

// anyNotLeader reports whether a partition of resp is refused with
// NOT_LEADER_OR_FOLLOWER (the common answer has none: nothing to look up).
func anyNotLeader(resp *kmsg.FetchResponse) bool {
	for _, st := range resp.Topics {
		for _, sp := range st.Partitions {
			if sp.ErrorCode == kerr.NotLeaderForPartition.Code {
				return true
			}
		}
	}
	return false
}

// movedToListed reports whether a partition of resp is refused with
// NOT_LEADER_OR_FOLLOWER for a client knowing a leader epoch older than the
// one the assignment names now at another listed broker; with rewrite, it
// rewrites each such partition into a redirect there.
func (b *Broker) movedToListed(r *kmsg.FetchRequest, resp *kmsg.FetchResponse, rewrite bool) bool {
	listed := map[int32]bool{}
	for _, bi := range b.cfg.Cluster.Brokers() {
		listed[bi.NodeID] = true
	}
	asked := map[string]map[int32]int32{}
	for _, rt := range r.Topics {
		name, ok := b.fetchTopicName(r.Version, rt.Topic, rt.TopicID)
		if !ok {
			continue
		}
		if asked[name] == nil {
			asked[name] = map[int32]int32{}
		}
		for _, rp := range rt.Partitions {
			asked[name][rp.Partition] = rp.CurrentLeaderEpoch
		}
	}
	found := false
	for i := range resp.Topics {
		st := &resp.Topics[i]
		name, ok := b.fetchTopicName(r.Version, st.Topic, st.TopicID)
		if !ok {
			continue
		}
		for j := range st.Partitions {
			sp := &st.Partitions[j]
			if sp.ErrorCode != kerr.NotLeaderForPartition.Code {
				continue
			}
			known, ok := asked[name][sp.Partition]
			if !ok || known < 0 {
				continue
			}
			node, epoch, ok := b.cfg.Cluster.Leader(name, sp.Partition)
			if !ok || node == b.cfg.ID || !listed[node] || known >= epoch {
				continue
			}
			found = true
			if !rewrite {
				return true
			}
			sp.ErrorCode = 0
			sp.PreferredReadReplica = node
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			sp.RecordBatches = []byte{}
		}
	}
	return found
}
