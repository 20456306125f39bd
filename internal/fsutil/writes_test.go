package fsutil

import (
	"context"
	"testing"
	"time"
)

func TestWritesTellTheOldestStampInFlight(t *testing.T) {
	w := NewWrites()
	changes := 0
	w.OnChange(func() { changes++ })
	if _, ok := w.Oldest(); ok {
		t.Fatal("an empty count has a write in flight")
	}
	endOld := w.Begin(Stamp{1, 3})
	endNew := w.Begin(Stamp{1, 4})
	endNew2 := w.Begin(Stamp{1, 4})
	if s, ok := w.Oldest(); !ok || s != (Stamp{1, 3}) {
		t.Fatalf("oldest %v %v", s, ok)
	}
	endNew()
	endNew() // twice: once
	if changes != 0 {
		t.Fatalf("a write ended without changing the oldest, and %d changes were told", changes)
	}
	endOld()
	if s, ok := w.Oldest(); !ok || s != (Stamp{1, 4}) || changes != 1 {
		t.Fatalf("after the old write: %v %v, %d changes", s, ok, changes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.Wait(ctx); err == nil {
		t.Fatal("Wait returned with a write in flight")
	}
	done := make(chan error, 1)
	go func() { done <- w.Wait(context.Background()) }()
	endNew2()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Oldest(); ok || changes != 2 {
		t.Fatalf("none in flight: ok %v, %d changes", ok, changes)
	}
	var none *Writes
	none.Begin(Stamp{})()
	if _, ok := none.Oldest(); ok {
		t.Fatal("nil counts")
	}
}
