// Package wiretap is a test harness's view of the Kafka protocol between
// clients and one broker: a TCP forwarder (Tap) that passes every byte
// through unchanged, reads the request frames a client sends (api key,
// version, correlation id, client id, body), decodes the matching answers
// of the group APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
// OffsetCommit, OffsetFetch, TxnOffsetCommit, FindCoordinator) with
// franz-go's kmsg, and reports what each says about a group (error codes,
// the generation a join completed) as an Event. Recorder keeps the events
// of one group. The broker behind a tap may be kaas or Apache Kafka: the
// tap knows only the wire protocol, so a broker advertises the tap's
// address (kaas --advertise, Kafka's advertised.listeners) for clients to
// come back through it.
//
// A tap never changes the conversation: a frame it cannot decode is
// counted and logged, and the bytes flow on. Down mirrors a dead broker
// (nothing listens, every connection is reset), so a tap does not hide a
// fault from the clients.
//
// It owns the forwarders and their decoding; it imports no kaas package.
package wiretap

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Event is what one answer said about one group.
type Event struct {
	At       time.Time
	Broker   int32  // Config.Broker of the tap that saw it
	Key      int16  // the API
	ClientID string // the request's client id
	Group    string
	// Codes are the distinct non-zero error codes in the answer, wherever
	// the API puts them (top level, member, partition).
	Codes []int16
	// Generation is the generation a JoinGroup (from its answer) or a
	// SyncGroup (from its request) completed when answered without error;
	// -1 otherwise.
	Generation int32
}

// Config shapes a tap.
type Config struct {
	Listen  string // where clients connect, 127.0.0.1:port
	Target  string // the broker
	Broker  int32  // names the broker in events
	Observe func(Event)
	Logger  *slog.Logger     // decode failures; default: discard
	Now     func() time.Time // the clock of events; default time.Now
	// DialTimeout bounds the connection to the broker; default 5s.
	DialTimeout time.Duration
}

// maxPending bounds the tracked requests one connection may have waiting
// for answers; past it the oldest are forgotten (and counted as failures).
const maxPending = 4096

// Tap is one forwarder. Its methods are safe for concurrent use.
type Tap struct {
	cfg      Config
	failures atomic.Int64

	mu    sync.Mutex // guards ln, conns, closed
	ln    net.Listener
	conns map[*conn]struct{}
	wg    sync.WaitGroup // accept loops and connections
	// closed: Close was called; Up does nothing more.
	closed bool
}

// Start listens on cfg.Listen and forwards every connection to cfg.Target.
func Start(cfg Config) (*Tap, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Observe == nil {
		cfg.Observe = func(Event) {}
	}
	t := &Tap{cfg: cfg, conns: map[*conn]struct{}{}}
	if err := t.Up(); err != nil {
		return nil, err
	}
	return t, nil
}

// Addr is the address clients connect to.
func (t *Tap) Addr() string { return t.cfg.Listen }

// DecodeFailures counts frames the tap could not decode (each also
// logged); the bytes were forwarded all the same.
func (t *Tap) DecodeFailures() int64 { return t.failures.Load() }

// Up listens again after Down (a restarted broker); listening already is
// no error.
func (t *Tap) Up() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("wiretap: tap closed")
	}
	if t.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", t.cfg.Listen)
	if err != nil {
		return err
	}
	t.ln = ln
	t.wg.Add(1)
	go t.accept(ln)
	return nil
}

// Down stops listening and resets every connection, as a broker killed or
// gone is seen: new connections are refused, open ones end.
func (t *Tap) Down() {
	t.mu.Lock()
	ln := t.ln
	t.ln = nil
	conns := t.conns
	t.conns = map[*conn]struct{}{}
	t.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for c := range conns {
		c.reset()
	}
}

// Close is Down for good; it waits for every connection's goroutines.
func (t *Tap) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.Down()
	t.wg.Wait()
}

func (t *Tap) accept(ln net.Listener) {
	defer t.wg.Done()
	for {
		cc, err := ln.Accept()
		if err != nil {
			return // closed by Down
		}
		bc, err := net.DialTimeout("tcp", t.cfg.Target, t.cfg.DialTimeout)
		if err != nil {
			// The broker is not there: the client sees a reset, as close
			// as a tap can come to a refused connection.
			resetConn(cc)
			continue
		}
		c := &conn{t: t, client: cc, broker: bc, pending: map[int32]call{}}
		t.mu.Lock()
		if t.ln != ln { // Down raced this accept
			t.mu.Unlock()
			c.reset()
			continue
		}
		t.conns[c] = struct{}{}
		t.wg.Add(2)
		t.mu.Unlock()
		go c.requests()
		go c.responses()
	}
}

func (t *Tap) forget(c *conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

func (t *Tap) fail(err error) {
	t.failures.Add(1)
	t.cfg.Logger.Warn("wiretap: frame not decoded", "broker", t.cfg.Broker, "err", err)
}

// conn is one client connection and its connection to the broker.
type conn struct {
	t              *Tap
	client, broker net.Conn
	once           sync.Once

	mu      sync.Mutex // guards pending, order
	pending map[int32]call
	order   []int32 // correlation ids in the order sent, to forget the oldest
}

// close ends both sides; the first end of either direction ends both, as
// one connection between client and broker would.
func (c *conn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.broker.Close()
		c.t.forget(c)
	})
}

// reset ends both sides with a reset (no lingering data).
func (c *conn) reset() {
	c.once.Do(func() {
		resetConn(c.client)
		resetConn(c.broker)
		c.t.forget(c)
	})
}

func resetConn(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	nc.Close()
}

// requests copies client → broker and notes each tracked request.
func (c *conn) requests() {
	defer c.t.wg.Done()
	defer c.close()
	sp := &splitter{prefix: 8,
		want: func(h []byte) bool {
			key, _, _, ok := requestHead(h)
			return ok && tracked(key)
		},
		frame: func(b []byte) {
			corr, cl, err := decodeRequest(b)
			if err != nil {
				c.t.fail(err)
				return
			}
			c.remember(corr, cl)
		},
		fail: c.t.fail,
	}
	pump(c.broker, c.client, sp, true)
}

// responses copies broker → client and decodes each answer to a tracked
// request.
func (c *conn) responses() {
	defer c.t.wg.Done()
	defer c.close()
	sp := &splitter{prefix: 4,
		want: func(h []byte) bool {
			if len(h) < 4 {
				return false
			}
			_, ok := c.peek(int32(uint32(h[0])<<24 | uint32(h[1])<<16 | uint32(h[2])<<8 | uint32(h[3])))
			return ok
		},
		frame: func(b []byte) {
			corr := int32(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
			cl, ok := c.take(corr)
			if !ok {
				return
			}
			resp, err := decodeResponse(b, cl)
			if err != nil {
				c.t.fail(err)
				return
			}
			at := c.t.cfg.Now()
			for _, ev := range events(cl.req, resp) {
				ev.At, ev.Broker, ev.Key, ev.ClientID = at, c.t.cfg.Broker, cl.req.Key(), cl.clientID
				c.t.cfg.Observe(ev)
			}
		},
		fail: c.t.fail,
	}
	pump(c.client, c.broker, sp, false)
}

func (c *conn) remember(corr int32, cl call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.order) >= maxPending {
		for _, old := range c.order[:maxPending/2] {
			if _, ok := c.pending[old]; ok {
				delete(c.pending, old)
				c.t.failures.Add(1)
			}
		}
		c.order = append(c.order[:0:0], c.order[maxPending/2:]...)
		c.t.cfg.Logger.Warn("wiretap: too many unanswered requests; forgot the oldest", "broker", c.t.cfg.Broker)
	}
	c.pending[corr] = cl
	c.order = append(c.order, corr)
}

func (c *conn) peek(corr int32) (call, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.pending[corr]
	return cl, ok
}

func (c *conn) take(corr int32) (call, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.pending[corr]
	delete(c.pending, corr)
	if len(c.pending) == 0 {
		c.order = c.order[:0]
	}
	return cl, ok
}

// pump copies src to dst until either side ends, feeding every chunk to
// sp: before writing it when before is set (a request is noted before the
// broker can answer it), after otherwise.
func pump(dst, src net.Conn, sp *splitter, before bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if before {
				sp.feed(buf[:n])
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if !before {
				sp.feed(buf[:n])
			}
		}
		if err != nil {
			return // EOF, a reset, or closed by Down
		}
	}
}
