package broker

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/metrics"
	"github.com/kaas-dev/kaas/internal/testutil"
)

// Defect: every bad request a client sent logged a WARN line, with no
// bound: a client could fill the broker's log. Client errors are now
// logged at most once a second (with how many were left out) and all
// counted in kaas_client_errors_total.
func TestClientErrorsAreCountedAndTheirLogLinesBounded(t *testing.T) {
	logs := &testutil.LockedBuffer{}
	m := metrics.New()
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.Metrics = m
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	const sent = 200
	start := time.Now()
	bad := kmsg.NewPtrFetchRequest()
	bad.SetVersion(2) // not served: the connection is closed
	for i := range sent {
		c := dial(t, b)
		if _, err := c.Write(rawFrame(bad, int32(i))); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c)
	}
	// One line a second at most, however long the 200 took here.
	lines := strings.Count(logs.String(), "closing connection: bad request")
	if bound := int(time.Since(start)/time.Second) + 2; lines > bound {
		t.Fatalf("%d bad requests in %v logged %d WARN lines (at most %d)", sent, time.Since(start).Round(time.Millisecond), lines, bound)
	}
	counted := counterTotal(t, m, "kaas_client_errors_total")
	if counted != sent {
		t.Fatalf("kaas_client_errors_total counted %v of %d", counted, sent)
	}
}

// counterTotal sums every series of the counter name in m.
func counterTotal(t *testing.T, m *metrics.Broker, name string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, s := range f.GetMetric() {
				total += s.GetCounter().GetValue()
			}
		}
	}
	return total
}
