package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

// server owns the listener and the open connections.
type server struct {
	b  *Broker
	ln net.Listener

	mu      sync.Mutex // guards conns, closing
	conns   map[*conn]struct{}
	closing bool

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
	b.srv = &server{b: b, ln: ln, conns: map[*conn]struct{}{}}
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

// Serve accepts connections until Close. It returns nil after a graceful stop.
func (b *Broker) Serve() error {
	b.srvMu.Lock()
	s := b.srv
	b.srvMu.Unlock()
	if s == nil {
		return errors.New("broker: Serve before Listen")
	}
	s.wg.Add(1)
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return fmt.Errorf("broker: accept: %w", err)
		}
		c := &conn{s: s, nc: nc, log: b.log.With("remote", nc.RemoteAddr().String())}
		c.ctx, c.cancel = context.WithCancel(b.ctx)
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
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
	log    *slog.Logger
	ctx    context.Context // cancelled on hard stop
	cancel context.CancelFunc

	stopOnce sync.Once
}

// pending is a request whose response the writer still has to send.
type pending struct {
	corr   int32
	finish func() kmsg.Response // nil response: send nothing (acks=0)
}

func (c *conn) stopReading() {
	c.stopOnce.Do(func() { _ = c.nc.SetReadDeadline(time.Unix(1, 0)) })
}

func (c *conn) serve() {
	defer c.s.wg.Done()
	defer func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
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

// read decodes requests until EOF, a bad frame, or shutdown.
func (c *conn) read(out chan<- pending) {
	b := c.s.b
	for {
		frame, err := wire.ReadFrame(c.nc, b.cfg.MaxFrame, nil)
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			case errors.Is(err, wire.ErrFrameTooLarge), errors.Is(err, wire.ErrMalformed):
				c.log.Warn("closing connection: unreadable frame", "err", err)
			default:
				var ne net.Error
				if !(errors.As(err, &ne) && ne.Timeout()) {
					c.log.Debug("connection read ended", "err", err)
				}
			}
			return
		}
		req, err := wire.Decode(frame)
		if err != nil {
			if req.Key == kmsg.ApiVersions.Int16() && errors.Is(err, wire.ErrUnsupportedVersion) {
				// Kafka answers an ApiVersions it cannot parse with a v0
				// response listing what it supports.
				c.log.Debug("ApiVersions version not supported; answering v0", "version", req.Version)
				resp := apiVersionsResponse(0)
				resp.ErrorCode = kerr.UnsupportedVersion.Code
				out <- pending{corr: req.CorrelationID, finish: func() kmsg.Response { return resp }}
				continue
			}
			c.log.Warn("closing connection: bad request", "api", wire.Name(req.Key), "version", req.Version, "err", err)
			return
		}
		if !b.ready(req.Header) {
			c.log.Warn("closing connection: broker not ready for client traffic", "api", wire.Name(req.Key))
			return
		}
		finish := b.dispatch(c.ctx, c, req)
		select {
		case out <- pending{corr: req.CorrelationID, finish: finish}:
		case <-c.ctx.Done():
			return
		}
	}
}

// write sends responses in request order. Runs on its own goroutine, owned by
// the connection.
func (c *conn) write(in <-chan pending, done chan<- struct{}) {
	defer close(done)
	var buf []byte
	broken := false
	for p := range in {
		resp := p.finish()
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
