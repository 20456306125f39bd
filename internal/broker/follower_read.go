package broker

// Follower reads on a draining broker. When a SIGTERM moves a partition
// away, an Apache Kafka broker stays a follower of it until it exits, and a
// follower serves a consumer's Fetch from v11 on (KIP-392: the request
// carries client metadata, so it need not go to the leader). A consumer that
// does not track leader epochs (it sends current leader epoch -1) therefore
// sees no error on Kafka: it reads on until the broker closes its
// connection, then finds the new leader. kafkajs is one: it rejoins its
// group on every NOT_LEADER_OR_FOLLOWER a Fetch answers, so refusing it here
// cost its group one rebalance per drained broker that Kafka does not cause.
//
// A draining kaas broker therefore retires the logs it hands off instead of
// closing them (storage.Log.Retire: the snapshot the next leader opens from
// is written at once, and the files stay open for reads), and answers such a
// Fetch from the retired log, up to the high watermark it had at the
// hand-off: what a follower that has stopped replicating holds. A fetch
// offset outside that range, a client that sends a leader epoch (franz-go,
// the Java client, librdkafka: it is told the new leader, KIP-951, and moves
// at once), an older Fetch version, and any broker that is not draining get
// NOT_LEADER_OR_FOLLOWER as before. The retired logs are closed when the
// broker closes, when the partition is led here again, or when its topic is
// deleted.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/topics"
)

// Drainer is implemented by a Cluster that knows whether this broker is
// draining (node's view).
type Drainer interface{ Draining() bool }

// draining reports whether this broker is handing its partitions off.
func (b *Broker) draining() bool {
	d, ok := b.cfg.Cluster.(Drainer)
	return ok && d.Draining()
}

// retire stops the partition's flusher and retires its log (reads go on
// until release).
func (p *partition) retire() error {
	close(p.stop)
	<-p.done
	return p.log.Retire()
}

// release closes the files of a retired partition's log.
func (p *partition) release() error { return p.log.Close() }

// keepRetired records p, just retired, as the view of its partition, and
// releases the view it replaces.
func (b *Broker) keepRetired(p *partition) {
	key := tp{p.topic, p.index}
	b.partMu.Lock()
	old := b.retired[key]
	b.retired[key] = p
	b.partMu.Unlock()
	if old != nil {
		b.releaseRetired(old)
	}
}

// dropRetired releases the retired view of a partition, if there is one.
func (b *Broker) dropRetired(key tp) {
	b.partMu.Lock()
	p := b.retired[key]
	delete(b.retired, key)
	b.partMu.Unlock()
	if p != nil {
		b.releaseRetired(p)
	}
}

// releaseRetiredWhere releases the retired views that match.
func (b *Broker) releaseRetiredWhere(match func(tp) bool) {
	b.partMu.Lock()
	var out []*partition
	for key, p := range b.retired {
		if match(key) {
			delete(b.retired, key)
			out = append(out, p)
		}
	}
	b.partMu.Unlock()
	for _, p := range out {
		b.releaseRetired(p)
	}
}

func (b *Broker) releaseRetired(p *partition) {
	if err := p.release(); err != nil {
		b.log.Warn("closing a handed-off partition's log failed", "topic", p.topic, "partition", p.index, "err", err)
	}
}

// fromConsumer reports whether a Fetch comes from a consumer (replica id
// -1), not a replica.
func fromConsumer(r *kmsg.FetchRequest) bool {
	if r.Version >= 15 {
		return r.ReplicaState.ID < 0
	}
	return r.ReplicaID < 0
}

// followerRead is the retired log that answers a fetch of a partition this
// broker no longer leads, or nil when the fetch must be refused (see the
// file comment for when).
func (b *Broker) followerRead(r *kmsg.FetchRequest, t *topics.Topic, rp *kmsg.FetchRequestTopicPartition) *partition {
	if r.Version < 11 || rp.CurrentLeaderEpoch >= 0 || !fromConsumer(r) || !b.draining() {
		return nil
	}
	b.partMu.Lock()
	p := b.retired[tp{t.Name, rp.Partition}]
	b.partMu.Unlock()
	if p == nil || p.topicID != t.ID {
		return nil
	}
	if rp.FetchOffset < p.log.LogStartOffset() || rp.FetchOffset > p.log.HighWatermark() {
		return nil // the client is past what this broker held: the leader answers
	}
	return p
}
