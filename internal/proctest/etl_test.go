package proctest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// etlRecords is how many input records each ETL run processes: produced at
// a steady pace across the whole rolling restart.
const etlRecords = 1200

// TestETLThroughARollingRestart is issue 14's consumer-group ETL on three
// broker processes: three members, each consuming `etl-in`, producing every
// record to an output topic and committing, while each broker in turn is
// stopped with SIGTERM (a drain) and started again a few seconds apart.
// Every input record must appear exactly once in the output, no client may
// see an error, and the group must keep its members and generation (a
// coordinator change is invisible). Two variants: commit after each
// produced batch and on revoke (at least once, exactly once when nothing
// rebalances), and franz-go's GroupTransactSession (exactly once by
// transactions, read_committed).
func TestETLThroughARollingRestart(t *testing.T) {
	c := Start(t, Options{Brokers: 3, Args: []string{"--group-initial-rebalance-delay", "0s"}})
	for _, v := range []struct {
		name string
		txn  bool
	}{{"commit on revoke", false}, {"transactional", true}} {
		t.Run(v.name, func(t *testing.T) { runETL(t, c, v.txn) })
	}
}

// etlMember is one ETL process: a consumer-group member that copies its
// input to the output.
type etlMember struct {
	id   int
	cl   *kgo.Client               // the plain variant
	sess *kgo.GroupTransactSession // the transactional variant

	// watching is set once the group has settled and each member has
	// committed since: what a member sees while the three first form the
	// group (a revoke aborts the transaction in progress, which franz-go
	// reports at its next end) is logged, not counted.
	watching *atomic.Bool
	t        *testing.T

	// done counts the member's successful commits (transactions).
	done atomic.Int64

	mu   sync.Mutex // guards errs
	errs []string
}

func (m *etlMember) fail(format string, args ...any) {
	msg := fmt.Sprintf("member %d: ", m.id) + fmt.Sprintf(format, args...)
	if !m.watching.Load() {
		m.t.Logf("while the group forms (not counted): %s", msg)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.errs) < 20 {
		m.errs = append(m.errs, msg)
	}
}

func (m *etlMember) client() *kgo.Client {
	if m.sess != nil {
		return m.sess.Client()
	}
	return m.cl
}

func runETL(t *testing.T, c *Cluster, txn bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	suffix := "plain"
	if txn {
		suffix = "txn"
	}
	in, out, groupID := "etl-in-"+suffix, "etl-out-"+suffix, "etl-"+suffix
	adm := kadm.NewClient(c.Client())
	defer adm.Close()
	for _, topic := range []string{in, out} {
		if _, err := adm.CreateTopic(ctx, 6, 1, nil, topic); err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
	}

	members := make([]*etlMember, 3)
	var watching atomic.Bool
	var wg sync.WaitGroup
	mctx, stopMembers := context.WithCancel(ctx)
	defer func() {
		stopMembers()
		wg.Wait()
		for _, m := range members {
			if m.sess != nil {
				m.sess.Close()
			} else if m.cl != nil {
				m.cl.Close()
			}
		}
	}()
	for i := range members {
		m := &etlMember{id: i, watching: &watching, t: t}
		members[i] = m
		opts := []kgo.Opt{kgo.SeedBrokers(c.Addrs()...), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(in),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DefaultProduceTopic(out),
			kgo.RecordRetries(100), kgo.RetryTimeout(time.Minute)}
		if txn {
			sess, err := kgo.NewGroupTransactSession(append(opts,
				kgo.TransactionalID(fmt.Sprintf("%s-%d", groupID, i)), kgo.TransactionTimeout(20*time.Second),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RequireStableFetchOffsets())...)
			if err != nil {
				t.Fatal(err)
			}
			m.sess = sess
		} else {
			cl, err := kgo.NewClient(append(opts, kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
				kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, _ map[string][]int32) {
					if err := cl.CommitUncommittedOffsets(ctx); err != nil {
						m.fail("commit on revoke: %v", err)
					}
				}))...)
			if err != nil {
				t.Fatal(err)
			}
			m.cl = cl
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if txn {
				m.runTxn(mctx)
			} else {
				m.runPlain(mctx)
			}
		}()
	}

	// The input, produced at a steady pace through the restarts.
	producer := c.Client(kgo.DefaultProduceTopic(in), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordRetries(100), kgo.RetryTimeout(time.Minute))
	defer producer.Close()
	var produceErrs []error
	var pmu sync.Mutex
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < etlRecords && ctx.Err() == nil; i++ {
			producer.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%05d", i)},
				func(_ *kgo.Record, err error) {
					if err != nil {
						pmu.Lock()
						produceErrs = append(produceErrs, err)
						pmu.Unlock()
					}
				})
			time.Sleep(15 * time.Millisecond)
		}
		if err := producer.Flush(ctx); err != nil {
			pmu.Lock()
			produceErrs = append(produceErrs, err)
			pmu.Unlock()
		}
	}()

	// Settled: every member has its partitions and one generation.
	type meta struct {
		id  string
		gen int32
	}
	metas := func() []meta {
		var ms []meta
		for _, m := range members {
			id, gen := m.client().GroupMetadata()
			ms = append(ms, meta{id, gen})
		}
		return ms
	}
	var before []meta
	if err := WaitFor(60*time.Second, func() error {
		before = metas()
		for _, m := range before {
			if m.id == "" || m.gen != before[0].gen || m.gen <= 0 {
				return fmt.Errorf("group not settled: %+v", before)
			}
		}
		d, err := adm.DescribeGroups(ctx, groupID)
		if err != nil {
			return err
		}
		g := d[groupID]
		if g.State != "Stable" || len(g.Members) != 3 {
			return fmt.Errorf("group %s with %d members", g.State, len(g.Members))
		}
		for _, m := range g.Members {
			if a, ok := m.Assigned.AsConsumer(); !ok || len(a.Topics) == 0 {
				return fmt.Errorf("member %s has no partitions yet", m.MemberID)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var counts []int64
	for _, m := range members {
		counts = append(counts, m.done.Load())
	}
	if err := WaitFor(30*time.Second, func() error {
		for i, m := range members {
			if m.done.Load() == counts[i] {
				return fmt.Errorf("member %d has not committed since the group settled", i)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if now := metas(); !slices.Equal(now, before) {
		t.Fatalf("the group changed while settling: %+v, then %+v", before, now)
	}
	watching.Store(true)

	// The rolling restart: each broker drained, started again, and given a
	// few seconds of service before the next one.
	if err := c.RollingRestart(30*time.Second, 3*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	<-produced
	pmu.Lock()
	if len(produceErrs) > 0 {
		t.Errorf("the input producer saw %d errors, first %v", len(produceErrs), produceErrs[0])
	}
	pmu.Unlock()

	// Every input record exactly once in the output.
	var got map[string]int
	if err := WaitFor(90*time.Second, func() error {
		var err error
		got, err = readAll(ctx, c, out, txn)
		if err != nil {
			return err
		}
		if len(got) < etlRecords {
			return fmt.Errorf("%d of %d input records in the output", len(got), etlRecords)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	var dups, missing []string
	for i := range etlRecords {
		switch v := fmt.Sprintf("r%05d", i); got[v] {
		case 0:
			missing = append(missing, v)
		case 1:
		default:
			dups = append(dups, fmt.Sprintf("%s×%d", v, got[v]))
		}
	}
	if len(dups) > 0 || len(missing) > 0 {
		t.Errorf("output: %d records twice or more %v, %d missing %v", len(dups), dups[:min(len(dups), 5)], len(missing), missing[:min(len(missing), 5)])
	}
	after := metas()
	stopMembers()
	wg.Wait()
	for _, m := range members {
		for _, e := range m.errs {
			t.Errorf("client error: %s", e)
		}
	}
	if !slices.Equal(before, after) {
		t.Errorf("the group changed through the restarts (a rebalance): members and generations %+v before, %+v after", before, after)
	}
	t.Logf("%d records copied exactly once; members and generations %+v before and after", etlRecords, after)
}

// runPlain is the at-least-once ETL loop: consume, produce, wait for the
// produce acknowledgements, commit.
func (m *etlMember) runPlain(ctx context.Context) {
	defer m.cl.AllowRebalance()
	for ctx.Err() == nil {
		fs := m.cl.PollRecords(ctx, 100)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			m.fail("fetch %s/%d: %v", topic, p, err)
		})
		var recs []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			recs = append(recs, &kgo.Record{Key: r.Key, Value: r.Value})
		})
		if len(recs) > 0 {
			if err := m.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil && ctx.Err() == nil {
				m.fail("produce: %v", err)
			}
			if err := m.cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
				m.fail("commit: %v", err)
			} else if err == nil {
				m.done.Add(1)
			}
		}
		m.cl.AllowRebalance()
	}
}

// runTxn is the exactly-once loop: each poll's records produced and their
// offsets committed in one transaction.
func (m *etlMember) runTxn(ctx context.Context) {
	for ctx.Err() == nil {
		fs := m.sess.PollRecords(ctx, 100)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			m.fail("fetch %s/%d: %v", topic, p, err)
		})
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		if err := m.sess.Begin(); err != nil {
			m.fail("begin: %v", err)
			return
		}
		var failed error
		var fmu sync.Mutex
		for _, r := range recs {
			m.sess.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
				if err != nil {
					fmu.Lock()
					failed = errors.Join(failed, err)
					fmu.Unlock()
				}
			})
		}
		if err := m.sess.Client().Flush(ctx); err != nil && ctx.Err() == nil {
			m.fail("flush: %v", err)
		}
		fmu.Lock()
		perr := failed
		fmu.Unlock()
		if perr != nil && ctx.Err() == nil {
			m.fail("produce: %v", perr)
		}
		committed, err := m.sess.End(ctx, kgo.TransactionEndTry(perr == nil))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			m.fail("end transaction: %v", err)
		case !committed:
			m.fail("transaction aborted (the group changed under it)")
		default:
			m.done.Add(1)
		}
	}
}

// readAll counts each value in a topic, read from the start until the
// stream goes quiet (read_committed for the transactional run).
func readAll(ctx context.Context, c *Cluster, topic string, committed bool) (map[string]int, error) {
	opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl := c.Client(opts...)
	defer cl.Close()
	counts := map[string]int{}
	for quiet, polls := 0, 0; quiet < 2; polls++ {
		if polls > 120 {
			return nil, fmt.Errorf("reading %s: still not quiet after %d polls", topic, polls)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			counts[string(r.Value)]++
			n++
		})
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return counts, nil
}
