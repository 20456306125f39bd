package bench

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestGoalsProduceWellFormedRows runs every registered goal for a tiny
// duration against real targets and checks the rows, not the timings.
func TestGoalsProduceWellFormedRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Duration: 150 * time.Millisecond, Concurrency: []int{1, 2}, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) > 0 {
		t.Fatalf("goals failed: %v", rep.Errors)
	}
	seen := map[string]int{}
	for i, r := range rep.Rows {
		seen[r.Goal]++
		for name, v := range map[string]float64{"ours": r.Ours, "reference": r.Reference, "ratio": r.Ratio} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
				t.Errorf("row %d %q: %s = %v, want a finite positive measurement", i+1, r.What, name, v)
			}
		}
		switch r.RefName {
		case RefKfake, RefL, RefSpec:
		default:
			t.Errorf("row %d %q: reference %q", i+1, r.What, r.RefName)
		}
		if _, ok := bound(r.Target); !ok && r.Target != "info" {
			t.Errorf("row %d %q: target %q", i+1, r.What, r.Target)
		}
		if r.Goal == "" || r.What == "" || r.Unit == "" {
			t.Errorf("row %d: missing goal, what or unit: %+v", i+1, r)
		}
		if strings.Contains(r.Note, "INCOMPLETE") {
			t.Errorf("row %d %q: %s", i+1, r.What, r.Note)
		}
	}
	for _, g := range Goals() {
		if seen[g.Name()] == 0 {
			t.Errorf("goal %s produced no row", g.Name())
		}
	}

	var table, md bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	rep.WriteMarkdown(&md, "bench.png")
	for _, r := range rep.Rows {
		if !strings.Contains(table.String(), r.What) || !strings.Contains(md.String(), r.What) {
			t.Errorf("row %q missing from the table or the report", r.What)
		}
	}
	var img bytes.Buffer
	if err := rep.WriteChart(&img); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&img); err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	t.Log("\n" + table.String())
}

func TestRowRatioAndBound(t *testing.T) {
	r := AtLeast("g", "w", "u", 8, 10, RefKfake, 0.8, "")
	if r.Ratio != 0.8 || !r.Met || r.Target != "≥ 0.8" {
		t.Errorf("AtLeast: %+v", r)
	}
	r = AtMost("g", "w", "u", 3, 2, RefL, 1.25, "")
	if r.Ratio != 1.5 || r.Met || r.Target != "≤ 1.25" {
		t.Errorf("AtMost: %+v", r)
	}
	if b, ok := bound(r.Target); !ok || b != 1.25 {
		t.Errorf("bound(%q) = %v, %v", r.Target, b, ok)
	}
	if r := AtLeast("g", "w", "u", 1, 0, RefKfake, 1, ""); r.Ratio != 0 || r.Met {
		t.Errorf("a zero reference must not meet a goal: %+v", r)
	}
}

func TestGoalsRunLimitsFirst(t *testing.T) {
	names := GoalNames()
	if len(names) < 3 || names[0] != "limits" || names[1] != "produce" || names[2] != "fetch" {
		t.Errorf("goal order %v, want limits, produce, fetch first", names)
	}
}

func TestVersionsPinnedToKaas(t *testing.T) {
	v := Versions()
	if got, _ := v.LookupMaxKeyVersion(0); got > 11 { // Produce
		t.Errorf("produce pinned at %d, above what kaas advertises", got)
	}
}

// TestReportShowsASecondVolumeBeside: rows of a second run on another
// volume are matched to this run's by goal and what, with the ratio of the
// two volumes; a row the first run lacks shows "–".
func TestReportShowsASecondVolumeBeside(t *testing.T) {
	rep := &Report{Machine: Machine{DataFS: "ext4"}, Rows: []Row{
		AtMost("commit", "OffsetCommit p50, 1 partition, kaas durable vs L", "µs", 900, 641, RefL, 1.25, ""),
	}}
	rep.Beside = &Report{Machine: Machine{DataFS: "fuse.ceph-fuse"}, Rows: []Row{
		AtMost("commit", "OffsetCommit p50, 1 partition, kaas durable vs L", "µs", 9000, 8000, RefL, 1.25, ""),
		AtMost("commit", "only on the second volume", "µs", 10, 10, RefL, 1.25, ""),
	}}
	var b strings.Builder
	rep.WriteMarkdown(&b, "bench.png")
	md := b.String()
	for _, want := range []string{
		"| data dir | on ext4 |",
		"## The same rows on a second volume",
		"with the data dir on fuse.ceph-fuse",
		"| 1 | commit | OffsetCommit p50, 1 partition, kaas durable vs L | 900 µs | 9000 µs | 10 | 8000 L | 1.12 | ≤ 1.25 | yes |",
		"| 2 | commit | only on the second volume | – | 10 µs | – |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// TestFSTypeNamesTheMount: the temp dir's file system has a type in the
// mount table on Linux.
func TestFSTypeNamesTheMount(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the mount table is read on Linux only")
	}
	if typ := FSType(t.TempDir()); typ == "" {
		t.Error("FSType of a temp dir is empty")
	}
	if got := unescapeMount(`/mnt/a\040b`); got != "/mnt/a b" {
		t.Errorf("unescapeMount: %q", got)
	}
}

// TestKafkaColumnHoldsTheLikeForLikeRows runs the goals that measure a
// Kafka cluster beside kaas, with a second kfake standing in for it (any
// Kafka-compatible cluster answers the same requests), and checks that each
// like-for-like row carries the figure and that the other rows do not.
func TestKafkaColumnHoldsTheLikeForLikeRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	other, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	rep, err := Run(ctx, Config{
		Goals:    []string{"produce", "fetch", "commit", "find-coordinator", "groups-mem", "rebalance", "consumer848"},
		Duration: 150 * time.Millisecond, Concurrency: []int{1}, DataDir: t.TempDir(), Kafka: other.ListenAddrs(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) > 0 {
		t.Fatalf("goals failed: %v", rep.Errors)
	}
	if !strings.Contains(rep.Machine.Kafka, "1 broker at "+other.ListenAddrs()[0]) {
		t.Errorf("Machine.Kafka = %q, want the broker count and address", rep.Machine.Kafka)
	}
	likeForLike := []string{
		"produce p50, 1 record/request, kaas durable", "produce c=1, kaas durable",
		"fetch 2004 recs, kaas vs", // the durable target only
		"OffsetCommit p50, 1 partition, kaas durable", "OffsetCommit p50, 1000 partitions, kaas durable",
		"OffsetCommit, 64 groups in parallel, kaas durable", "OffsetCommit, 1 group × 64 committers, kaas durable",
		"FindCoordinator p50", "FindCoordinator p99",
		"OffsetFetch, 1000 partitions", "Heartbeat, 64 members",
		"rebalance: +1 member", "default 3000 ms delay",
		"consumer group: 10 members reconciled", "consumer group: +1 member", "ConsumerGroupHeartbeat with 8 members",
	}
	found := map[string]bool{}
	for _, r := range rep.Rows {
		want := false
		for _, w := range likeForLike {
			if strings.Contains(r.What, w) {
				want, found[w] = true, true
			}
		}
		switch {
		case want && (r.Kafka <= 0 || math.IsNaN(r.Kafka) || strings.HasPrefix(r.KafkaNote, "failed")):
			t.Errorf("row %q: Kafka %v (%s), want the figure", r.What, r.Kafka, r.KafkaNote)
		case !want && (r.Kafka != 0 || r.KafkaNote != ""):
			t.Errorf("row %q has a Kafka figure %v (%s) but no like-for-like twin", r.What, r.Kafka, r.KafkaNote)
		}
	}
	for _, w := range likeForLike {
		if !found[w] {
			t.Errorf("no row matches %q", w)
		}
	}
	var md, table strings.Builder
	rep.WriteMarkdown(&md, "bench.png")
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| Apache Kafka | 1 broker at ", "| met | Kafka | ÷ Kafka | note |", "does not fsync per write"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if !strings.Contains(table.String(), "ours/kafka") {
		t.Errorf("table lacks the Kafka columns:\n%s", table.String())
	}
}

// TestKafkaAddressesMustBeOnLoopback: the load goes to this machine only.
func TestKafkaAddressesMustBeOnLoopback(t *testing.T) {
	if got, err := LoopbackAddrs("127.0.0.1:19092, [::1]:19093,localhost:19094"); err != nil || len(got) != 3 {
		t.Errorf("loopback list: %v, %v", got, err)
	}
	for _, bad := range []string{"10.0.0.1:9092", "example.com:9092", "127.0.0.1", "127.0.0.1:x"} {
		if _, err := LoopbackAddrs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
