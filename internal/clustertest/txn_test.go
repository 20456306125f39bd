package clustertest

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/group"
)

func txnCoordinatorOf(t *testing.T, cl *kgo.Client, id string) int32 {
	t.Helper()
	return findCoordinator(t, cl, id, 1)
}

// TestExactlyOnceAcrossBrokersWithTxnCoordinatorKilled runs franz-go's
// GroupTransactSession consume-transform-produce on 3 brokers, with the
// group and transaction coordinators on different brokers, and kills the
// transaction coordinator mid-stream.
func TestExactlyOnceAcrossBrokersWithTxnCoordinatorKilled(t *testing.T) {
	c := Start(t, Options{Brokers: 3, Group: func(g *group.Config) { g.InitialRebalanceDelay = 0 }})
	cl := client(t, c)
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	for _, topic := range []string{"eos-in", "eos-out"} {
		if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	const n = 300
	var in []*kgo.Record
	for i := range n {
		in = append(in, &kgo.Record{Topic: "eos-in", Value: []byte(fmt.Sprintf("r%04d", i))})
	}
	if err := cl.ProduceSync(ctx, in...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Pick ids whose coordinators differ, and not the controller for the
	// transaction one (kill it without losing the controller too).
	var groupID, txnID string
	ctrl := int32(c.Controller())
	for i := 0; groupID == ""; i++ {
		g, x := fmt.Sprintf("eos-g%d", i), fmt.Sprintf("eos-tx%d", i)
		gc, tc := coordinatorOf(t, cl, g), txnCoordinatorOf(t, cl, x)
		if gc != tc && tc != ctrl {
			groupID, txnID = g, x
		}
	}
	txnNode := int(txnCoordinatorOf(t, cl, txnID))
	t.Logf("group %s on %d, transactional id %s on %d", groupID, coordinatorOf(t, cl, groupID), txnID, txnNode)

	newSession := func() *kgo.GroupTransactSession {
		sess, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(c.AllAddrs()...),
			kgo.ConsumerGroup(groupID), kgo.ConsumeTopics("eos-in"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.TransactionalID(txnID), kgo.TransactionTimeout(10*time.Second),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RequireStableFetchOffsets(),
			kgo.RecordRetries(50), kgo.RetryTimeout(30*time.Second),
		)
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	sess := newSession()
	defer func() { sess.Close() }()
	restarts := 0
	var processed atomic.Int64
	killed := false
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := sess.PollRecords(pctx, 25)
		cancel()
		recs := fs.Records()
		if len(recs) == 0 && committedOut(t, c) >= n {
			break
		}
		if err := sess.Begin(); err != nil {
			// franz-go gives up on a producer whose AddPartitionsToTxn
			// could not be sent because the coordinator it had just
			// looked up left the broker list before the send (its
			// "unknown broker", not retried). What an application does
			// then: a new session with the same transactional id, which
			// fences the old producer and resumes from committed offsets.
			if restarts++; restarts > 3 {
				t.Fatalf("begin, after %d new sessions: %v", restarts-1, err)
			}
			t.Logf("begin: %v; a new session", err)
			sess.Close()
			sess = newSession()
			continue
		}
		var failed atomic.Bool
		for _, r := range recs {
			sess.Produce(ctx, &kgo.Record{Topic: "eos-out", Value: r.Value}, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Logf("produce failed: %v", err)
					failed.Store(true)
				}
			})
		}
		if !killed && processed.Load() >= 75 && len(recs) > 0 {
			killed = true
			t.Logf("killing transaction coordinator %d mid-transaction", txnNode)
			c.Kill(txnNode)
		}
		ectx, ecancel := context.WithTimeout(ctx, 45*time.Second)
		// A produce that failed must abort the transaction (franz-go leaves
		// that decision to the application): flush first, then decide.
		if err := sess.Client().Flush(ectx); err != nil {
			t.Logf("flush: %v", err)
		}
		committed, err := sess.End(ectx, kgo.TransactionEndTry(!failed.Load()))
		ecancel()
		if err != nil {
			t.Logf("end: committed=%v err=%v (the session retries from committed offsets)", committed, err)
		}
		if committed {
			processed.Add(int64(len(recs)))
		}
	}
	if !killed {
		t.Fatal("the transaction coordinator was never killed")
	}
	// Each input exactly once in the read_committed output.
	got := readCommittedValues(t, c, "eos-out", n)
	counts := map[string]int{}
	for _, v := range got {
		counts[v]++
	}
	var dup, missing []string
	for i := range n {
		v := fmt.Sprintf("r%04d", i)
		switch counts[v] {
		case 0:
			missing = append(missing, v)
		case 1:
		default:
			dup = append(dup, v)
		}
	}
	sort.Strings(dup)
	if len(dup) > 0 || len(missing) > 0 || len(got) != n {
		t.Fatalf("output has %d records: %d duplicated %v, %d missing %v", len(got), len(dup), first(dup), len(missing), first(missing))
	}
	// Committed offsets match what was consumed: the end of the input. A
	// fresh client: the first one may still have the killed broker cached.
	adm = kadm.NewClient(client(t, c))
	ends, err := adm.ListEndOffsets(ctx, "eos-in")
	if err != nil {
		t.Fatal(err)
	}
	offs, err := adm.FetchOffsets(ctx, groupID)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(e kadm.ListedOffset) {
		if o, _ := offs.Lookup("eos-in", e.Partition); o.At != e.Offset {
			t.Errorf("partition %d: committed %d, end %d", e.Partition, o.At, e.Offset)
		}
	})
}

func first(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}

func committedOut(t *testing.T, c *Cluster) int {
	return len(readCommittedValues(t, c, "eos-out", 0))
}

// readCommittedValues reads a topic with read_committed. With want > 0 it
// reads until want values arrived (for at most readCommittedWait: a fresh
// client may first meet a partition still moving off a killed broker), then
// two quiet seconds more for duplicates; with want 0, until two quiet
// seconds. Short of want, it logs each partition's ends.
func readCommittedValues(t *testing.T, c *Cluster, topic string, want int) []string {
	t.Helper()
	cl := client(t, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cl.Close()
	var out []string
	quiet := 0
	deadline := time.Now().Add(readCommittedWait)
	for quiet < 2 || (len(out) < want && time.Now().Before(deadline)) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		recs := cl.PollFetches(ctx).Records()
		cancel()
		if len(recs) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
	}
	if len(out) < want {
		logEnds(t, c, topic)
	}
	return out
}

// readCommittedWait bounds readCommittedValues' wait for what it expects.
const readCommittedWait = 30 * time.Second

// logEnds logs each partition's last stable and high-water offsets, as a
// fresh client sees them.
func logEnds(t *testing.T, c *Cluster, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(client(t, c))
	stable, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Logf("list committed ends of %s: %v", topic, err)
		return
	}
	high, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Logf("list ends of %s: %v", topic, err)
		return
	}
	stable.Each(func(o kadm.ListedOffset) {
		h, _ := high.Lookup(topic, o.Partition)
		t.Logf("%s[%d]: last stable %d (%v), high water %d (%v), leader epoch %d", topic, o.Partition, o.Offset, o.Err, h.Offset, h.Err, o.LeaderEpoch)
	})
}

// TestTxnCoordinatorKilledAfterWritesCommitsOrAbortsWhole kills the
// transaction coordinator after the transaction's records are acknowledged
// on several partitions: the commit then completes on the new coordinator
// (every partition gets its marker), and an abandoned transaction is aborted
// whole by the next session.
func TestTxnCoordinatorKilledAfterWritesCommitsOrAbortsWhole(t *testing.T) {
	c := Start(t, Options{Brokers: 3})
	cl := client(t, c)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 6, 1, nil, "whole"); err != nil {
		t.Fatal(err)
	}
	ctrl := int32(c.Controller())
	pick := func(prefix string) (string, int) {
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s-%d", prefix, i)
			if n := txnCoordinatorOf(t, cl, id); n != ctrl {
				return id, int(n)
			}
		}
	}
	produceIn := func(p *kgo.Client, tag string) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for part := int32(0); part < 6; part++ {
			r := &kgo.Record{Topic: "whole", Partition: part, Value: []byte(fmt.Sprintf("%s-%d", tag, part))}
			if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	opts := func(id string) []kgo.Opt {
		return []kgo.Opt{kgo.SeedBrokers(c.AllAddrs()...), kgo.TransactionalID(id), kgo.TransactionTimeout(20 * time.Second),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryTimeout(30 * time.Second)}
	}

	// Commit after the kill.
	id, node := pick("commit")
	p, err := kgo.NewClient(opts(id)...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produceIn(p, "committed")
	c.Kill(node)
	ectx, cancel := context.WithTimeout(ctx, 45*time.Second)
	if err := p.EndTransaction(ectx, kgo.TryCommit); err != nil {
		t.Fatalf("commit through the new coordinator: %v", err)
	}
	cancel()
	got := readCommittedValues(t, c, "whole", 6)
	if len(got) != 6 {
		t.Fatalf("after commit, read_committed sees %d of 6: %v", len(got), got)
	}
	c.Restart(node)

	// Abandoned: the producer vanishes with its coordinator; the next
	// session of the id aborts it whole.
	id2, node2 := pick("abandon")
	p2, err := kgo.NewClient(opts(id2)...)
	if err != nil {
		t.Fatal(err)
	}
	produceIn(p2, "abandoned")
	p2.Close()
	c.Kill(node2)
	p3, err := kgo.NewClient(opts(id2)...)
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	produceIn(p3, "next")
	if err := p3.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	got = readCommittedValues(t, c, "whole", 12)
	seen := map[string]int{}
	for _, v := range got {
		seen[v]++
	}
	for part := 0; part < 6; part++ {
		if seen[fmt.Sprintf("abandoned-%d", part)] != 0 {
			t.Fatalf("aborted record visible: %v", got)
		}
		if seen[fmt.Sprintf("next-%d", part)] != 1 || seen[fmt.Sprintf("committed-%d", part)] != 1 {
			t.Fatalf("read_committed after the abandoned transaction: %v", got)
		}
	}
}

// TestTrap7TxnOffsetsCommittedOnTheGroupCoordinator stages offsets on a
// group coordinator that is not the transaction's coordinator: the commit
// marker must make them visible there, exactly when the transaction commits.
func TestTrap7TxnOffsetsCommittedOnTheGroupCoordinator(t *testing.T) {
	c := Start(t, Options{Brokers: 3})
	cl := client(t, c)
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "t7"); err != nil {
		t.Fatal(err)
	}
	var groupID, txnID string
	for i := 0; groupID == ""; i++ {
		g, x := fmt.Sprintf("t7-g%d", i), fmt.Sprintf("t7-tx%d", i)
		if coordinatorOf(t, cl, g) != txnCoordinatorOf(t, cl, x) {
			groupID, txnID = g, x
		}
	}
	p, err := kgo.NewClient(kgo.SeedBrokers(c.AllAddrs()...), kgo.TransactionalID(txnID))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: "t7", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	id, epoch, err := p.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, id, epoch, groupID
	if resp, err := add.RequestWith(ctx, p); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("add offsets: %v %+v", err, resp)
	}
	tc := kmsg.NewPtrTxnOffsetCommitRequest()
	tc.TransactionalID, tc.Group, tc.ProducerID, tc.ProducerEpoch, tc.Generation = txnID, groupID, id, epoch, -1
	tt := kmsg.NewTxnOffsetCommitRequestTopic()
	tt.Topic = "t7"
	tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	tp.Offset = 77
	tt.Partitions = append(tt.Partitions, tp)
	tc.Topics = append(tc.Topics, tt)
	if resp, err := tc.RequestWith(ctx, p); err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("txn offset commit: %v %+v", err, resp)
	}
	fetch := func() int64 {
		offs, err := adm.FetchOffsets(ctx, groupID)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := offs.Lookup("t7", 0)
		if !ok {
			return -1
		}
		return o.At
	}
	if got := fetch(); got != -1 {
		t.Fatalf("staged offset visible before the commit: %d", got)
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if got := fetch(); got != 77 {
		t.Fatalf("after the commit the group coordinator shows %d, want 77", got)
	}
}
