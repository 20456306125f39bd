package powercut

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The workload's topics and groups.
const (
	plainTopic = "plain" // the idempotent producer's
	txnTopic   = "txn"   // the transactional producer's
	partitions = 3
	txnID      = "powercut-tx"
)

var groups = []string{"pc-g0", "pc-g1", "pc-g2", "pc-g3"}

// rec is one record a producer was told is written.
type rec struct {
	Partition int32
	Offset    int64
	Value     string
}

// txnOutcome is what the transactional producer was told about one
// transaction.
type txnOutcome uint8

const (
	// txnOpen: never ended (the cut came first), or its end was not
	// acknowledged and no commit was asked: it must end aborted.
	txnOpen      txnOutcome = iota
	txnAborted              // the abort was acknowledged
	txnCommitted            // the commit was acknowledged
	txnInDoubt              // the commit was sent and not answered: all of it or none
)

func (o txnOutcome) String() string {
	switch o {
	case txnOpen:
		return "open"
	case txnAborted:
		return "aborted"
	case txnCommitted:
		return "committed"
	case txnInDoubt:
		return "in-doubt"
	}
	return fmt.Sprintf("txnOutcome(%d)", uint8(o))
}

// txnRec is one transaction and what was acknowledged of it.
type txnRec struct {
	ID      string
	Values  []string // every record produced in it
	Acked   []rec    // the records whose produce was acknowledged
	Outcome txnOutcome
}

type commitKey struct {
	Group     string
	Partition int32
}

// commitRec is what one group's partition was told: the highest offset
// whose commit was acknowledged (-1: none) and the highest ever sent.
type commitRec struct{ Acked, Sent int64 }

// ledger is everything the clients were told, across every round. Safe
// for concurrent use.
type ledger struct {
	mu           sync.Mutex // guards the fields below
	plain        []rec
	plainFailed  int
	txns         []*txnRec
	commits      map[commitKey]*commitRec
	commitAcks   int
	commitFailed int
	nextCommit   int64
}

func newLedger() *ledger { return &ledger{commits: map[commitKey]*commitRec{}} }

func (l *ledger) ackPlain(r rec) {
	l.mu.Lock()
	l.plain = append(l.plain, r)
	l.mu.Unlock()
}

func (l *ledger) failPlain() {
	l.mu.Lock()
	l.plainFailed++
	l.mu.Unlock()
}

func (l *ledger) newTxn(id string) *txnRec {
	t := &txnRec{ID: id}
	l.mu.Lock()
	l.txns = append(l.txns, t)
	l.mu.Unlock()
	return t
}

func (l *ledger) txnProduced(t *txnRec, v string) {
	l.mu.Lock()
	t.Values = append(t.Values, v)
	l.mu.Unlock()
}

func (l *ledger) txnAcked(t *txnRec, r rec) {
	l.mu.Lock()
	t.Acked = append(t.Acked, r)
	l.mu.Unlock()
}

func (l *ledger) txnEnded(t *txnRec, o txnOutcome) {
	l.mu.Lock()
	t.Outcome = o
	l.mu.Unlock()
}

// commitValue is the next offset to commit: it rises across every round,
// so a committed offset below an acknowledged one is a rollback.
func (l *ledger) commitValue() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nextCommit++
	return l.nextCommit
}

func (l *ledger) commitSent(k commitKey, v int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.commits[k]
	if c == nil {
		c = &commitRec{Acked: -1}
		l.commits[k] = c
	}
	c.Sent = max(c.Sent, v)
}

func (l *ledger) commitDone(k commitKey, v int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.commitFailed++
		return
	}
	l.commitAcks++
	c := l.commits[k]
	c.Acked = max(c.Acked, v)
}

// counts is a summary of the ledger for logs and the results table.
type counts struct {
	Records, RecordsFailed          int
	Commits, CommitsFailed          int
	Committed, Aborted, Open, Doubt int // transactions by outcome
}

func (l *ledger) counts() counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := counts{Records: len(l.plain), RecordsFailed: l.plainFailed, Commits: l.commitAcks, CommitsFailed: l.commitFailed}
	for _, t := range l.txns {
		switch t.Outcome {
		case txnCommitted:
			c.Committed++
		case txnAborted:
			c.Aborted++
		case txnOpen:
			c.Open++
		case txnInDoubt:
			c.Doubt++
		}
	}
	return c
}

// load is one round of the workload: three clients running until stop.
type load struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clients []*kgo.Client
	mu      sync.Mutex // guards clients
}

// startLoad starts the idempotent producer, the transactional producer and
// the committer against seeds. Every loop ends when stop is called.
func startLoad(seeds []string, round int, l *ledger, rng *rand.Rand) (*load, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &load{cancel: cancel}
	base := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.RetryTimeout(20 * time.Second),
		kgo.RecordDeliveryTimeout(20 * time.Second),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}
	plain, err := ld.client(append(base, kgo.DefaultProduceTopic(plainTopic), kgo.MaxBufferedRecords(2000))...)
	if err != nil {
		ld.stop()
		return nil, err
	}
	txnOpts := append(base, kgo.DefaultProduceTopic(txnTopic), kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(10*time.Second))
	newTxnClient := func() (*kgo.Client, error) { return ld.client(txnOpts...) }
	adm, err := ld.client(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(20*time.Second))
	if err != nil {
		ld.stop()
		return nil, err
	}
	loose, err := ld.client(append(base, kgo.DefaultProduceTopic(plainTopic), kgo.MaxBufferedRecords(2000),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())...)
	if err != nil {
		ld.stop()
		return nil, err
	}
	seed1, seed2 := rng.Uint64(), rng.Uint64()
	ld.wg.Add(4)
	go func() { defer ld.wg.Done(); producePlain(ctx, plain, round, l) }()
	go func() { defer ld.wg.Done(); produceLoose(ctx, loose, round) }()
	go func() {
		defer ld.wg.Done()
		produceTxns(ctx, newTxnClient, round, l, rand.New(rand.NewPCG(seed1, seed2)))
	}()
	go func() { defer ld.wg.Done(); commitOffsets(ctx, kadm.NewClient(adm), l) }()
	return ld, nil
}

func (ld *load) client(opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("powercut: client: %w", err)
	}
	ld.mu.Lock()
	ld.clients = append(ld.clients, cl)
	ld.mu.Unlock()
	return cl, nil
}

// stop ends every loop and closes the clients: records still buffered fail
// (they were never acknowledged). Call it after the brokers are dead, so
// that no acknowledgement can race the cut.
func (ld *load) stop() {
	ld.cancel()
	ld.mu.Lock()
	clients := ld.clients
	ld.mu.Unlock()
	for _, cl := range clients {
		cl.Close()
	}
	ld.wg.Wait()
}

// producePlain produces to every partition in turn, about 250 records a
// second, acks=all, idempotent (franz-go's default).
func producePlain(ctx context.Context, cl *kgo.Client, round int, l *ledger) {
	paced(ctx, 4*time.Millisecond, func(n int) {
		if cl.BufferedProduceRecords() > 1000 {
			return
		}
		r := &kgo.Record{Partition: int32(n % partitions), Value: fmt.Appendf(nil, "r%d-p%d%s", round, n, padding)}
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				l.failPlain()
				return
			}
			l.ackPlain(rec{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
		})
	})
}

// paced calls fn(0), fn(1), ... once per tick of every until ctx ends.
func paced(ctx context.Context, every time.Duration, fn func(n int)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fn(n)
	}
}

// padding makes records big enough for segments to roll during a run.
var padding = strings.Repeat(".", 200)

// produceLoose produces acks=1 (not idempotent) to plainTopic, about 100
// records a second. Kafka promises nothing durable for acks=1 and the
// suite checks nothing of these records: they leave unsynced tails in the
// segments at the moment of a cut, for recovery to deal with.
func produceLoose(ctx context.Context, cl *kgo.Client, round int) {
	paced(ctx, 10*time.Millisecond, func(n int) {
		if cl.BufferedProduceRecords() > 1000 {
			return
		}
		v := fmt.Appendf(nil, "r%d-l%d%s", round, n, padding)
		cl.Produce(ctx, &kgo.Record{Partition: int32(n % partitions), Value: v}, nil)
	})
}

// produceTxns runs transactions of 1-5 records over the partitions, four
// in five committed and the rest aborted, until ctx ends. When a
// transaction's end is not acknowledged the client's state is unknown: it
// is replaced by a new one with the same transactional id, whose first
// transaction fences the old producer (and ends what it left open).
func produceTxns(ctx context.Context, newClient func() (*kgo.Client, error), round int, l *ledger, rng *rand.Rand) {
	var cl *kgo.Client
	for n := 0; ctx.Err() == nil; n++ {
		if cl == nil {
			var err error
			if cl, err = newClient(); err != nil {
				return
			}
		}
		if !runTxn(ctx, cl, l.newTxn(fmt.Sprintf("r%d-t%d", round, n)), l, rng) {
			cl.Close()
			cl = nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// runTxn runs one transaction and records its outcome; false means the
// client's state is unknown.
func runTxn(ctx context.Context, cl *kgo.Client, t *txnRec, l *ledger, rng *rand.Rand) bool {
	if err := cl.BeginTransaction(); err != nil {
		return false
	}
	var failed atomic.Bool
	for i := range 1 + rng.IntN(5) {
		v := fmt.Sprintf("%s-%d", t.ID, i)
		l.txnProduced(t, v)
		cl.Produce(ctx, &kgo.Record{Partition: rng.Int32N(partitions), Value: []byte(v)}, func(r *kgo.Record, err error) {
			if err != nil {
				failed.Store(true)
				return
			}
			l.txnAcked(t, rec{Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
		})
	}
	ferr := cl.Flush(ctx)
	if ferr == nil && !failed.Load() && rng.IntN(5) > 0 {
		err := cl.EndTransaction(ctx, kgo.TryCommit)
		switch {
		case err == nil:
			l.txnEnded(t, txnCommitted)
			return true
		case !errors.Is(err, kerr.OperationNotAttempted):
			l.txnEnded(t, txnInDoubt)
			return false
		}
	}
	if ferr != nil || failed.Load() {
		if err := cl.AbortBufferedRecords(ctx); err != nil {
			return false
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return false // stays open: it must end aborted
	}
	l.txnEnded(t, txnAborted)
	return true
}

// commitOffsets commits rising offsets for every partition of plainTopic
// in every group, one group at a time, about every 20ms.
func commitOffsets(ctx context.Context, adm *kadm.Client, l *ledger) {
	paced(ctx, 20*time.Millisecond, func(n int) {
		commitOnce(ctx, adm, l, groups[n%len(groups)])
	})
}

func commitOnce(ctx context.Context, adm *kadm.Client, l *ledger, g string) {
	v := l.commitValue()
	var offs kadm.Offsets
	for p := range int32(partitions) {
		offs.AddOffset(plainTopic, p, v, -1)
		l.commitSent(commitKey{g, p}, v)
	}
	resp, err := adm.CommitOffsets(ctx, g, offs)
	for p := range int32(partitions) {
		perr := err
		if perr == nil {
			r, ok := resp.Lookup(plainTopic, p)
			switch {
			case !ok:
				perr = errors.New("no answer for the partition")
			default:
				perr = r.Err
			}
		}
		l.commitDone(commitKey{g, p}, v, perr)
	}
}
