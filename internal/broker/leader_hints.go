package broker

// Leader hints (KIP-951): a Produce or Fetch answer that refuses a
// partition because this broker does not lead it (NOT_LEADER_OR_FOLLOWER,
// FENCED_LEADER_EPOCH) names the partition's current leader and epoch, and
// lists that leader's endpoint, so a client moves to it without a metadata
// round trip. Kafka fills them from Fetch v12 / Produce v10 (endpoints from
// Fetch v16); older versions do not carry the fields and get nothing.
//
// A broker that the metadata no longer lists (draining, or declared dead
// while it still runs) gives no hint: the client then refreshes its
// metadata, finds the broker gone and closes its connections to it. With a
// hint it moves on without a refresh and keeps its idle connections to a
// process about to exit; once the broker is back on its address and leads
// again, a client that finds a dead connection only at its next use (franz-go
// checks epochs with OffsetForLeaderEpoch on it, fails with EOF, and waits a
// second) stalls on every partition that moved there.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// movedAway reports whether an error code is one a leader hint goes with.
func movedAway(code int16) bool {
	return code == kerr.NotLeaderForPartition.Code || code == kerr.FencedLeaderEpoch.Code
}

// hint is where a partition refused with code is led now, for the answer's
// CurrentLeader; ok is false when the code takes no hint or the assignment
// names no leader. The leader is added to nodes (its endpoint is listed).
func (b *Broker) hint(topic string, idx int32, code int16, nodes map[int32]bool) (node, epoch int32, ok bool) {
	if !movedAway(code) || topic == "" {
		return -1, -1, false
	}
	node, epoch, ok = b.cfg.Cluster.Leader(topic, idx)
	if !ok || node < 0 {
		return -1, -1, false
	}
	nodes[node] = true
	return node, epoch, true
}

// endpoints lists the brokers among nodes that clients may connect to.
func (b *Broker) endpoints(nodes map[int32]bool) []BrokerInfo {
	var out []BrokerInfo
	if len(nodes) == 0 {
		return nil
	}
	for _, bi := range b.cfg.Cluster.Brokers() {
		if nodes[bi.NodeID] {
			out = append(out, bi)
		}
	}
	return out
}

// listed reports whether the metadata this broker answers lists it.
func (b *Broker) listed() bool {
	for _, bi := range b.cfg.Cluster.Brokers() {
		if bi.NodeID == b.cfg.ID {
			return true
		}
	}
	return false
}

// hintFetch fills CurrentLeader (v12+) and the leaders' endpoints (v16+).
func (b *Broker) hintFetch(r *kmsg.FetchRequest, resp *kmsg.FetchResponse) {
	if r.Version < 12 || !b.listed() {
		return
	}
	nodes := map[int32]bool{}
	for i := range resp.Topics {
		st := &resp.Topics[i]
		name, _ := b.fetchTopicName(r.Version, st.Topic, st.TopicID) // "": no hint
		for j := range st.Partitions {
			sp := &st.Partitions[j]
			if node, epoch, ok := b.hint(name, sp.Partition, sp.ErrorCode, nodes); ok {
				sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = node, epoch
			}
		}
	}
	if r.Version < 16 {
		return
	}
	for _, bi := range b.endpoints(nodes) {
		e := kmsg.NewFetchResponseBroker()
		e.NodeID, e.Host, e.Port = bi.NodeID, bi.Host, bi.Port
		if bi.Rack != "" {
			e.Rack = &bi.Rack
		}
		resp.Brokers = append(resp.Brokers, e)
	}
}

// hintProduce fills CurrentLeader and the leaders' endpoints (v10+).
func (b *Broker) hintProduce(r *kmsg.ProduceRequest, resp *kmsg.ProduceResponse) {
	if r.Version < 10 || !b.listed() {
		return
	}
	nodes := map[int32]bool{}
	for i := range resp.Topics {
		st := &resp.Topics[i]
		for j := range st.Partitions {
			sp := &st.Partitions[j]
			if node, epoch, ok := b.hint(st.Topic, sp.Partition, sp.ErrorCode, nodes); ok {
				sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = node, epoch
			}
		}
	}
	for _, bi := range b.endpoints(nodes) {
		e := kmsg.NewProduceResponseBroker()
		e.NodeID, e.Host, e.Port = bi.NodeID, bi.Host, bi.Port
		if bi.Rack != "" {
			e.Rack = &bi.Rack
		}
		resp.Brokers = append(resp.Brokers, e)
	}
}
