package cluster

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/fsutil"
)

func elector(t *testing.T, dir, me string, stopped func(string) bool) *FileElector {
	t.Helper()
	e, err := NewFileElector(dir, me, 3*time.Second, stopped, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestFileElectorOneHolderAndTakeoverAfterTTL(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	a, b := elector(t, dir, "kaas-0", nil), elector(t, dir, "kaas-1", nil)
	now := t0
	ea, _ := a.Tick(ctx, now)
	eb, _ := b.Tick(ctx, now)
	if !ea.Leader || eb.Leader || ea.Epoch != 1 || eb.Epoch != 1 || eb.Holder != "kaas-0" {
		t.Fatalf("a %+v b %+v", ea, eb)
	}
	// a keeps renewing: b never takes over, however long.
	for i := 0; i < 20; i++ {
		now = now.Add(time.Second)
		a.Tick(ctx, now)
		if e, _ := b.Tick(ctx, now); e.Leader {
			t.Fatalf("took over a live holder at %v", now)
		}
	}
	// a freezes: b takes over once it saw no renewal for the TTL.
	frozeAt := now
	for now.Sub(frozeAt) < 3*time.Second {
		now = now.Add(500 * time.Millisecond)
		if e, _ := b.Tick(ctx, now); e.Leader && now.Sub(frozeAt) < 3*time.Second {
			t.Fatalf("took over after %v, before the TTL", now.Sub(frozeAt))
		}
	}
	now = now.Add(500 * time.Millisecond)
	eb, _ = b.Tick(ctx, now)
	if !eb.Leader || eb.Epoch != 2 {
		t.Fatalf("b after TTL: %+v", eb)
	}
	// a resumes: it sees epoch 2 and steps down.
	ea, _ = a.Tick(ctx, now)
	if ea.Leader || ea.Epoch != 2 || ea.Holder != "kaas-1" {
		t.Fatalf("a after resuming: %+v", ea)
	}
}

func TestFileElectorImmediateTakeover(t *testing.T) {
	ctx := context.Background()
	t.Run("resigned", func(t *testing.T) {
		dir := t.TempDir()
		a, b := elector(t, dir, "kaas-0", nil), elector(t, dir, "kaas-1", nil)
		a.Tick(ctx, t0)
		b.Tick(ctx, t0)
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if e, _ := b.Tick(ctx, t0.Add(time.Millisecond)); !e.Leader || e.Epoch != 2 {
			t.Fatalf("after resign: %+v", e)
		}
	})
	t.Run("holder reported stopped", func(t *testing.T) {
		dir := t.TempDir()
		a := elector(t, dir, "kaas-0", nil)
		b := elector(t, dir, "kaas-1", func(id string) bool { return id == "kaas-0" })
		a.Tick(ctx, t0)
		if e, _ := b.Tick(ctx, t0); !e.Leader || e.Epoch != 2 {
			t.Fatalf("holder stopped: %+v", e)
		}
	})
	t.Run("own earlier incarnation", func(t *testing.T) {
		dir := t.TempDir()
		elector(t, dir, "kaas-0", nil).Tick(ctx, t0)
		if e, _ := elector(t, dir, "kaas-0", nil).Tick(ctx, t0); !e.Leader || e.Epoch != 2 {
			t.Fatalf("restart: %+v", e)
		}
	})
}

func TestFileElectorRaceForOneEpochHasOneWinner(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	const n = 8
	results := make(chan Election, n)
	for i := range n {
		go func() {
			e := elector(t, dir, "kaas-"+string(rune('a'+i)), nil)
			el, _ := e.Tick(ctx, t0)
			results <- el
		}()
	}
	leaders := 0
	for range n {
		if el := <-results; el.Leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders for one epoch", leaders)
	}
}

func TestRuntimeRefusesAssignmentFromDeposedController(t *testing.T) {
	dir := t.TempDir()
	r, err := New(Config{DataDir: dir, ID: "kaas-1", NodeID: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.known.Store(5) // the election record says epoch 5
	old := &Assignment{ControllerEpoch: 4, AssignmentVersion: 99, Controller: "kaas-0",
		Brokers: []BrokerRow{{ID: "kaas-1", Health: Alive}}}
	if r.apply(old) {
		t.Fatal("applied an assignment from epoch 4 while epoch 5 is known")
	}
	cur := &Assignment{ControllerEpoch: 5, AssignmentVersion: 1, Controller: "kaas-2",
		Brokers: []BrokerRow{{ID: "kaas-1", Health: Alive}}}
	if !r.apply(cur) {
		t.Fatal("refused the current controller's assignment")
	}
	if r.apply(&Assignment{ControllerEpoch: 5, AssignmentVersion: 1, Brokers: cur.Brokers}) {
		t.Fatal("applied the same version twice")
	}
	// Through the file, as a deposed controller's late write would arrive.
	data, _ := json.Marshal(old)
	if err := fsutil.WriteFile(filepath.Join(dir, "__cluster", "assignment.json"), data); err != nil {
		t.Fatal(err)
	}
	r.poll()
	if r.Current() != cur {
		t.Fatal("a stale file replaced the current assignment")
	}
	// A torn file keeps what we had.
	os.WriteFile(filepath.Join(dir, "__cluster", "assignment.json"), []byte(`{"controllerEpoch":6,`), 0o644)
	r.poll()
	if r.Current() != cur {
		t.Fatal("a torn file replaced the current assignment")
	}
}
