package cluster

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

func claimDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := (OS{}).MkdirAll(reportsDir(dir)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheckNotRunningFreeIDs(t *testing.T) {
	ctx := context.Background()
	dir := claimDir(t)
	if err := CheckNotRunning(ctx, nil, dir, "kaas-0", 50*time.Millisecond, 200*time.Millisecond); err != nil {
		t.Fatalf("no report: %v", err)
	}
	// Stopped: the last process shut down cleanly.
	if err := writeReport(OS{}, dir, Report{ID: "kaas-0", State: StateStopped, Seq: 9, ClusterAddr: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if err := CheckNotRunning(ctx, nil, dir, "kaas-0", 50*time.Millisecond, 200*time.Millisecond); err != nil {
		t.Fatalf("stopped report: %v", err)
	}
	// Killed: its cluster listener refuses; free at once, without waiting
	// for the report to go stale.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := writeReport(OS{}, dir, Report{ID: "kaas-0", State: StateRunning, Seq: 9, ClusterAddr: addr}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := CheckNotRunning(ctx, nil, dir, "kaas-0", time.Second, time.Minute); err != nil {
		t.Fatalf("killed process: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a refused listener took %v to judge", d)
	}
}

// A process that answers nothing (frozen) but whose report keeps changing
// is alive; one whose report stands still for the dead-after period is not.
func TestCheckNotRunningWatchesTheReport(t *testing.T) {
	ctx := context.Background()
	dir := claimDir(t)
	rep := Report{ID: "kaas-1", State: StateRunning, Seq: 1, Incarnation: "a"}
	if err := writeReport(OS{}, dir, rep); err != nil {
		t.Fatal(err)
	}
	if err := CheckNotRunning(ctx, nil, dir, "kaas-1", 20*time.Millisecond, 100*time.Millisecond); err != nil {
		t.Fatalf("a report standing still: %v", err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(2); ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			rep.Seq = i
			_ = writeReport(OS{}, dir, rep)
		}
	}()
	err := CheckNotRunning(ctx, nil, dir, "kaas-1", 20*time.Millisecond, time.Second)
	close(stop)
	<-done
	if !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("a report that changes: %v, want ErrAlreadyRunning", err)
	}
}
