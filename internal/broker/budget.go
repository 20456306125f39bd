package broker

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// largeFrame: frames larger than this draw their bytes from the large
// requests' share of the request budget too.
const largeFrame = 1 << 20

// requestBudget is queued.max.request.bytes: the bytes of requests read and
// not yet answered, over all connections. A reader takes a frame's bytes as
// they arrive and gives them back once the request is answered (or its
// connection fails). Frames larger than largeFrame also take their bytes
// from a share of it, the total less a quarter (never less than one frame
// of the largest size): a few connections that send most of a large
// request and stall hold at most that share until --request-read-timeout
// closes them, and the rest stays for every other client's small
// requests.
type requestBudget struct {
	all   *semaphore.Weighted
	large *semaphore.Weighted

	// trim gives the memory of large requests back to the system once
	// they are answered (giveBack).
	trimMu   sync.Mutex
	trimmed  time.Time
	trimWait bool
}

func newRequestBudget(total, maxFrame int64) *requestBudget {
	share := max(total-total/4, min(total, maxFrame))
	return &requestBudget{all: semaphore.NewWeighted(total), large: semaphore.NewWeighted(share)}
}

// TryAcquire takes n bytes of a frame of size bytes without waiting.
func (b *requestBudget) TryAcquire(size, n int64) bool {
	if size <= largeFrame {
		return b.all.TryAcquire(n)
	}
	if !b.large.TryAcquire(n) {
		return false
	}
	if !b.all.TryAcquire(n) {
		b.large.Release(n)
		return false
	}
	return true
}

// Acquire takes n bytes of a frame of size bytes, waiting for room until
// ctx ends.
func (b *requestBudget) Acquire(ctx context.Context, size, n int64) error {
	if size <= largeFrame {
		return b.all.Acquire(ctx, n)
	}
	if err := b.large.Acquire(ctx, n); err != nil {
		return err
	}
	if err := b.all.Acquire(ctx, n); err != nil {
		b.large.Release(n)
		return err
	}
	return nil
}

// ReleaseOf gives back n bytes of a frame of size bytes.
func (b *requestBudget) ReleaseOf(size, n int64) {
	if n == 0 {
		return
	}
	if size > largeFrame {
		b.large.Release(n)
	}
	b.all.Release(n)
	if n >= giveBackFrame {
		b.giveBack()
	}
}

// giveBackFrame: a request this large, once answered, makes the broker
// return its free memory to the system soon after (giveBack).
const giveBackFrame = 8 << 20

// giveBack returns the process's free memory to the system a second after
// a large request was answered, at most once every ten seconds. Go keeps
// freed heap until a collection that may be minutes away on an idle
// broker: a burst of large requests (a flood of huge subscriptions,
// refused) would otherwise leave the process hundreds of MB larger for
// that long.
func (b *requestBudget) giveBack() {
	b.trimMu.Lock()
	defer b.trimMu.Unlock()
	if b.trimWait {
		return
	}
	b.trimWait = true
	wait := max(time.Second, 10*time.Second-time.Since(b.trimmed))
	time.AfterFunc(wait, func() {
		debug.FreeOSMemory()
		b.trimMu.Lock()
		b.trimmed, b.trimWait = time.Now(), false
		b.trimMu.Unlock()
	})
}

// Release gives back a whole frame of size bytes (what a read frame holds).
func (b *requestBudget) Release(size int64) { b.ReleaseOf(size, size) }
