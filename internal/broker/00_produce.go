package broker

// Produce. acks=-1 answers after the fsync that covers the
// batch; acks=1 after the write; acks=0 sends no response. Both 0 and 1 ask
// the partition's flusher to sync soon, which advances the high watermark.

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/storage"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.Produce, 3, 11, (*Broker).handleProduce) }

func (b *Broker) handleProduce(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.ProduceRequest)
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	type synced struct {
		p    *partition
		out  *kmsg.ProduceResponseTopicPartition
		cuts uint64 // the log's Cuts before the append
	}
	var toSync []synced
	badAcks := r.Acks != 0 && r.Acks != 1 && r.Acks != -1
	for _, rt := range r.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for i, rp := range rt.Partitions {
			sp := &st.Partitions[i]
			*sp = kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = -1, -1, -1
			setErr := func(e *kerr.Error, msg string) {
				sp.ErrorCode = e.Code
				if msg != "" {
					sp.ErrorMessage = &msg
				}
			}
			switch {
			case badAcks:
				setErr(kerr.InvalidRequiredAcks, "")
				continue
			}
			if _, internal := b.internalTopic(rt.Topic); internal {
				setErr(kerr.InvalidTopicException, "Cannot append to internal topic "+rt.Topic)
				continue
			}
			if _, ok := b.topics.Get(rt.Topic); !ok && b.cfg.AutoCreateTopics {
				if _, err := b.autoCreate(rt.Topic); err != nil {
					c.log.Warn("auto-creating topic failed", "topic", rt.Topic, "err", err)
				}
			}
			p, err := b.partitionFor(rt.Topic, rp.Partition)
			if err != nil {
				if e := storageError(err); e == kerr.KafkaStorageError {
					b.log.Error("produce: opening partition failed", "topic", rt.Topic, "partition", rp.Partition, "err", err)
				}
				setErr(storageError(err), "")
				continue
			}
			t, _ := b.topics.Get(rt.Topic)
			cuts := p.log.Cuts()
			res, err := p.log.Append(rp.Records, storage.AppendOptions{
				LogAppendTime: t != nil && t.String("message.timestamp.type", "CreateTime") == "LogAppendTime",
			})
			if err != nil {
				e := storageError(err)
				if e == kerr.KafkaStorageError {
					b.log.Error("produce: append failed", "topic", rt.Topic, "partition", rp.Partition, "err", err)
				} else {
					c.log.Info("produce refused", "topic", rt.Topic, "partition", rp.Partition, "error", e.Message, "err", err)
				}
				setErr(e, clientMessage(e, err))
				continue
			}
			sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = res.BaseOffset, res.LogAppendTime, res.LogStartOffset
			if !res.Duplicate {
				b.cfg.Metrics.Produced(len(rp.Records), int(res.LastOffset-res.BaseOffset+1))
			}
			if r.Acks == -1 {
				toSync = append(toSync, synced{p, sp, cuts})
			} else {
				p.flushSoon()
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	if r.Acks == 0 {
		return func() kmsg.Response { return nil }
	}
	if len(toSync) == 0 {
		b.hintProduce(r, resp)
		return now(resp)
	}
	return func() kmsg.Response {
		// One Sync per partition, all partitions in parallel; each log
		// coalesces concurrent callers into one fsync.
		var wg sync.WaitGroup
		for _, s := range toSync {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				err := s.p.log.Sync()
				b.cfg.Metrics.Durable("log", time.Since(start))
				if err == nil && s.p.log.Cuts() != s.cuts {
					err = storage.ErrCut
				}
				if err != nil {
					e := storageError(err)
					if e == kerr.KafkaStorageError {
						b.log.Error("produce: sync failed", "topic", s.p.topic, "partition", s.p.index, "err", err)
					}
					s.out.ErrorCode = e.Code
					msg := clientMessage(e, err)
					s.out.ErrorMessage = &msg
					s.out.BaseOffset = -1
				}
			}()
		}
		wg.Wait()
		b.hintProduce(r, resp)
		return resp
	}
}
