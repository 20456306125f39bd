package powercut

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/testutil"
)

// verdict is what one verification found.
type verdict struct {
	Records  int      // acknowledged records found at their offsets
	Commits  int      // acknowledged (group, partition) commits found
	Txns     int      // transactions checked (committed, aborted, open, in doubt)
	Problems []string // every loss or violation, described
}

func (v *verdict) problem(format string, args ...any) {
	if len(v.Problems) < 40 {
		v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
	}
}

// verify checks the restarted cluster against everything the clients were
// told: it first runs a fence transaction (which also ends, by fencing the
// producer, any transaction the cut left open), then reads both topics back
// and fetches every group's offsets.
func verify(ctx context.Context, seeds []string, round int, l *ledger) verdict {
	var v verdict
	fence, err := fenceTxn(ctx, seeds, round, l)
	if err != nil {
		v.problem("fence transaction: %v", err)
		return v
	}
	verifyPlain(ctx, seeds, l, &v)
	verifyTxns(ctx, seeds, l, fence, &v)
	verifyCommits(ctx, seeds, l, &v)
	return v
}

// fenceTxn commits one transaction with a record in every partition of
// txnTopic, through a new producer with the same transactional id; it
// returns those records' offsets, past which a read_committed reader has
// seen every transaction before them.
func fenceTxn(ctx context.Context, seeds []string, round int, l *ledger) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic(txnTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionTimeout(10*time.Second), kgo.RetryTimeout(30*time.Second),
		kgo.RecordDeliveryTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	t := l.newTxn(fmt.Sprintf("r%d-fence", round))
	if err := cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	out := map[int32]int64{}
	for p := range int32(partitions) {
		v := fmt.Sprintf("%s-%d", t.ID, p)
		l.txnProduced(t, v)
		r, err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte(v)}).First()
		if err != nil {
			return nil, fmt.Errorf("produce to %s/%d: %w", txnTopic, p, err)
		}
		l.txnAcked(t, rec{Partition: p, Offset: r.Offset, Value: v})
		out[p] = r.Offset
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		l.txnEnded(t, txnInDoubt)
		return nil, fmt.Errorf("commit: %w", err)
	}
	l.txnEnded(t, txnCommitted)
	return out, nil
}

// readUntil reads topic from the start until every partition p has shown
// a record at or past until[p], and returns value by partition and offset,
// and the values seen more than once.
func readUntil(ctx context.Context, seeds []string, topic string, committed bool, until map[int32]int64) (map[int32]map[int64]string, []string, error) {
	offs := map[int32]kgo.Offset{}
	for p := range until {
		offs[p] = kgo.NewOffset().AtStart()
	}
	got := map[int32]map[int64]string{}
	if len(offs) == 0 {
		return got, nil, nil
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		kgo.FetchMaxWait(300 * time.Millisecond), kgo.RetryTimeout(30 * time.Second)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	seen := map[string]bool{}
	var dups []string
	last := map[int32]int64{}
	reached := func() bool {
		for p, u := range until {
			if l, ok := last[p]; !ok || l < u {
				return false
			}
		}
		return true
	}
	for !reached() {
		if ctx.Err() != nil {
			return got, dups, fmt.Errorf("read %s: stopped at %v, want %v: %w", topic, last, until, ctx.Err())
		}
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			if got[r.Partition] == nil {
				got[r.Partition] = map[int64]string{}
			}
			got[r.Partition][r.Offset] = string(r.Value)
			last[r.Partition] = max(last[r.Partition], r.Offset)
			if v := string(r.Value); seen[v] {
				dups = append(dups, v)
			} else {
				seen[v] = true
			}
		})
	}
	return got, dups, nil
}

// verifyPlain: every acknowledged record of the idempotent producer is at
// its offset with its value, and no value is there twice.
func verifyPlain(ctx context.Context, seeds []string, l *ledger, v *verdict) {
	l.mu.Lock()
	acked := append([]rec(nil), l.plain...)
	l.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// Read up to the highest acknowledged offset, or to the end of the log
	// when it is shorter (then the missing records are reported below).
	ends, err := listEnds(rctx, seeds, plainTopic)
	if err != nil {
		v.problem("%v", err)
		return
	}
	until := map[int32]int64{}
	for _, r := range acked {
		if end := ends[r.Partition]; end > 0 {
			until[r.Partition] = min(max(until[r.Partition], r.Offset), end-1)
		}
	}
	got, dups, err := readUntil(rctx, seeds, plainTopic, false, until)
	if err != nil {
		v.problem("%v", err)
	}
	for _, d := range dups {
		if idempotent(d) {
			v.problem("%s: record %.20q appears twice (an idempotent producer's duplicate)", plainTopic, d)
		}
	}
	sort.Slice(acked, func(i, j int) bool {
		return acked[i].Partition < acked[j].Partition || acked[i].Partition == acked[j].Partition && acked[i].Offset < acked[j].Offset
	})
	for _, r := range acked {
		switch g, ok := got[r.Partition][r.Offset]; {
		case !ok:
			v.problem("%s/%d@%d: acknowledged record %.20q is missing", plainTopic, r.Partition, r.Offset, r.Value)
		case g != r.Value:
			v.problem("%s/%d@%d = %.20q, acknowledged as %.20q", plainTopic, r.Partition, r.Offset, g, r.Value)
		default:
			v.Records++
		}
	}
}

// idempotent reports whether value came from the idempotent producer
// ("r<round>-p<n>…"; the acks=1 producer's are "r<round>-l<n>…").
func idempotent(value string) bool {
	_, rest, ok := strings.Cut(value, "-")
	return ok && strings.HasPrefix(rest, "p")
}

// listEnds returns the high watermark of every partition of topic.
func listEnds(ctx context.Context, seeds []string, topic string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out map[int32]int64
	err = testutil.Poll(30*time.Second, func() error {
		listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
		if err == nil {
			err = listed.Error()
		}
		if err != nil {
			return fmt.Errorf("list end offsets of %s: %w", topic, err)
		}
		out = map[int32]int64{}
		listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		return nil
	})
	return out, err
}

// verifyTxns reads txnTopic read_committed: every committed transaction is
// there whole, at its offsets; nothing of an aborted or open one is; an
// in-doubt one is all there or not at all.
func verifyTxns(ctx context.Context, seeds []string, l *ledger, fence map[int32]int64, v *verdict) {
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	got, dups, err := readUntil(rctx, seeds, txnTopic, true, fence)
	if err != nil {
		v.problem("%v", err)
		return
	}
	for _, d := range dups {
		v.problem("%s: record %q appears twice", txnTopic, d)
	}
	visible := map[string]rec{}
	for p, m := range got {
		for off, val := range m {
			visible[val] = rec{Partition: p, Offset: off, Value: val}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	known := map[string]bool{}
	for _, t := range l.txns {
		v.Txns++
		n := 0
		for _, val := range t.Values {
			known[val] = true
			if _, ok := visible[val]; ok {
				n++
			}
		}
		switch t.Outcome {
		case txnCommitted:
			for _, r := range t.Acked {
				g, ok := got[r.Partition][r.Offset]
				if !ok || g != r.Value {
					v.problem("transaction %s (commit acknowledged): %s/%d@%d should be %q, read_committed shows %q (present %v)",
						t.ID, txnTopic, r.Partition, r.Offset, r.Value, g, ok)
				}
			}
			if n != len(t.Values) {
				v.problem("transaction %s (commit acknowledged): %d of its %d records visible", t.ID, n, len(t.Values))
			}
		case txnAborted, txnOpen:
			if n > 0 {
				v.problem("transaction %s (%s): %d of its %d records visible to read_committed", t.ID, t.Outcome, n, len(t.Values))
			}
		case txnInDoubt:
			if n != 0 && n != len(t.Values) {
				v.problem("transaction %s (commit in doubt): %d of its %d records visible (not atomic)", t.ID, n, len(t.Values))
			}
		}
	}
	for val, r := range visible {
		if !known[val] {
			v.problem("%s/%d@%d: record %q belongs to no transaction of this run", txnTopic, r.Partition, r.Offset, val)
		}
	}
}

// verifyCommits: every group's committed offset of every partition is at
// least the highest acknowledged commit and at most the highest sent.
func verifyCommits(ctx context.Context, seeds []string, l *ledger, v *verdict) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		v.problem("offsets client: %v", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	l.mu.Lock()
	want := map[commitKey]commitRec{}
	var gs []string
	for k, c := range l.commits {
		want[k] = *c
		if !slices.Contains(gs, k.Group) {
			gs = append(gs, k.Group)
		}
	}
	l.mu.Unlock()
	sort.Strings(gs)
	for _, g := range gs {
		var resp kadm.OffsetResponses
		// Retriable while the coordinator is still loading.
		err := testutil.Poll(30*time.Second, func() error {
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			var err error
			resp, err = adm.FetchOffsets(fctx, g)
			return err
		})
		if err != nil {
			v.problem("fetch offsets of %s: %v", g, err)
			continue
		}
		for p := range int32(partitions) {
			c, ok := want[commitKey{g, p}]
			if !ok || c.Acked < 0 {
				continue
			}
			r, ok := resp.Lookup(plainTopic, p)
			switch {
			case !ok || r.Err != nil:
				v.problem("group %s %s/%d: acknowledged commit %d, fetch finds none (%v)", g, plainTopic, p, c.Acked, r.Err)
			case r.At < c.Acked:
				v.problem("group %s %s/%d: committed offset %d, below the acknowledged %d", g, plainTopic, p, r.At, c.Acked)
			case r.At > c.Sent:
				v.problem("group %s %s/%d: committed offset %d, above anything sent (%d)", g, plainTopic, p, r.At, c.Sent)
			default:
				v.Commits++
			}
		}
	}
}
