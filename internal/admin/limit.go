package admin

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// MaxConnections bounds the admin listener's open connections: it has its
// own small share of the process's file descriptors, and cannot take those
// of the Kafka listener or of the cluster loop. A connection over it is
// closed at once (a scraper retries at its next interval); idle keep-alive
// connections are closed after IdleTimeout.
const MaxConnections = 32

// limitListener closes connections accepted over max at once, logging it
// at most once a minute.
type limitListener struct {
	net.Listener
	max    int64
	open   atomic.Int64
	log    *slog.Logger
	mu     sync.Mutex
	logged time.Time
	over   int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			c.Close()
			l.refused()
			continue
		}
		return &limitedConn{Conn: c, l: l}, nil
	}
}

func (l *limitListener) refused() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.over++
	if time.Since(l.logged) < time.Minute {
		return
	}
	l.log.Warn("admin listener: closing connections over its limit", "limit", l.max, "closed", l.over)
	l.logged, l.over = time.Now(), 0
}

type limitedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}
