package proctest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/volume"
)

// TestCommittedOffsetsSurviveAChangeOfOwner is issue 11 black-box, on three
// broker processes with a retention check every second and the default
// 7-day retention:
//   - a group file in the spec's format (no commit timestamps) keeps its
//     offsets through retention passes;
//   - a transaction staged, the group coordinator killed -9 and restarted,
//     then committed: the offset is still there after retention passes;
//   - a coordinator frozen (SIGSTOP) beyond --dead-after is replaced, the
//     group commits through the new owner, and after SIGCONT every request
//     to the old broker for the group is refused or answered with the new
//     owner's values.
func TestCommittedOffsetsSurviveAChangeOfOwner(t *testing.T) {
	c := Start(t, Options{Brokers: 3, Args: []string{"--offsets-retention-check-interval", "1s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "owner-change"
	adm := kadm.NewClient(c.Client())
	defer adm.Close()
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	// Three retention check intervals pass between each setup and its check.
	passes := func() { time.Sleep(3500 * time.Millisecond) }

	fresh := kadm.NewClient(c.Client())
	defer fresh.Close()

	t.Run("spec-format group file keeps its offsets", func(t *testing.T) {
		dir := volume.OffsetsDir(c.DataDir)
		spec := fmt.Sprintf(`{"offsets":{"%s/0":1042,"%s/1":977},"fence":{"controller_epoch":0,"assignment_version":0}}`, topic, topic)
		if err := os.WriteFile(filepath.Join(dir, "spec-format.json"), []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		passes()
		if err := hasOffsets(ctx, fresh, "spec-format", topic, map[int32]int64{0: 1042, 1: 977}); err != nil {
			t.Fatalf("after retention passes: %v", err)
		}
	})
	t.Run("transaction committed after its group coordinator restarted", func(t *testing.T) {
		testTxnAfterRestart(t, ctx, c, adm, topic, passes)
	})
	t.Run("frozen coordinator replaced and resumed", func(t *testing.T) {
		testFrozenCoordinator(t, ctx, c, fresh, topic)
	})
}

// testTxnAfterRestart: a transaction staged with its group coordinator,
// which is then killed -9 and restarted before the transaction commits; the
// committed offset survives retention passes.
func testTxnAfterRestart(t *testing.T, ctx context.Context, c *Cluster, adm *kadm.Client, topic string, passes func()) {
	const txGroup = "txn-reload"
	gco, err := c.Coordinator(ctx, adm, txGroup)
	if err != nil {
		t.Fatal(err)
	}
	txID := txnIDNotOn(t, ctx, adm, gco)
	tx := c.Client(kgo.RequestRetries(20))
	defer tx.Close()
	pid, epoch := stageTxnOffsets(t, ctx, tx, txID, txGroup, topic, 555)
	if err := c.Broker(gco).Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Broker(gco).Start(); err != nil {
		t.Fatal(err)
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = txID, pid, epoch, true
	if err := WaitFor(30*time.Second, func() error {
		r, err := end.RequestWith(ctx, tx)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(r.ErrorCode)
	}); err != nil {
		t.Fatalf("EndTxn commit: %v", err)
	}
	passes()
	fresh := kadm.NewClient(c.Client())
	defer fresh.Close()
	if err := WaitFor(15*time.Second, func() error { return hasOffsets(ctx, fresh, txGroup, topic, map[int32]int64{0: 555}) }); err != nil {
		t.Fatalf("after retention passes: %v", err)
	}
}

// testFrozenCoordinator: SIGSTOP of a group's coordinator beyond
// --dead-after, commits through the new owner, SIGCONT: every request to
// the old broker for the group is refused or answered with the new owner's
// values.
func testFrozenCoordinator(t *testing.T, ctx context.Context, c *Cluster, fresh *kadm.Client, topic string) {
	t0 := time.Now()
	step := func(what string) { t.Logf("%s [%v]", what, time.Since(t0).Round(10*time.Millisecond)) }
	const frozenGroup = "frozen-owner"
	commitVia(t, ctx, fresh, frozenGroup, topic, 10)
	old, err := c.Coordinator(ctx, fresh, frozenGroup)
	if err != nil {
		t.Fatal(err)
	}
	var others []string
	for _, b := range c.Brokers {
		if b.ID != old {
			others = append(others, b.Addr)
		}
	}
	// Clients made after the freeze and seeded with the other brokers only:
	// a client's cached coordinator would otherwise still be the frozen one.
	// A request that still reaches the frozen broker (through a peer's
	// metadata from before the change) times out quickly and is retried.
	newLive := func() *kadm.Client {
		return kadm.NewClient(c.Client(kgo.SeedBrokers(others...), kgo.RequestTimeoutOverhead(2*time.Second)))
	}
	frozen := c.Broker(old)
	step("committed through the coordinator")
	if err := frozen.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := WaitFor(4*c.Opts.DeadAfter, func() error {
		probe := newLive()
		defer probe.Close()
		n, err := c.Coordinator(ctx, probe, frozenGroup)
		if err != nil {
			return err
		}
		if n == old {
			return fmt.Errorf("still coordinated by the frozen broker %d", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	step("replaced")
	live := newLive()
	defer live.Close()
	if err := WaitFor(20*time.Second, func() error {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		err := commitOnce(actx, live, frozenGroup, topic, 20)
		if err != nil {
			t.Logf("commit through the new owner: %v [%v]", err, time.Since(t0).Round(10*time.Millisecond))
		}
		return err
	}); err != nil {
		t.Fatalf("commit through the new owner: %v", err)
	}
	step("committed through the new owner")
	// The group is in use at its new owner, so the controller pins it there
	// (an explicit entry): when the frozen broker comes back, the group
	// stays where it is, and the old broker must not serve it.
	if err := WaitFor(10*time.Second, func() error { return pinnedElsewhere(c.DataDir, frozenGroup, old) }); err != nil {
		t.Fatal(err)
	}
	// A client that still knows the frozen broker as coordinator.
	zombie := c.Client(kgo.SeedBrokers(frozen.Addr), kgo.RequestTimeoutOverhead(5*time.Second), kgo.RequestRetries(0))
	defer zombie.Close()
	step("pinned")
	if err := frozen.Cont(); err != nil {
		t.Fatal(err)
	}
	refusedOrCurrent := func(what string, code int16, got int64, hasValue bool) {
		t.Helper()
		if code != 0 {
			switch e := kerr.ErrorForCode(code); e {
			case kerr.NotCoordinator, kerr.CoordinatorLoadInProgress, kerr.CoordinatorNotAvailable:
			default:
				t.Errorf("%s on the resumed broker: unexpected %v", what, e)
			}
			return
		}
		if hasValue && got != 20 {
			t.Errorf("%s on the resumed broker answered %d; the new owner holds 20", what, got)
		}
		if !hasValue {
			t.Errorf("%s on the resumed broker was accepted for a group it no longer owns", what)
		}
	}
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		f := kmsg.NewPtrOffsetFetchRequest()
		f.Group = frozenGroup
		ft := kmsg.NewOffsetFetchRequestTopic()
		ft.Topic, ft.Partitions = topic, []int32{0}
		f.Topics = append(f.Topics, ft)
		fg := kmsg.NewOffsetFetchRequestGroup() // the v8+ form of the same question
		fg.Group = frozenGroup
		fgt := kmsg.NewOffsetFetchRequestGroupTopic()
		fgt.Topic, fgt.Partitions = topic, []int32{0}
		fg.Topics = append(fg.Topics, fgt)
		f.Groups = append(f.Groups, fg)
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		fr, err := zombie.Broker(int(old)).Request(rctx, f)
		rcancel()
		if err == nil {
			r := fr.(*kmsg.OffsetFetchResponse)
			code, val := r.ErrorCode, int64(-1)
			topics := r.Topics
			if len(r.Groups) == 1 { // v8+: the batched form
				code = r.Groups[0].ErrorCode
				for _, gt := range r.Groups[0].Topics {
					for _, gp := range gt.Partitions {
						if gt.Topic == topic && gp.Partition == 0 {
							code, val = gp.ErrorCode, gp.Offset
						}
					}
				}
				topics = nil
			}
			if code == 0 && len(topics) == 1 && len(topics[0].Partitions) == 1 {
				code, val = topics[0].Partitions[0].ErrorCode, topics[0].Partitions[0].Offset
			}
			refusedOrCurrent("OffsetFetch", code, val, true)
		}
		oc := kmsg.NewPtrOffsetCommitRequest()
		oc.Group, oc.Generation = frozenGroup, -1
		ot := kmsg.NewOffsetCommitRequestTopic()
		ot.Topic = topic
		op := kmsg.NewOffsetCommitRequestTopicPartition()
		op.Partition, op.Offset = 0, 15
		ot.Partitions = append(ot.Partitions, op)
		oc.Topics = append(oc.Topics, ot)
		rctx, rcancel = context.WithTimeout(ctx, 5*time.Second)
		cr, err := zombie.Broker(int(old)).Request(rctx, oc)
		rcancel()
		if err == nil {
			r := cr.(*kmsg.OffsetCommitResponse)
			refusedOrCurrent("OffsetCommit", r.Topics[0].Partitions[0].ErrorCode, 0, false)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := hasOffsets(ctx, live, frozenGroup, topic, map[int32]int64{0: 20}); err != nil {
		t.Fatalf("after the resumed broker's requests: %v", err)
	}
}

// pinnedElsewhere checks that assignment.json holds an explicit entry for
// group on a broker other than kaas-<not>.
func pinnedElsewhere(dataDir, group string, not int32) error {
	data, err := os.ReadFile(volume.AssignmentPath(dataDir))
	if err != nil {
		return err
	}
	var a struct {
		ConsumerGroups []struct {
			GroupID string `json:"groupId"`
			Broker  string `json:"broker"`
		} `json:"consumerGroups"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return err
	}
	for _, g := range a.ConsumerGroups {
		if g.GroupID == group {
			if g.Broker == fmt.Sprintf("kaas-%d", not) {
				return fmt.Errorf("%s pinned on kaas-%d", group, not)
			}
			return nil
		}
	}
	return fmt.Errorf("no explicit entry for %s yet", group)
}

// txnIDNotOn returns a transactional id that broker avoid does not
// coordinate.
func txnIDNotOn(t *testing.T, ctx context.Context, adm *kadm.Client, avoid int32) string {
	t.Helper()
	for i := range 100 {
		id := fmt.Sprintf("owner-change-tx-%d", i)
		rs := adm.FindTxnCoordinators(ctx, id)
		if r := rs[id]; r.Err == nil && r.NodeID != avoid {
			return id
		}
	}
	t.Fatal("no transactional id off the group's coordinator")
	return ""
}

// stageTxnOffsets begins a transaction of txID and stages one offset of
// group in it (AddOffsetsToTxn, TxnOffsetCommit), leaving it open.
func stageTxnOffsets(t *testing.T, ctx context.Context, cl *kgo.Client, txID, group, topic string, offset int64) (int64, int16) {
	t.Helper()
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &txID, 120_000
	ir, err := init.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(ir.ErrorCode)
	}
	if err != nil {
		t.Fatalf("InitProducerID: %v", err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txID, ir.ProducerID, ir.ProducerEpoch, group
	ar, err := add.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(ar.ErrorCode)
	}
	if err != nil {
		t.Fatalf("AddOffsetsToTxn: %v", err)
	}
	tc := kmsg.NewPtrTxnOffsetCommitRequest()
	tc.TransactionalID, tc.Group, tc.ProducerID, tc.ProducerEpoch, tc.Generation = txID, group, ir.ProducerID, ir.ProducerEpoch, -1
	tt := kmsg.NewTxnOffsetCommitRequestTopic()
	tt.Topic = topic
	tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	tp.Partition, tp.Offset = 0, offset
	tt.Partitions = append(tt.Partitions, tp)
	tc.Topics = append(tc.Topics, tt)
	tr, err := tc.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(tr.Topics[0].Partitions[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("TxnOffsetCommit: %v", err)
	}
	return ir.ProducerID, ir.ProducerEpoch
}

func commitOnce(ctx context.Context, adm *kadm.Client, group, topic string, offset int64) error {
	var offs kadm.Offsets
	offs.AddOffset(topic, 0, offset, -1)
	rs, err := adm.CommitOffsets(ctx, group, offs)
	if err != nil {
		return err
	}
	return rs.Error()
}

func commitVia(t *testing.T, ctx context.Context, adm *kadm.Client, group, topic string, offset int64) {
	t.Helper()
	if err := WaitFor(20*time.Second, func() error { return commitOnce(ctx, adm, group, topic, offset) }); err != nil {
		t.Fatalf("commit %s: %v", group, err)
	}
}

// hasOffsets checks the committed offsets of group on topic.
func hasOffsets(ctx context.Context, adm *kadm.Client, group, topic string, want map[int32]int64) error {
	rs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return err
	}
	if err := rs.Error(); err != nil {
		return err
	}
	for p, w := range want {
		o, ok := rs.Lookup(topic, p)
		if !ok {
			return fmt.Errorf("%s: no committed offset for %s/%d (all: %v)", group, topic, p, rs)
		}
		if o.At != w {
			return fmt.Errorf("%s: %s/%d at %d, want %d", group, topic, p, o.At, w)
		}
	}
	return nil
}
