package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/testutil"
)

func txnClient(t *testing.T, b *Broker, id string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return client(t, b, append([]kgo.Opt{kgo.TransactionalID(id), kgo.TransactionTimeout(10 * time.Second)}, opts...)...)
}

func readCommitted(t *testing.T, b *Broker, topic string) []string {
	t.Helper()
	cl := client(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var out []string
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}

func TestTransactionsCommitAbortAndReadCommitted(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	createTopic(t, client(t, b), "tx", 2, nil)
	p := txnClient(t, b, "tx-1")
	ctx := context.Background()
	for i, commit := range []bool{true, false, true} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range 5 {
			if err := p.ProduceSync(ctx, &kgo.Record{Topic: "tx", Value: []byte(fmt.Sprintf("t%d-%d", i, j))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end %d: %v", i, err)
		}
	}
	got := readCommitted(t, b, "tx")
	if len(got) != 10 {
		t.Fatalf("read_committed saw %d records: %v", len(got), got)
	}
	for _, v := range got {
		if v[:2] == "t1" {
			t.Fatalf("aborted record visible: %s", v)
		}
	}
	// read_uncommitted sees all 15.
	if all := consume(t, b, "tx", 15); len(all) < 15 {
		t.Fatalf("read_uncommitted saw %d", len(all))
	}
}

func TestTransactionFencingByASecondProducer(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	createTopic(t, client(t, b), "fence", 1, nil)
	ctx := context.Background()
	p1 := txnClient(t, b, "shared")
	if err := p1.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p1.ProduceSync(ctx, &kgo.Record{Topic: "fence", Value: []byte("old")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A second session of the same id aborts p1's open transaction and
	// fences p1.
	p2 := txnClient(t, b, "shared")
	if err := p2.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p2.ProduceSync(ctx, &kgo.Record{Topic: "fence", Value: []byte("new")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := p2.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	err := p1.EndTransaction(ctx, kgo.TryCommit)
	if err == nil {
		t.Fatal("the fenced producer committed")
	}
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Logf("fenced producer's error: %v", err)
	}
	got := readCommitted(t, b, "fence")
	if fmt.Sprint(got) != "[new]" {
		t.Fatalf("read_committed: %v", got)
	}
}

func TestTransactionTimeoutAborts(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	createTopic(t, client(t, b), "slow", 1, nil)
	ctx := context.Background()
	p := txnClient(t, b, "slow-1", kgo.TransactionTimeout(1500*time.Millisecond))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: "slow", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The coordinator aborts it; the LSO moves past the aborted data.
	testutil.WaitFor(t, 10*time.Second, func() error {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{"slow-1"}
		resp, err := req.RequestWith(ctx, client(t, b))
		if err != nil {
			return err
		}
		if s := resp.TransactionStates[0].State; s != "CompleteAbort" {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	offs, err := kadm.NewClient(client(t, b)).ListEndOffsets(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	o, _ := offs.Lookup("slow", 0)
	if o.Offset != 2 { // record + abort marker
		t.Fatalf("end offset %d", o.Offset)
	}
	if got := readCommitted(t, b, "slow"); len(got) != 0 {
		t.Fatalf("timed-out transaction's record visible: %v", got)
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("a commit after the timeout abort succeeded")
	}
}

func TestTransactionThatOnlyCommitsOffsets(t *testing.T) {
	b := startGroupBroker(t, t.TempDir(), fastGroups(), nil)
	cl := client(t, b)
	createTopic(t, cl, "in", 1, nil)
	ctx := context.Background()
	p := txnClient(t, b, "offsets-only")
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	// Stage offsets through the raw API (AddOffsetsToTxn + TxnOffsetCommit),
	// as a consume-only transaction would.
	id, epoch, err := p.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = "offsets-only", id, epoch, "og"
	if resp, err := add.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("add offsets: %v %v", err, resp)
	}
	tc := kmsg.NewPtrTxnOffsetCommitRequest()
	tc.TransactionalID, tc.Group, tc.ProducerID, tc.ProducerEpoch, tc.Generation = "offsets-only", "og", id, epoch, -1
	tt := kmsg.NewTxnOffsetCommitRequestTopic()
	tt.Topic = "in"
	tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	tp.Offset = 42
	tt.Partitions = append(tt.Partitions, tp)
	tc.Topics = append(tc.Topics, tt)
	if resp, err := tc.RequestWith(ctx, cl); err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("txn offset commit: %v %+v", err, resp)
	}
	// Staged: invisible, and require_stable says UNSTABLE_OFFSET_COMMIT.
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.SetVersion(7)
	fetch.Group, fetch.RequireStable = "og", true
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "in", []int32{0}
	fetch.Topics = append(fetch.Topics, ft)
	fr := roundTrip(t, b, fetch).(*kmsg.OffsetFetchResponse)
	if c := fr.Topics[0].Partitions[0].ErrorCode; c != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("require_stable with staged offsets: %v", kerr.ErrorForCode(c))
	}
	fetch.RequireStable = false
	fr = roundTrip(t, b, fetch).(*kmsg.OffsetFetchResponse)
	if o := fr.Topics[0].Partitions[0].Offset; o != -1 {
		t.Fatalf("staged offset visible before commit: %d", o)
	}
	// franz-go sends no EndTxn for a transaction it produced nothing in, so
	// end it as a consume-only client would.
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "offsets-only", id, epoch, true
	if resp, err := end.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("end txn: %v %+v", err, resp)
	}
	fetch.RequireStable = true
	fr = roundTrip(t, b, fetch).(*kmsg.OffsetFetchResponse)
	if p := fr.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 42 {
		t.Fatalf("after commit: %+v", p)
	}
}

// TestDescribeTransactionsNamesTheGroupsOffsetsPartition: a transaction
// that added a group's offsets lists that group's __consumer_offsets
// partition among its topics, as Kafka does (its partition for the group:
// the group id's Java hash code over the offsets topic's partitions, 50
// here, as Metadata lists them); kaas listed none (the reference cluster,
// TestGroupAnswersMatchKafka's transaction-errors case). The expected
// partitions are Java's, computed by a JVM.
func TestDescribeTransactionsNamesTheGroupsOffsetsPartition(t *testing.T) {
	b := startGroupBroker(t, t.TempDir(), fastGroups(), nil)
	cl := client(t, b)
	ctx := context.Background()
	p := txnClient(t, b, "describe-offsets")
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	id, epoch, err := p.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{"my-group": 12, "grüße-✓-😀": 33, "og": 44}
	for g := range want {
		add := kmsg.NewPtrAddOffsetsToTxnRequest()
		add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = "describe-offsets", id, epoch, g
		if resp, err := add.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 {
			t.Fatalf("add offsets of %s: %v %v", g, err, resp)
		}
	}
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{"describe-offsets"}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	st := resp.TransactionStates[0]
	if len(st.Topics) != 1 || st.Topics[0].Topic != "__consumer_offsets" {
		t.Fatalf("topics %+v, want __consumer_offsets alone", st.Topics)
	}
	got := st.Topics[0].Partitions
	if len(got) != 3 || got[0] != 12 || got[1] != 33 || got[2] != 44 {
		t.Fatalf("__consumer_offsets partitions %v, want [12 33 44] (my-group, grüße-✓-😀, og)", got)
	}
}
