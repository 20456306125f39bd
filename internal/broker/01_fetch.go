package broker

// Fetch, without fetch sessions (KIP-227 lets a broker decline
// them: every response carries session id 0, so clients send full fetches).
// A long poll waits until min bytes are available, max wait passes, or an
// error is ready. Topic ids at v13+.

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/storage"
	"github.com/kaas-dev/kaas/internal/topics"
	"github.com/kaas-dev/kaas/internal/wire"
)

// notifier wakes every waiter when any led partition's high watermark moves.
type notifier struct {
	mu sync.Mutex // guards ch
	ch chan struct{}
}

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) broadcast() {
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.mu.Unlock()
}

func init() { register(kmsg.Fetch, 4, 16, (*Broker).handleFetch) }

func (b *Broker) handleFetch(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.FetchRequest)
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	if r.Version >= 7 {
		switch {
		case r.SessionID != 0:
			resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
			return now(resp)
		case r.SessionEpoch != 0 && r.SessionEpoch != -1:
			resp.ErrorCode = kerr.InvalidFetchSessionEpoch.Code
			return now(resp)
		}
	}
	return func() kmsg.Response {
		b.catchUp(ctx, b.fetchEpochs(r))
		resp := b.longPoll(ctx, r)
		b.redirectMoved(ctx, r, resp) // moved_fetch.go
		b.hintFetch(r, resp)
		return resp
	}
}

// fetchEpochs lists the partitions whose current leader epoch the client
// knows newer than this broker does (catchUp).
func (b *Broker) fetchEpochs(r *kmsg.FetchRequest) map[string]map[int32]int32 {
	var want map[string]map[int32]int32
	for _, rt := range r.Topics {
		name, ok := b.fetchTopicName(r.Version, rt.Topic, rt.TopicID)
		if !ok {
			continue
		}
		for _, rp := range rt.Partitions {
			want = b.ifBehind(want, name, rp.Partition, rp.CurrentLeaderEpoch)
		}
	}
	return want
}

// fetchTopicName is the name of a Fetch topic: by id from v13, by name
// before; ok is false for an id this broker does not know.
func (b *Broker) fetchTopicName(version int16, name string, id [16]byte) (string, bool) {
	if version < 13 {
		return name, true
	}
	t, ok := b.topics.ByID(id)
	if !ok {
		return "", false
	}
	return t.Name, true
}

// longPoll answers a fetch once min bytes are there, an error is, max wait
// passed or the request is abandoned.
func (b *Broker) longPoll(ctx context.Context, r *kmsg.FetchRequest) *kmsg.FetchResponse {
	wait := time.Duration(r.MaxWaitMillis) * time.Millisecond
	deadline := time.Now().Add(wait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		woken := b.hw.wait() // taken before reading, so no advance is missed
		resp, size, errs := b.fetchOnce(r)
		if size >= int(r.MinBytes) || errs || r.MaxWaitMillis <= 0 || !time.Now().Before(deadline) {
			return resp
		}
		select {
		case <-woken:
		case <-timer.C:
			resp, _, _ = b.fetchOnce(r)
			return resp
		case <-ctx.Done():
			return resp
		case <-b.closing:
			return resp
		}
	}
}

// fetchOnce builds a response from what the logs hold now. It reports the
// bytes returned and whether any partition carries an error.
func (b *Broker) fetchOnce(r *kmsg.FetchRequest) (*kmsg.FetchResponse, int, bool) {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	total := 0
	maxBytes := int(r.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	anyErr := false
	for _, rt := range r.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		var t *topics.Topic
		var ok bool
		topicErr := kerr.UnknownTopicOrPartition
		if r.Version >= 13 {
			t, ok = b.topics.ByID(rt.TopicID)
			topicErr = kerr.UnknownTopicID
		} else {
			t, ok = b.topics.Get(rt.Topic)
		}
		internal := false
		if !ok {
			if r.Version >= 13 {
				t, internal = b.internalTopicByID(rt.TopicID)
			} else {
				t, internal = b.internalTopic(rt.Topic)
			}
		}
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.RecordBatches = []byte{} // Kafka sends empty, not null, records
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			sp.PreferredReadReplica = -1
			fail := func(e *kerr.Error) {
				sp.ErrorCode = e.Code
				anyErr = true
				st.Partitions = append(st.Partitions, sp)
			}
			if internal { // no records, ever (internal_topics.go)
				switch {
				case rp.Partition < 0 || rp.Partition >= t.Partitions:
					fail(kerr.UnknownTopicOrPartition)
				case rp.FetchOffset != 0:
					sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = 0, 0, 0
					fail(kerr.OffsetOutOfRange)
				default:
					sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = 0, 0, 0
					if r.IsolationLevel == 1 {
						sp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
					}
					st.Partitions = append(st.Partitions, sp)
				}
				continue
			}
			if !ok {
				fail(topicErr)
				continue
			}
			p, err := b.partitionFor(t.Name, rp.Partition)
			if err != nil {
				if storageError(err) == kerr.KafkaStorageError {
					b.log.Error("fetch: opening partition failed", "topic", t.Name, "partition", rp.Partition, "err", err)
				}
				fail(storageError(err))
				continue
			}
			if e := checkLeaderEpoch(rp.CurrentLeaderEpoch, p.epoch); e != nil && !(e == kerr.FencedLeaderEpoch && servesOlderEpoch(r)) {
				fail(e)
				continue
			}
			hw := p.log.HighWatermark()
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = hw, p.log.LastStableOffset(), p.log.LogStartOffset()
			limit := int(rp.PartitionMaxBytes)
			if rem := maxBytes - total; rem < limit {
				limit = rem
			}
			if limit <= 0 && total > 0 {
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			read := p.log.Read
			if r.IsolationLevel == 1 {
				read = p.log.ReadCommitted
			}
			data, err := read(rp.FetchOffset, max(limit, 0), total == 0)
			if err != nil {
				if errors.Is(err, storage.ErrOffsetOutOfRange) {
					fail(kerr.OffsetOutOfRange)
					continue
				}
				if storageError(err) == kerr.KafkaStorageError {
					b.log.Error("fetch: read failed", "topic", t.Name, "partition", rp.Partition, "err", err)
				}
				fail(storageError(err))
				continue
			}
			if data != nil {
				sp.RecordBatches = data
			}
			if r.IsolationLevel == 1 {
				sp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
				if len(data) > 0 {
					for _, a := range p.log.AbortedTxns(rp.FetchOffset, lastOffsetIn(data)+1) {
						sp.AbortedTransactions = append(sp.AbortedTransactions,
							kmsg.FetchResponseTopicPartitionAbortedTransaction{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
					}
				}
			}
			total += len(data)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, total, anyErr
}

// lastOffsetIn is the last offset of the last whole batch in data.
func lastOffsetIn(data []byte) int64 {
	last := int64(-1)
	for len(data) >= 61 {
		base := int64(binary.BigEndian.Uint64(data))
		size := 12 + int(int32(binary.BigEndian.Uint32(data[8:])))
		if size < 61 || size > len(data) {
			break
		}
		last = base + int64(int32(binary.BigEndian.Uint32(data[23:])))
		data = data[size:]
	}
	return last
}

// checkLeaderEpoch applies KIP-320: a client epoch older than the leader's
// is fenced, a newer one is unknown to this leader; -1 skips the check.
func checkLeaderEpoch(client, leader int32) *kerr.Error {
	switch {
	case client < 0:
		return nil
	case client < leader:
		return kerr.FencedLeaderEpoch
	case client > leader:
		return kerr.UnknownLeaderEpoch
	}
	return nil
}
