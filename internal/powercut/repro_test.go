package powercut

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/powerfs"
)

// Regression tests for what the suite found, one broker and one partition
// each, small enough to read as a reproduction.

// TestAckedRecordSurvivesAFailedFsync: a failed fsync of a segment loses
// the pages it was to write (Linux marks them clean after a writeback
// error, and the next fsync succeeds without writing them). An ordinary
// idempotent producer retries the batch; kaas recognises the retry as a
// duplicate of the batch already in the log and acknowledges it once a
// later fsync succeeds, so the acknowledged record lies in the lost pages
// and a power cut takes it away (and everything after it).
func TestAckedRecordSurvivesAFailedFsync(t *testing.T) {
	r := newRig(t, 1, plainTopic)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := r.c.Client(kgo.DefaultProduceTopic(plainTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(v []byte) (*kgo.Record, error) {
		return cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: v}).First()
	}
	if _, err := produce([]byte("a")); err != nil {
		t.Fatalf("produce a: %v", err)
	}
	// b fills whole pages; the fsync meant to persist them fails once.
	if err := r.fs.Inject(powerfs.Fault{Op: powerfs.OpFsync, Path: `^plain/0/\d+\.log$`, Count: 1}); err != nil {
		t.Fatal(err)
	}
	bv := bytes.Repeat([]byte("b"), 3*4096)
	b, err := produce(bv)
	if err != nil {
		t.Fatalf("produce b: %v", err)
	}
	if n := r.fs.Failed()[powerfs.OpFsync]; n != 1 {
		t.Fatalf("%d fsyncs failed, want 1", n)
	}
	t.Logf("b acknowledged at offset %d although its fsync failed once", b.Offset)

	if _, err := r.powerCut(nil); err != nil {
		t.Fatal(err)
	}
	if err := r.c.StartAll(); err != nil {
		t.Fatalf("restart after the cut: %v", err)
	}
	ends, err := listEnds(ctx, r.c.Addrs(), plainTopic)
	if err != nil {
		t.Fatal(err)
	}
	if ends[0] <= b.Offset {
		t.Fatalf("after a power cut the log ends at %d: acknowledged record b at offset %d is gone", ends[0], b.Offset)
	}
	got, _, err := readUntil(ctx, r.c.Addrs(), plainTopic, false, map[int32]int64{0: b.Offset})
	if err != nil {
		t.Fatal(err)
	}
	if v := got[0][b.Offset]; v != string(bv) {
		t.Fatalf("after a power cut, offset %d holds %d bytes, not the acknowledged b", b.Offset, len(v))
	}
}

// TestDeletedTopicStaysDeletedAfterACut: a deleted topic's directory is
// moved aside and removed without an fsync of the data directory, so a
// power cut soon after the deletion (before any later fsync of a directory
// commits it) can put it back; a topic created again under the same name
// must not start with the deleted topic's records. The window is short, so
// the scenario runs a few times.
func TestDeletedTopicStaysDeletedAfterACut(t *testing.T) {
	r := newRig(t, 1, plainTopic)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for attempt := 1; attempt <= 8; attempt++ {
		topic := fmt.Sprintf("gone-%d", attempt)
		cl := r.c.Client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		adm := kadm.NewClient(cl)
		createTopic(t, ctx, adm, topic)
		if _, err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("deleted")}).First(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		if _, err := adm.DeleteTopic(ctx, topic); err != nil {
			t.Fatalf("delete topic: %v", err)
		}
		cl.Close()
		loss, err := r.powerCut(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.c.StartAll(); err != nil {
			t.Fatalf("restart after the cut: %v", err)
		}
		adm = kadm.NewClient(r.c.Client())
		if topics, err := adm.ListTopics(ctx); err == nil && topics.Has(topic) {
			t.Fatalf("topic %s is back after the cut although its deletion was acknowledged", topic)
		}
		createTopic(t, ctx, adm, topic)
		ends, err := listEnds(ctx, r.c.Addrs(), topic)
		if err != nil {
			t.Fatal(err)
		}
		if ends[0] != 0 {
			t.Fatalf("attempt %d: topic %s, deleted, then a cut (%d namespace operations reverted), then created again, starts at offset %d: it holds the deleted topic's records",
				attempt, topic, loss.Ops, ends[0])
		}
	}
}
