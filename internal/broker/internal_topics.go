package broker

// The internal topics as Kafka shows them. kaas keeps committed offsets in
// one file per group and transactions in one file per transactional id
// (docs/offsets.md, docs/transactions.md), not in topics; Metadata still
// lists __consumer_offsets and __transaction_state, marked internal, with
// Kafka's default 50 partitions each spread over the live brokers, so that
// regex subscriptions, "exclude internal topics" settings and tools see
// what they see on Kafka. They hold no records: Fetch at offset 0 answers
// empty (high watermark 0), ListOffsets answers 0, DescribeConfigs shows
// Kafka's settings for them. Produce answers INVALID_TOPIC_EXCEPTION and
// CreateTopics TOPIC_ALREADY_EXISTS, as on Kafka; DeleteTopics and
// CreatePartitions are refused (the state they would stand for lives in
// files). docs/status.md, "Internal topics".

import (
	"crypto/sha256"
	"math"
	"slices"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/topics"
)

// internalPartitions is Kafka's default offsets.topic.num.partitions and
// transaction.state.log.num.partitions.
const internalPartitions = 50

// offsetsPartition is the __consumer_offsets partition Kafka keeps a group's
// records in: the group id's Java hash code (over its UTF-16 code units),
// its absolute value (0 for the smallest int), modulo the partitions.
// DescribeTransactions names it for a group whose offsets a transaction
// added, as Kafka does.
func offsetsPartition(group string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(group)) {
		h = 31*h + int32(u)
	}
	if h == math.MinInt32 {
		return 0
	}
	if h < 0 {
		h = -h
	}
	return h % internalPartitions
}

// internalNames are the internal topics Metadata lists.
var internalNames = []string{"__consumer_offsets", "__transaction_state"}

// internalConfigs are the configs Kafka gives its internal topics.
var internalConfigs = map[string]string{"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}

// internalTopic is the internal topic called name: its id is derived from
// the cluster id, the same on every broker and across restarts.
func (b *Broker) internalTopic(name string) (*topics.Topic, bool) {
	if !slices.Contains(internalNames, name) {
		return nil, false
	}
	sum := sha256.Sum256([]byte(b.clusterID + "/" + name))
	t := &topics.Topic{Name: name, Partitions: internalPartitions, Configs: internalConfigs}
	copy(t.ID[:], sum[:16])
	return t, true
}

// internalTopicByID is the internal topic with id.
func (b *Broker) internalTopicByID(id [16]byte) (*topics.Topic, bool) {
	for _, n := range internalNames {
		if t, _ := b.internalTopic(n); t.ID == id {
			return t, true
		}
	}
	return nil, false
}

// ptrString is *s, or "" for nil.
func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// metadataInternal describes an internal topic: partition p is led by the
// (p mod n)th of the n brokers Metadata lists, in node id order.
func (b *Broker) metadataInternal(t *topics.Topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic, mt.TopicID, mt.IsInternal = &name, t.ID, true
	var nodes []int32
	for _, bi := range b.cfg.Cluster.Brokers() {
		nodes = append(nodes, bi.NodeID)
	}
	slices.Sort(nodes)
	for i := range t.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader, mp.LeaderEpoch = i, -1, 0
		mp.Replicas, mp.ISR = []int32{}, []int32{}
		if len(nodes) == 0 {
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
		} else {
			mp.Leader = nodes[int(i)%len(nodes)]
			mp.Replicas, mp.ISR = []int32{mp.Leader}, []int32{mp.Leader}
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}
