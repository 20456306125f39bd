package proctest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Ledger records what a producer was told was written: every acknowledged
// record's partition, offset and value. Safe for concurrent use.
type Ledger struct {
	mu     sync.Mutex // guards acked, failed
	acked  map[int32]map[int64]string
	failed int
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{acked: map[int32]map[int64]string{}} }

// Ack records an acknowledged record. Two different values acknowledged at
// one offset is a lost write; Ack returns an error saying so.
func (l *Ledger) Ack(p int32, off int64, v string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.acked[p]
	if m == nil {
		m = map[int64]string{}
		l.acked[p] = m
	}
	if old, ok := m[off]; ok && old != v {
		return fmt.Errorf("partition %d offset %d acknowledged twice: %q and %q", p, off, old, v)
	}
	m[off] = v
	return nil
}

// Fail counts a record whose produce failed (not acknowledged).
func (l *Ledger) Fail() { l.mu.Lock(); l.failed++; l.mu.Unlock() }

// Count is the number of acknowledged records and of failed ones.
func (l *Ledger) Count() (acked, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.acked {
		acked += len(m)
	}
	return acked, l.failed
}

// Ends returns, per partition, one past the highest acknowledged offset.
func (l *Ledger) Ends() map[int32]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int32]int64{}
	for p, m := range l.acked {
		for off := range m {
			if off+1 > out[p] {
				out[p] = off + 1
			}
		}
	}
	return out
}

// Snapshot copies the acknowledged records.
func (l *Ledger) Snapshot() map[int32]map[int64]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int32]map[int64]string{}
	for p, m := range l.acked {
		c := make(map[int64]string, len(m))
		for k, v := range m {
			c[k] = v
		}
		out[p] = c
	}
	return out
}

// Producer produces to every partition of a topic in turn, acks=all, one
// record per interval, and records the outcome in its Ledger.
type Producer struct {
	Ledger *Ledger
	cl     *kgo.Client
	topic  string
	parts  int32
	cancel context.CancelFunc
	done   chan struct{}
	seq    atomic.Int64
	paused atomic.Bool
	errMu  sync.Mutex
	errs   []error
}

// StartProducer starts producing in the background; Stop ends it. The
// client is idempotent (franz-go's default) with acks=all.
func StartProducer(seeds []string, topic string, partitions int32, interval time.Duration, extra ...kgo.Opt) (*Producer, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(45 * time.Second),
		kgo.MaxBufferedRecords(5000),
		kgo.ProducerLinger(0),
		// Uncompressed: kafka-python and kafkajs have no snappy codec here
		// (franz-go's default), and a batch of several records would be
		// compressed after a failover.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RetryTimeout(45 * time.Second),
		// A frozen broker answers nothing: give up on a request to it soon
		// and retry elsewhere once metadata has moved on.
		kgo.ProduceRequestTimeout(3 * time.Second),
		kgo.RequestTimeoutOverhead(2 * time.Second),
		// The harness's producer must not be what a failover waits for:
		// franz-go refreshes metadata at most every 5 s by default, so
		// after a kill -9 it would learn the new leaders up to 5 s after
		// the cluster named them, and every consumer measured would wait
		// for the records it had not produced yet.
		kgo.MetadataMinAge(250 * time.Millisecond),
	}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{Ledger: NewLedger(), cl: cl, topic: topic, parts: partitions, cancel: cancel, done: make(chan struct{})}
	go p.loop(ctx, interval)
	return p, nil
}

func (p *Producer) loop(ctx context.Context, interval time.Duration) {
	defer close(p.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if p.paused.Load() || p.cl.BufferedProduceRecords() > 4000 {
			continue
		}
		p.produceOne(ctx)
	}
}

func (p *Producer) produceOne(ctx context.Context) {
	n := p.seq.Add(1) - 1
	part := int32(n % int64(p.parts))
	v := fmt.Sprintf("p%d-%d", part, n)
	p.cl.Produce(context.WithoutCancel(ctx), &kgo.Record{Partition: part, Value: []byte(v)}, func(r *kgo.Record, err error) {
		if err != nil {
			p.Ledger.Fail()
			return
		}
		if aerr := p.Ledger.Ack(r.Partition, r.Offset, string(r.Value)); aerr != nil {
			p.errMu.Lock()
			p.errs = append(p.errs, aerr)
			p.errMu.Unlock()
		}
	})
}

// Pause stops producing new records until Resume.
func (p *Producer) Pause() { p.paused.Store(true) }

// Resume undoes Pause.
func (p *Producer) Resume() { p.paused.Store(false) }

// Produced is how many records were handed to the client.
func (p *Producer) Produced() int64 { return p.seq.Load() }

// Stop ends the loop, waits up to timeout for every buffered record's
// outcome and closes the client. It returns the ledger's consistency errors
// and a flush that did not finish.
func (p *Producer) Stop(timeout time.Duration) error {
	p.cancel()
	<-p.done
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ferr := p.cl.Flush(ctx)
	p.cl.Close()
	p.errMu.Lock()
	defer p.errMu.Unlock()
	var out error
	if ferr != nil {
		out = fmt.Errorf("producer flush: %w", ferr)
	}
	if len(p.errs) > 0 {
		out = fmt.Errorf("%v; ledger: %v", out, p.errs)
	}
	return out
}

// WaitProgress waits until every partition has an acknowledged record at or
// past from[p] (from: a Ledger.Ends taken earlier).
func WaitProgress(l *Ledger, from map[int32]int64, parts int32, timeout time.Duration) error {
	return WaitFor(timeout, func() error {
		ends := l.Ends()
		var behind []int32
		for p := range parts {
			if ends[p] <= from[p] {
				behind = append(behind, p)
			}
		}
		if len(behind) > 0 {
			return fmt.Errorf("no acknowledged record since the mark on partitions %v", behind)
		}
		return nil
	})
}

// ReadBack reads every partition of topic from the start up to the ledger's
// ends and checks that every acknowledged record is there with its value.
func ReadBack(ctx context.Context, seeds []string, topic string, l *Ledger) error {
	want := l.Snapshot()
	ends := l.Ends()
	offs := map[int32]kgo.Offset{}
	for p := range ends {
		offs[p] = kgo.NewOffset().AtStart()
	}
	if len(offs) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	got := map[int32]map[int64]string{}
	reached := func() bool {
		for p, e := range ends {
			if int64(len(got[p])) < e && !hasAtLeast(got[p], e-1) {
				return false
			}
		}
		return true
	}
	for !reached() {
		if ctx.Err() != nil {
			break
		}
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			if got[r.Partition] == nil {
				got[r.Partition] = map[int64]string{}
			}
			got[r.Partition][r.Offset] = string(r.Value)
		})
	}
	var missing []string
	for p, m := range want {
		var offsets []int64
		for off := range m {
			offsets = append(offsets, off)
		}
		sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
		for _, off := range offsets {
			g, ok := got[p][off]
			switch {
			case !ok:
				missing = append(missing, fmt.Sprintf("p%d@%d missing (want %q)", p, off, m[off]))
			case g != m[off]:
				missing = append(missing, fmt.Sprintf("p%d@%d = %q, acknowledged as %q", p, off, g, m[off]))
			}
			if len(missing) > 20 {
				break
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("read back: %d problems (ctx %v): %v", len(missing), ctx.Err(), missing)
	}
	return nil
}

func hasAtLeast(m map[int64]string, off int64) bool {
	for o := range m {
		if o >= off {
			return true
		}
	}
	return false
}
