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
