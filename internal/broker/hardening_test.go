package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/storage"
)

// Regression tests of issue 12: no client can take a broker down.

// failingListener fails Accept n times with EMFILE, as a process out of
// file descriptors sees it, then accepts normally.
type failingListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

func TestFailedAcceptDoesNotEndTheBroker(t *testing.T) {
	b := newBroker(t, Config{ID: 0, DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: testLogger(t)}, nil)
	if err := b.Listen(); err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: b.srv.ln}
	fl.fails.Store(8)
	b.srv.ln = fl
	served := make(chan error, 1)
	go func() { served <- b.Serve() }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.Close(ctx)
		<-served
	}()
	cl := client(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl); err != nil {
		t.Fatalf("request after 8 failed accepts: %v", err)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned after failed accepts: %v", err)
	default:
	}
}

// dialFrom opens a raw connection to b from a given loopback address.
func dialFrom(t *testing.T, b *Broker, local string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the broker closes c within d (a read ends
// in EOF or a reset, not in the client's own deadline).
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	var buf [64]byte
	for {
		_, err := c.Read(buf[:])
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

func TestLengthPrefixAloneAllocatesNothing(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const conns = 30
	var wg sync.WaitGroup
	for range conns {
		c := dialFrom(t, b, "")
		var prefix [4]byte
		binary.BigEndian.PutUint32(prefix[:], 100<<20) // "100 MiB follow"
		if _, err := c.Write(prefix[:]); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(200 * time.Millisecond)
			c.Close()
		}()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Fatalf("%d size prefixes of 100 MiB allocated %d MiB", conns, grew>>20)
	}
}

func TestIdleAndStalledConnectionsAreClosed(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.ConnectionsMaxIdle = 300 * time.Millisecond
		c.RequestReadTimeout = 300 * time.Millisecond
	})
	silent := dialFrom(t, b, "")
	half := dialFrom(t, b, "")
	half.Write([]byte{0, 0})
	truncated := dialFrom(t, b, "")
	truncated.Write([]byte{0, 0, 0, 100, 0, 18, 0})
	slow := dialFrom(t, b, "")
	slow.Write([]byte{0, 0, 0, 100})
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 50 ms: never a whole request in time
		for i := 0; i < 99; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := slow.Write([]byte{0}); err != nil {
				return
			}
		}
	}()
	for name, c := range map[string]net.Conn{"silent": silent, "half a size prefix": half,
		"truncated frame": truncated, "one byte at a time": slow} {
		if !closedWithin(c, 5*time.Second) {
			t.Errorf("%s: connection still open after 5 s", name)
		}
	}
	// A client that keeps sending requests is never idle.
	cl := client(t, b)
	for range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
		cancel()
		if err != nil {
			t.Fatalf("active client: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestConnectionLimitsRefuseOnlyTheExcess(t *testing.T) {
	t.Run("max.connections.per.ip", func(t *testing.T) {
		b := startBroker(t, t.TempDir(), func(c *Config) { c.MaxConnectionsPerIP = 3 })
		var conns []net.Conn
		for range 8 {
			conns = append(conns, dialFrom(t, b, "127.0.0.2"))
		}
		refused := 0
		for _, c := range conns {
			if closedWithin(c, 300*time.Millisecond) {
				refused++
			}
		}
		if refused != 5 {
			t.Fatalf("%d of 8 connections from one address refused with max.connections.per.ip=3, want 5", refused)
		}
		// Another address is not affected.
		cl := client(t, b)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl); err != nil {
			t.Fatalf("client from another address: %v", err)
		}
	})
	t.Run("max.connections", func(t *testing.T) {
		b := startBroker(t, t.TempDir(), func(c *Config) { c.MaxConnections = 4 })
		var conns []net.Conn
		for range 4 {
			conns = append(conns, dialFrom(t, b, ""))
		}
		for _, c := range conns {
			if closedWithin(c, 100*time.Millisecond) {
				t.Fatal("a connection within max.connections was closed")
			}
		}
		extra := dialFrom(t, b, "")
		if !closedWithin(extra, 2*time.Second) {
			t.Fatal("a connection over max.connections was kept")
		}
		conns[0].Close()
		time.Sleep(100 * time.Millisecond)
		again := dialFrom(t, b, "")
		if closedWithin(again, 300*time.Millisecond) {
			t.Fatal("a connection was refused after one closed")
		}
	})
}

func TestRequestBytesInFlightAreBounded(t *testing.T) {
	// queued.max.request.bytes of one frame: a client that sends most of a
	// large frame and stops holds the budget until its read times out; the
	// other clients' requests wait for room, then are served.
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.MaxFrame = 4 << 20
		c.QueuedMaxRequestBytes = 4 << 20
		c.RequestReadTimeout = time.Second
	})
	hog := dialFrom(t, b, "")
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], 4<<20)
	hog.Write(prefix[:])
	hog.Write(make([]byte, 3<<20))
	time.Sleep(100 * time.Millisecond)
	cl := client(t, b, kgo.RequestTimeoutOverhead(10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl); err != nil {
		t.Fatalf("request while the budget was held: %v", err)
	}
	t.Logf("served after %v", time.Since(start).Round(time.Millisecond))
	if !closedWithin(hog, 5*time.Second) {
		t.Fatal("the stalled large request kept its connection")
	}
	_, _ = io.Copy(io.Discard, hog)
}

func TestClientMessagesShowNoFilePaths(t *testing.T) {
	disk := fmt.Errorf("storage: append orders/0: %w", &os.PathError{Op: "write", Path: "/data/orders/0/00000000000000000000.log", Err: syscall.ENOSPC})
	for _, err := range []error{disk, fmt.Errorf("offsets: write %q: %w", "g", &os.PathError{Op: "rename", Path: "/data/__cluster/x", Err: syscall.EIO})} {
		for _, e := range []*kerr.Error{storageError(err), coordError(err)} {
			if msg := clientMessage(e, err); strings.Contains(msg, "/data") {
				t.Errorf("%s: client message %q shows a path", e.Message, msg)
			}
		}
	}
	refusal := fmt.Errorf("%w: record of 2000000 bytes", storage.ErrTooLarge)
	if e := storageError(refusal); clientMessage(e, refusal) != refusal.Error() {
		t.Errorf("a refusal's explanation was dropped: %q", clientMessage(e, refusal))
	}
}
