package broker

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

// server owns the listener and the open connections.
type server struct {
	b      *Broker
	ln     net.Listener
	budget *requestBudget // queued.max.request.bytes

	mu      sync.Mutex // guards conns, perIP, closing
	conns   map[*conn]struct{}
	perIP   map[string]int
	closing bool

	// Owned by the accept loop: the current burst of accept errors and of
	// connections refused over a limit, logged once each.
	acceptErrs, refused int

	wg sync.WaitGroup // the accept loop and every connection
}

// Listen opens the listener; Serve must follow. Split so that callers can
// learn the bound address (port 0) before serving.
func (b *Broker) Listen() error {
	ln, err := net.Listen("tcp", b.cfg.Listen)
	if err != nil {
		return fmt.Errorf("broker: listen %s: %w", b.cfg.Listen, err)
	}
	b.srvMu.Lock()
	b.srv = &server{b: b, ln: ln, conns: map[*conn]struct{}{}, perIP: map[string]int{},
		budget: newRequestBudget(b.cfg.QueuedMaxRequestBytes, int64(b.cfg.MaxFrame))}
	b.srvMu.Unlock()
	b.log.Info("listening", "addr", ln.Addr().String(), "advertise", b.cfg.Advertise)
	return nil
}

// Addr is the bound listener address ("" before Listen).
func (b *Broker) Addr() string {
	b.srvMu.Lock()
	defer b.srvMu.Unlock()
	if b.srv == nil {
		return ""
	}
	return b.srv.ln.Addr().String()
}

// Serve accepts connections until Close. It returns nil after a graceful
// stop. No accept error ends it: out of descriptors or any other failure, it
// backs off (5 ms doubling to 1 s, as Go's HTTP server does) and accepts
// again, logging once per burst.
func (b *Broker) Serve() error {
	b.srvMu.Lock()
	s := b.srv
	b.srvMu.Unlock()
	if s == nil {
		return errors.New("broker: Serve before Listen")
	}
	s.wg.Add(1)
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			if s.acceptErrs == 0 {
				b.log.Warn("accept failed; backing off and accepting again", "err", err)
			}
			s.acceptErrs++
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-b.ctx.Done():
				return nil
			}
			continue
		}
		if s.acceptErrs > 0 {
			b.log.Info("accepting again", "failed_accepts", s.acceptErrs)
			s.acceptErrs, backoff = 0, 0
		}
		if !s.admit(nc) {
			continue
		}
	}
}

// admit registers a new connection and starts serving it, or closes it when
// a connection limit is reached (max.connections, max.connections.per.ip).
// Runs on the accept loop.
func (s *server) admit(nc net.Conn) bool {
	b := s.b
	ip := remoteIP(nc)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		nc.Close()
		return false
	}
	over := ""
	switch {
	case len(s.conns) >= b.cfg.MaxConnections:
		over = "max.connections"
	case b.cfg.MaxConnectionsPerIP > 0 && s.perIP[ip] >= b.cfg.MaxConnectionsPerIP:
		over = "max.connections.per.ip"
	}
	if over != "" {
		s.mu.Unlock()
		nc.Close()
		if s.refused == 0 {
			b.log.Warn("refusing connections over a limit", "limit", over, "ip", ip,
				"connections", b.cfg.MaxConnections, "per_ip", b.cfg.MaxConnectionsPerIP)
		}
		s.refused++
		b.cfg.Metrics.Refused(over)
		return false
	}
	if s.refused > 0 {
		b.log.Info("accepting connections again", "refused", s.refused)
		s.refused = 0
	}
	c := &conn{s: s, nc: nc, ip: ip, log: b.log.With("remote", nc.RemoteAddr().String()),
		br: bufio.NewReaderSize(nc, 16<<10)}
	c.ctx, c.cancel = context.WithCancel(b.ctx)
	s.conns[c] = struct{}{}
	s.perIP[ip]++
	b.cfg.Metrics.Connections(1)
	s.wg.Add(1)
	s.mu.Unlock()
	go c.serve()
	return true
}

func remoteIP(nc net.Conn) string {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return nc.RemoteAddr().String()
}

// shutdown stops accepting, lets every connection finish the requests it
// has read, then closes them. Past ctx's deadline, connections are cut.
func (s *server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, c := range conns {
		c.stopReading()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, c := range conns {
			c.cancel()
			c.nc.Close()
		}
		<-done
		return ctx.Err()
	}
}

// conn is one client connection. Requests are read and their synchronous part
// handled in order on the reader goroutine; responses are written in the same
// order by the writer goroutine, which waits for each request's completion
// (an fsync, a long poll) in turn. So a client may pipeline, effects stay in
// request order, and slow completions overlap.
type conn struct {
	s      *server
	nc     net.Conn
	ip     string
	log    *slog.Logger
	ctx    context.Context // cancelled on hard stop
	cancel context.CancelFunc

	stopOnce sync.Once
	stopping atomic.Bool

	// Owned by the reader goroutine.
	br      *bufio.Reader
	idleSet time.Time // when the idle deadline was last armed
	strict  bool      // a request-read deadline is armed: re-arm the idle one
}

// pending is a request whose response the writer still has to send.
type pending struct {
	corr   int32
	finish func() kmsg.Response // nil response: send nothing (acks=0)
	size   int64                // its bytes held in the server's budget
	// For the request metrics: the API, its version and when it was read.
	key, version int16
	start        time.Time
}

func (c *conn) stopReading() {
	c.stopOnce.Do(func() {
		c.stopping.Store(true)
		_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	})
}

// deadline sets the read deadline, unless the connection is stopping.
func (c *conn) deadline(d time.Duration) {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	if c.stopping.Load() { // stopReading ran meanwhile: keep its deadline
		_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

func (c *conn) serve() {
	defer c.s.wg.Done()
	defer func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.b.cfg.Metrics.Connections(-1)
		if c.s.perIP[c.ip]--; c.s.perIP[c.ip] <= 0 {
			delete(c.s.perIP, c.ip)
		}
		c.s.mu.Unlock()
		c.cancel()
		c.nc.Close()
	}()
	out := make(chan pending, c.s.b.cfg.MaxInFlight)
	writerDone := make(chan struct{})
	go c.write(out, writerDone)
	c.read(out)
	close(out)
	<-writerDone
}

// read decodes requests until EOF, a bad frame, a timeout, or shutdown.
func (c *conn) read(out chan<- pending) {
	b := c.s.b
	for {
		frame, err := c.readFrame()
		if err != nil {
			var ne net.Error
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), c.stopping.Load():
			case errors.Is(err, wire.ErrFrameTooLarge), errors.Is(err, wire.ErrMalformed):
				b.clientError(c.log, "unreadable_frame", "closing connection: unreadable frame", "err", err)
			case errors.As(err, &ne) && ne.Timeout():
				c.log.Debug("closing connection: read timed out", "err", err)
			default:
				c.log.Debug("connection read ended", "err", err)
			}
			return
		}
		size := int64(cap(frame))
		req, err := wire.Decode(frame, supported)
		if err != nil {
			if req.Key == kmsg.ApiVersions.Int16() && errors.Is(err, wire.ErrUnsupportedVersion) {
				// Kafka answers an ApiVersions it cannot parse with a v0
				// response listing what it supports.
				c.log.Debug("ApiVersions version not supported; answering v0", "version", req.Version)
				resp := apiVersionsResponse(0)
				resp.ErrorCode = kerr.UnsupportedVersion.Code
				c.s.budget.Release(size)
				out <- pending{corr: req.CorrelationID, finish: func() kmsg.Response { return resp },
					key: req.Key, version: req.Version, start: time.Now()}
				continue
			}
			c.s.budget.Release(size)
			b.clientError(c.log, "bad_request", "closing connection: bad request", "api", wire.Name(req.Key), "version", req.Version, "err", err)
			return
		}
		if !b.ready(req.Header) {
			c.s.budget.Release(size)
			b.clientError(c.log, "not_ready", "closing connection: broker not ready for client traffic", "api", wire.Name(req.Key))
			return
		}
		start := time.Now()
		finish, ok := b.safeDispatch(c.ctx, c, req)
		if !ok {
			c.s.budget.Release(size)
			return
		}
		select {
		case out <- pending{corr: req.CorrelationID, finish: finish, size: size, key: req.Key, version: req.Version, start: start}:
		case <-c.ctx.Done():
			c.s.budget.Release(size)
			return
		}
	}
}

// firstChunk is the buffer a request body starts in; it grows (doubling)
// as bytes arrive, so a size prefix alone allocates nothing large.
const firstChunk = 64 << 10

// readFrame reads one size-prefixed request. Waiting for the size prefix is
// bounded by connections.max.idle.ms; once it is read, the whole frame
// must arrive within RequestReadTimeout. The frame's bytes are taken from
// the server's budget (queued.max.request.bytes) as they arrive, and stay
// taken until the request is answered (the caller releases cap(frame)).
func (c *conn) readFrame() ([]byte, error) {
	b := c.s.b
	// The idle deadline is moved at most every quarter of it (and at most
	// once a second): setting a deadline costs, and a busy connection reads
	// many requests a second.
	if now := time.Now(); c.strict || now.Sub(c.idleSet) > min(time.Second, b.cfg.ConnectionsMaxIdle/4) {
		c.deadline(b.cfg.ConnectionsMaxIdle)
		c.idleSet, c.strict = now, false
	}
	var size [4]byte
	if _, err := io.ReadFull(c.br, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > b.cfg.MaxFrame {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", wire.ErrFrameTooLarge, n, b.cfg.MaxFrame)
	}
	if n < 8 { // key, version, correlation id
		return nil, fmt.Errorf("%w: frame of %d bytes is shorter than a header", wire.ErrMalformed, n)
	}
	if c.br.Buffered() >= int(n) && c.s.budget.TryAcquire(int64(n), int64(n)) {
		// The whole frame has arrived and fits the budget: no wait, no
		// deadline to arm.
		buf := make([]byte, n)
		_, _ = io.ReadFull(c.br, buf) // from the buffer: cannot fail
		return buf, nil
	}
	c.deadline(b.cfg.RequestReadTimeout)
	c.strict = true // the next size prefix re-arms the idle deadline
	ctx, cancel := context.WithTimeout(c.ctx, b.cfg.RequestReadTimeout)
	defer cancel()
	var buf []byte
	for len(buf) < int(n) {
		grow := min(int(n), max(firstChunk, 2*cap(buf)))
		if grow > cap(buf) {
			if err := c.s.budget.Acquire(ctx, int64(n), int64(grow-cap(buf))); err != nil {
				c.s.budget.ReleaseOf(int64(n), int64(cap(buf)))
				return nil, fmt.Errorf("waiting for queued.max.request.bytes: %w", timeoutErr{err})
			}
			nb := make([]byte, len(buf), grow)
			copy(nb, buf)
			buf = nb
		}
		k, err := io.ReadFull(c.br, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil {
			c.s.budget.ReleaseOf(int64(n), int64(cap(buf)))
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// metricLabels keeps the request metrics' labels a closed set: a key this
// broker does not serve is -1 ("unknown"), a version outside the key's
// served range -1 ("unsupported"), whatever a client sends.
func metricLabels(key, version int16) (int16, int16) {
	r, ok := supported(key)
	if !ok {
		return -1, -1
	}
	if version < r.Min || version > r.Max {
		return key, -1
	}
	return key, version
}

// timeoutErr marks a budget wait that ended with the read deadline.
type timeoutErr struct{ err error }

func (e timeoutErr) Error() string   { return e.err.Error() }
func (e timeoutErr) Unwrap() error   { return e.err }
func (e timeoutErr) Timeout() bool   { return true }
func (e timeoutErr) Temporary() bool { return false }

// write sends responses in request order. Runs on its own goroutine, owned by
// the connection.
func (c *conn) write(in <-chan pending, done chan<- struct{}) {
	defer close(done)
	var buf []byte
	broken := false
	for p := range in {
		resp, ok := c.s.b.safeFinish(c, p)
		if !ok && !broken {
			broken = true
			c.cancel() // nothing more is sent on this connection
			c.stopReading()
		}
		c.s.budget.Release(p.size)
		key, version := metricLabels(p.key, p.version)
		c.s.b.cfg.Metrics.Request(key, version, resp, time.Since(p.start))
		if resp == nil || broken {
			continue
		}
		buf = wire.AppendResponse(buf[:0], p.corr, resp)
		if _, err := c.nc.Write(buf); err != nil {
			c.log.Debug("connection write failed", "err", err)
			broken = true
			c.cancel() // pending long polls end early; nothing more is sent
			c.stopReading()
		}
		if cap(buf) > 64<<20 { // keep a buffer for large fetches, not a huge one
			buf = nil
		}
	}
}

// clientHost is the client's address as Kafka reports it ("/127.0.0.1").
func (c *conn) clientHost() string {
	if a, ok := c.nc.RemoteAddr().(*net.TCPAddr); ok {
		return "/" + a.IP.String()
	}
	return "/" + c.nc.RemoteAddr().String()
}

func splitHostPort(addr string) (string, int32, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		return "", 0, err
	}
	return h, int32(n), nil
}
