package txn

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/offsets"
)

// view is one broker's assignment as the transaction coordinator sees it:
// whether it coordinates the id, and the stamp.
type view struct {
	fence offsets.Fence
	owns  bool
}

func TestTxnWriteRacingAnOwnerChangeIsRefused(t *testing.T) {
	dir := t.TempDir()
	var cur atomic.Pointer[view]
	cur.Store(&view{fence: offsets.Fence{ControllerEpoch: 1, AssignmentVersion: 1}, owns: true})
	next := int64(100)
	var mu sync.Mutex
	c, err := New(Config{Me: "kaas-0", Dir: dir, Markers: &fakeMarkers{},
		Grant:         func(string) (offsets.Fence, bool) { v := cur.Load(); return v.fence, v.owns },
		Now:           (&clock{time.Unix(1000, 0)}).now,
		NewProducerID: func() (int64, error) { mu.Lock(); defer mu.Unlock(); next++; return next, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := c.InitProducerID(ctx, "tx", time.Minute, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, offsets.FileName("tx")))
	if err != nil {
		t.Fatal(err)
	}
	// Between the ownership check and the write, the assignment moves the
	// id to another broker (version 2).
	var once sync.Once
	c.beforeSave = func(string) {
		once.Do(func() { cur.Store(&view{fence: offsets.Fence{ControllerEpoch: 1, AssignmentVersion: 2}, owns: false}) })
	}
	err = c.AddPartitions(ctx, "tx", r.ProducerID, r.ProducerEpoch, []TP{{Topic: "t", Partition: 0}})
	if !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("write after losing the id: %v, want NOT_COORDINATOR", err)
	}
	after, err := os.ReadFile(filepath.Join(dir, offsets.FileName("tx")))
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Fatalf("the broker that lost the id wrote it:\n%s\n->\n%s", before, after)
	}
}
