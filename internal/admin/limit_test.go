package admin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defect: the admin listener took every connection offered and kept
// keep-alive ones for a minute: 188 of them used up the process's file
// descriptors (ulimit -n 200), and liveness reports, elections and Kafka
// requests failed with "too many open files". It now holds at most
// MaxConnections and closes the ones over it at once.
func TestAdminListenerHoldsAtMostItsConnectionLimit(t *testing.T) {
	s, err := Listen("127.0.0.1:0", Options{Registry: prometheus.NewRegistry(), Ready: func() (bool, string) { return true, "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	var held []net.Conn
	for range MaxConnections {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(200 * time.Millisecond) // all accepted
	over, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("a connection over the limit was kept: %v", err)
	}
	held[0].Close()
	time.Sleep(100 * time.Millisecond)
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + s.Addr() + "/healthz")
	if err != nil {
		t.Fatalf("healthz once a connection was freed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %s", resp.Status)
	}
	for _, c := range held[1:] {
		c.Close()
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}
