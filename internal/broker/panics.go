package broker

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

// A panic while handling one request must not take the broker down (and a
// request that panics every time must not take down each broker a client
// retries it on): it closes that request's connection, counts in
// kaas_request_panics_total, and logs its stack once per API; later ones of
// the same API are logged as client errors are, at most once a second.
type panicLog struct {
	mu   sync.Mutex
	seen map[int16]bool // APIs whose stack was logged
}

// safeDispatch is dispatch with a panic of the handler recovered: ok is
// false and the connection must be closed.
func (b *Broker) safeDispatch(ctx context.Context, c *conn, req wire.Request) (func() kmsg.Response, bool) {
	return recovered(b, c, req.Key, func() func() kmsg.Response { return b.dispatch(ctx, c, req) })
}

// safeFinish runs a pending answer's finish with a panic recovered: ok is
// false and the connection must be closed.
func (b *Broker) safeFinish(c *conn, p pending) (kmsg.Response, bool) {
	return recovered(b, c, p.key, p.finish)
}

// recovered runs f, the handling of a request of API key; a panic in it is
// reported (handlerPanicked) and makes ok false.
func recovered[T any](b *Broker, c *conn, key int16, f func() T) (v T, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			b.handlerPanicked(c, key, r)
			var zero T
			v, ok = zero, false
		}
	}()
	return f(), true
}

func (b *Broker) handlerPanicked(c *conn, key int16, r any) {
	label, _ := metricLabels(key, 0)
	b.cfg.Metrics.RequestPanic(label)
	b.panics.mu.Lock()
	first := !b.panics.seen[key]
	if b.panics.seen == nil {
		b.panics.seen = map[int16]bool{}
	}
	b.panics.seen[key] = true
	b.panics.mu.Unlock()
	if first {
		c.log.Error("request handler panicked; closing the connection", "api", wire.Name(key), "panic", fmt.Sprint(r),
			"stack", string(debug.Stack()))
		return
	}
	b.clientError(c.log, "panic", "request handler panicked again; closing the connection", "api", wire.Name(key), "panic", fmt.Sprint(r))
}
