package fsutil

import (
	"context"
	"sync"
	"time"
)

// Stamp is the assignment a write on the shared volume was granted under
// (controller epoch, assignment version), as offsets.Fence and
// assignment.json carry it.
type Stamp struct {
	Epoch   int64 `json:"epoch"`
	Version int64 `json:"version"`
}

// Less reports whether s is older than o.
func (s Stamp) Less(o Stamp) bool {
	return s.Epoch < o.Epoch || (s.Epoch == o.Epoch && s.Version < o.Version)
}

// Writes counts a broker's writes in flight on the shared volume (group
// and transaction files), by the assignment each was granted under: from
// just before its last ownership check to the return of its rename. A
// rename cannot be refused and a network file system may hold one for
// seconds, so the brokers gaining a group wait until every broker that
// may still write it under an older assignment says none of its writes
// under one is in flight (docs/cluster.md, "Hand-off"). A nil *Writes
// counts nothing.
type Writes struct {
	mu     sync.Mutex
	seq    uint64
	flying map[uint64]flight
	idle   chan struct{} // closed and replaced when the last write ends
	// notify is called (without the lock) when a write ends and the oldest
	// stamp in flight changed: the liveness report says it at once.
	notify func()
}

type flight struct {
	stamp Stamp
	since time.Time
}

// NewWrites returns an empty count.
func NewWrites() *Writes {
	return &Writes{flying: map[uint64]flight{}, idle: make(chan struct{})}
}

// OnChange sets the function called when a write ends and the oldest stamp
// in flight changed.
func (w *Writes) OnChange(f func()) {
	if w != nil {
		w.mu.Lock()
		w.notify = f
		w.mu.Unlock()
	}
}

// Begin counts a write granted under s; end ends it (once).
func (w *Writes) Begin(s Stamp) (end func()) {
	if w == nil {
		return func() {}
	}
	w.mu.Lock()
	w.seq++
	id := w.seq
	w.flying[id] = flight{stamp: s, since: time.Now()}
	w.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { w.end(id) }) }
}

func (w *Writes) end(id uint64) {
	w.mu.Lock()
	before, _ := w.oldestLocked()
	delete(w.flying, id)
	after, ok := w.oldestLocked()
	if len(w.flying) == 0 {
		close(w.idle)
		w.idle = make(chan struct{})
	}
	notify := w.notify
	w.mu.Unlock()
	if notify != nil && (!ok || after != before) {
		notify()
	}
}

// Oldest is the oldest stamp a write in flight was granted under; ok is
// false when none is in flight.
func (w *Writes) Oldest() (s Stamp, ok bool) {
	if w == nil {
		return Stamp{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.oldestLocked()
}

func (w *Writes) oldestLocked() (s Stamp, ok bool) {
	for _, f := range w.flying {
		if !ok || f.stamp.Less(s) {
			s, ok = f.stamp, true
		}
	}
	return s, ok
}

// Since is when the longest write in flight began; ok is false when none
// is in flight.
func (w *Writes) Since() (t time.Time, ok bool) {
	if w == nil {
		return time.Time{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.flying {
		if !ok || f.since.Before(t) {
			t, ok = f.since, true
		}
	}
	return t, ok
}

// Wait returns once no write is in flight, or with ctx's error.
func (w *Writes) Wait(ctx context.Context) error {
	if w == nil {
		return nil
	}
	for {
		w.mu.Lock()
		if len(w.flying) == 0 {
			w.mu.Unlock()
			return nil
		}
		idle := w.idle
		w.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
