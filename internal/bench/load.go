package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The load generator: the same code, client options and protocol versions
// drive every target (see ClientOpts).

// RecordSize is the value size of every benchmark record.
const RecordSize = 1024

// ProduceLinger is the producers' linger: small, so that latency and not
// batching dominates at low concurrency.
const ProduceLinger = time.Millisecond

// ProduceResult is what a produce run acknowledged.
type ProduceResult struct {
	Records int64 // records acknowledged
	Bytes   int64 // value bytes acknowledged
	Batches int64 // record batches acknowledged (one per partition per request)
	Elapsed time.Duration
}

func (r ProduceResult) RecordsPerSec() float64 { return perSec(float64(r.Records), r.Elapsed) }
func (r ProduceResult) MBPerSec() float64      { return perSec(float64(r.Bytes)/1e6, r.Elapsed) }
func (r ProduceResult) BatchesPerSec() float64 { return perSec(float64(r.Batches), r.Elapsed) }

func perSec(n float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return n / d.Seconds()
}

// batchCounter counts acknowledged batches through a kgo hook.
type batchCounter struct{ n *atomic.Int64 }

func (c batchCounter) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, _ kgo.ProduceBatchMetrics) {
	c.n.Add(1)
}

// ProduceSpec is one produce run.
type ProduceSpec struct {
	Topic      string
	Partitions int           // producer i writes partition i % Partitions
	Producers  int           // concurrent producers, one client (and producer id) each
	Duration   time.Duration // stop producing after this long
	MaxRecords int64         // stop after this many records in all (0: no count limit)
}

// Produce runs spec against t: idempotent producers, acks=all, 1 KiB records,
// linger ProduceLinger, no compression. Elapsed runs from the moment every
// producer is connected and has an id until the last one has flushed.
func Produce(ctx context.Context, t Target, spec ProduceSpec) (ProduceResult, error) {
	if spec.Producers <= 0 || spec.Partitions <= 0 {
		return ProduceResult{}, errors.New("bench: produce needs producers and partitions")
	}
	var batches, records, bytes atomic.Int64
	var errMu sync.Mutex // guards firstErr
	var firstErr error
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	clients := make([]*kgo.Client, spec.Producers)
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	value := make([]byte, RecordSize)
	for i := range value {
		value[i] = byte('A' + i%26)
	}
	// Connect every producer and get its producer id before the clock starts.
	for i := range clients {
		cl, err := kgo.NewClient(ClientOpts(t,
			kgo.DefaultProduceTopic(spec.Topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerLinger(ProduceLinger),
			kgo.MaxBufferedBytes(2<<20),
			kgo.WithHooks(batchCounter{&batches}),
		)...)
		if err != nil {
			return ProduceResult{}, fmt.Errorf("bench: produce client for %s: %w", t.Name, err)
		}
		clients[i] = cl
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = cl.ProduceSync(wctx, &kgo.Record{Value: value, Partition: int32(i % spec.Partitions)}).FirstErr()
		cancel()
		if err != nil {
			return ProduceResult{}, fmt.Errorf("bench: produce warm-up on %s: %w", t.Name, err)
		}
	}
	batches.Store(0)

	perProducer := int64(-1)
	if spec.MaxRecords > 0 {
		perProducer = max(1, spec.MaxRecords/int64(spec.Producers))
	}
	start := time.Now()
	deadline := start.Add(spec.Duration)
	pctx, cancel := context.WithDeadline(ctx, deadline.Add(30*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	for i, cl := range clients {
		part := int32(i % spec.Partitions)
		wg.Go(func() {
			done := func(r *kgo.Record, err error) {
				if err != nil {
					fail(fmt.Errorf("bench: produce to %s: %w", t.Name, err))
					return
				}
				records.Add(1)
				bytes.Add(int64(len(r.Value)))
			}
			for n := int64(0); n != perProducer && pctx.Err() == nil && time.Now().Before(deadline); n++ {
				cl.Produce(pctx, &kgo.Record{Value: value, Partition: part}, done)
			}
			if err := cl.Flush(pctx); err != nil {
				fail(fmt.Errorf("bench: flush to %s: %w", t.Name, err))
			}
		})
	}
	wg.Wait()
	res := ProduceResult{Records: records.Load(), Bytes: bytes.Load(), Batches: batches.Load(), Elapsed: time.Since(start)}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, firstErr
}

// ConsumeResult is what a consume run read.
type ConsumeResult struct {
	Records int64
	Bytes   int64
	Elapsed time.Duration
}

func (r ConsumeResult) RecordsPerSec() float64 { return perSec(float64(r.Records), r.Elapsed) }
func (r ConsumeResult) MBPerSec() float64      { return perSec(float64(r.Bytes)/1e6, r.Elapsed) }

// Consume reads topic from its start with one client (no group) until want
// records have arrived or d has passed.
func Consume(ctx context.Context, t Target, topic string, want int64, d time.Duration) (ConsumeResult, error) {
	cl, err := kgo.NewClient(ClientOpts(t,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return ConsumeResult{}, fmt.Errorf("bench: consume client for %s: %w", t.Name, err)
	}
	defer cl.Close()
	var res ConsumeResult
	start := time.Now()
	cctx, cancel := context.WithDeadline(ctx, start.Add(d))
	defer cancel()
	for res.Records < want && cctx.Err() == nil {
		fs := cl.PollFetches(cctx)
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return res, fmt.Errorf("bench: consume from %s: %w", t.Name, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			res.Records++
			res.Bytes += int64(len(r.Value))
		})
	}
	res.Elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// CreateTopic creates topic on t with the given partitions, replicated as
// t.Replication says.
func CreateTopic(ctx context.Context, t Target, topic string, partitions int32) error {
	cl, err := kgo.NewClient(ClientOpts(t)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	rf := t.Replication
	if rf == 0 {
		rf = 1
	}
	var resp kadm.CreateTopicResponse
	for {
		resp, err = kadm.NewClient(cl).CreateTopic(cctx, partitions, rf, nil, topic)
		if err == nil {
			err = resp.Err
		}
		// Kafka deletes a topic in the background: a name deleted by the
		// previous measurement can be taken for a moment longer.
		if !errors.Is(err, kerr.TopicAlreadyExists) || cctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err == nil {
		err = waitTopic(cctx, cl, topic, partitions)
	}
	if err != nil {
		return fmt.Errorf("bench: create topic %s on %s: %w", topic, t.Name, err)
	}
	return nil
}

// waitTopic waits until every broker of the cluster lists topic with its
// partitions led: a Kafka broker learns a new topic from the controller a
// moment after CreateTopics answers, and answers UNKNOWN_TOPIC_OR_PARTITION
// to a commit or produce for it until then.
func waitTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int32) error {
	for {
		err := topicOnEveryBroker(ctx, cl, topic, partitions)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not listed by every broker: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func topicOnEveryBroker(ctx context.Context, cl *kgo.Client, topic string, partitions int32) error {
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	for _, b := range md.Brokers {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
		if err != nil {
			return err
		}
		for _, t := range resp.Topics {
			if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
				return fmt.Errorf("broker %d: %w", b.NodeID, err)
			}
			if int32(len(t.Partitions)) != partitions {
				return fmt.Errorf("broker %d lists %d of %d partitions", b.NodeID, len(t.Partitions), partitions)
			}
			for _, p := range t.Partitions {
				if p.Leader < 0 {
					return fmt.Errorf("broker %d: partition %d has no leader", b.NodeID, p.Partition)
				}
			}
		}
	}
	return nil
}

// DeleteTopic deletes topic on t, freeing what it holds (memory on kfake
// and tmpfs). Errors are returned for logging; a run goes on without it.
func DeleteTopic(ctx context.Context, t Target, topic string) error {
	cl, err := kgo.NewClient(ClientOpts(t)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resps, err := kadm.NewClient(cl).DeleteTopics(cctx, topic)
	if err == nil {
		err = resps.Error()
	}
	return err
}

// maxLatencyOps bounds a latency loop besides its time window.
const maxLatencyOps = 200_000

// ProduceLatency produces one 1 KiB record at a time from one idempotent
// producer (acks=all, no linger) to partition 0 of topic, waiting for each
// acknowledgement, for d; it returns each record's round trip.
func ProduceLatency(ctx context.Context, t Target, topic string, d time.Duration) ([]time.Duration, error) {
	cl, err := kgo.NewClient(ClientOpts(t,
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)...)
	if err != nil {
		return nil, fmt.Errorf("bench: latency client for %s: %w", t.Name, err)
	}
	defer cl.Close()
	value := make([]byte, RecordSize)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = cl.ProduceSync(wctx, &kgo.Record{Value: value}).FirstErr() // connect, get a producer id
	cancel()
	if err != nil {
		return nil, fmt.Errorf("bench: latency warm-up on %s: %w", t.Name, err)
	}
	deadline := time.Now().Add(d)
	lat := make([]time.Duration, 0, 4096)
	for i := 0; i < maxLatencyOps && ctx.Err() == nil && time.Now().Before(deadline); i++ {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		t0 := time.Now()
		err := cl.ProduceSync(rctx, &kgo.Record{Value: value}).FirstErr()
		lat = append(lat, time.Since(t0))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("bench: produce to %s: %w", t.Name, err)
		}
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("bench: no produce completed on %s", t.Name)
	}
	return lat, ctx.Err()
}
