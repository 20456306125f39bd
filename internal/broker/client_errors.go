package broker

import (
	"log/slog"
	"sync"
	"time"
)

// clientErrorLogEvery bounds the WARN lines about what clients send: one
// per kind at most this often, with how many were left out.
const clientErrorLogEvery = time.Second

// clientErrors rate-limits the log lines of client errors (bad frames, bad
// requests): a client must not be able to fill the broker's log. Every one
// is counted (kaas_client_errors_total).
type clientErrors struct {
	mu    sync.Mutex
	kinds map[string]*clientErrorKind
}

type clientErrorKind struct {
	last       time.Time
	suppressed int
}

// clientError counts a client error of kind and logs msg at WARN unless a
// line of that kind was logged within clientErrorLogEvery.
func (b *Broker) clientError(log *slog.Logger, kind, msg string, args ...any) {
	b.cfg.Metrics.ClientError(kind)
	e := &b.clientErrs
	now := time.Now()
	e.mu.Lock()
	if e.kinds == nil {
		e.kinds = map[string]*clientErrorKind{}
	}
	k := e.kinds[kind]
	if k == nil {
		k = &clientErrorKind{}
		e.kinds[kind] = k
	}
	if !k.last.IsZero() && now.Sub(k.last) < clientErrorLogEvery {
		k.suppressed++
		e.mu.Unlock()
		return
	}
	left := k.suppressed
	k.last, k.suppressed = now, 0
	e.mu.Unlock()
	if left > 0 {
		args = append(args, "similar_lines_left_out", left)
	}
	log.Warn(msg, args...)
}
