package offsets

import (
	"context"
)

type opKind uint8

const (
	opCommit opKind = iota
	opDelete
	opDeleteTopic
	opDeleteGroup
	opExpire
	opStage
	opEndTxn
	opSetRetention
	opSetMembership
)

// request is one queued operation and, once done is closed, its result.
type request struct {
	kind       opKind
	own        Owner // granted under the group's lock; nil grants the zero fence
	fence      Fence // the stamp granted in the current attempt
	offs       map[TP]Offset
	tps        []TP
	topic      string
	now        int64
	retention  int64
	pid        int64
	staged     Staged
	commit     bool
	info       Retention
	membership *Membership // opSetMembership; nil removes the section
	members    bool        // expire: the group has members on this broker

	done    chan struct{}
	err     error
	retry   bool // the handle was evicted while queued; resubmit on a fresh one
	removed int
	existed bool
}

// enqueue queues r behind the group's queued requests and returns its wait.
func (s *Store) enqueue(group string, r *request) (wait func(context.Context) error, err error) {
	g, err := s.handle(group)
	if err != nil {
		return nil, err
	}
	if !s.track() { // reserve a write for a drain this call may start
		return nil, ErrClosed
	}
	r.done = make(chan struct{})
	g.qmu.Lock()
	g.pending = append(g.pending, r)
	if !g.writing {
		g.writing = true
		go s.drain(g)
	} else {
		s.writes.Done() // a batch is being written: its writer drains this one
	}
	g.qmu.Unlock()
	return func(ctx context.Context) error {
		if err := g.await(ctx, r); err != nil {
			return err
		}
		if r.retry { // the handle was evicted while queued: write it on a fresh one
			return s.submit(ctx, group, r)
		}
		return r.err
	}, nil
}

// submit queues r on the group and waits for its result. The first caller of an
// idle group writes its batch on its own goroutine; requests arriving meanwhile
// queue, and one drain goroutine writes them all in the next batch.
func (s *Store) submit(ctx context.Context, groupID string, r *request) error {
	for {
		g, err := s.handle(groupID)
		if err != nil {
			return err
		}
		if !s.track() {
			return ErrClosed
		}
		r.done = make(chan struct{})
		r.retry = false
		g.qmu.Lock()
		if !g.writing {
			g.writing = true
			g.qmu.Unlock()
			s.writeBatch(g, []*request{r})
			s.afterBatch(g)
			s.writes.Done()
		} else {
			g.pending = append(g.pending, r)
			g.qmu.Unlock()
			s.writes.Done()
			if err := g.await(ctx, r); err != nil {
				return err
			}
		}
		if r.retry {
			continue
		}
		return r.err
	}
}

// await waits for r's outcome. When ctx ends first and no batch took r
// yet, r leaves the queue and ctx's error is returned; once r is being
// written, its outcome is the answer.
func (g *groupState) await(ctx context.Context, r *request) error {
	select {
	case <-r.done:
	case <-ctx.Done():
		if g.withdraw(r) {
			return ctx.Err()
		}
		<-r.done
	}
	return nil
}

// withdraw removes r from the queue if no batch took it yet.
func (g *groupState) withdraw(r *request) bool {
	g.qmu.Lock()
	defer g.qmu.Unlock()
	for i, q := range g.pending {
		if q == r {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			return true
		}
	}
	return false
}

// afterBatch hands the queue to a drain goroutine, or marks the group idle.
// Once the store is closed, what is still queued fails with ErrClosed.
func (s *Store) afterBatch(g *groupState) {
	g.qmu.Lock()
	defer g.qmu.Unlock()
	if len(g.pending) == 0 {
		g.writing = false
		return
	}
	if !s.track() {
		for _, r := range g.pending {
			r.err = ErrClosed
			close(r.done)
		}
		g.pending, g.writing = nil, false
		return
	}
	go s.drain(g)
}

// drain writes queued batches until the queue is empty. Owned by the Store:
// Close waits for it; it ends when the queue is empty.
func (s *Store) drain(g *groupState) {
	defer s.writes.Done()
	for {
		g.qmu.Lock()
		batch := g.pending
		g.pending = nil
		if len(batch) == 0 {
			g.writing = false
			g.qmu.Unlock()
			return
		}
		g.qmu.Unlock()
		s.writeBatch(g, batch)
	}
}
