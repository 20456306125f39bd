package broker

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/metrics"
	"github.com/kaas-dev/kaas/internal/testutil"
	"github.com/kaas-dev/kaas/internal/wire"
)

// Defect: a panic while handling one request crashed the whole broker (no
// handler recovered), so a request that panicked every time took down
// every broker a client retried it on. Now it closes that connection,
// counts in kaas_request_panics_total and logs its stack once per API;
// the broker keeps serving. ListGroups' handler is replaced by one that
// panics, while it handles the request and while it answers.
func TestAPanickingRequestClosesItsConnectionOnly(t *testing.T) {
	key := kmsg.ListGroups.Int16()
	orig := apis[key]
	t.Cleanup(func() { apis[key] = orig })
	logs := &testutil.LockedBuffer{}
	m := metrics.New()
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.Metrics = m
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	for _, where := range []string{"handling", "answering"} {
		apis[key] = api{versions: orig.versions, handle: func(b *Broker, ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
			if where == "handling" {
				panic("injected while handling")
			}
			return func() kmsg.Response { panic("injected while answering") }
		}}
		for i := range 3 {
			c := dial(t, b)
			if _, err := c.Write(rawFrame(kmsg.NewPtrListGroupsRequest(), int32(i))); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, c)
			stillServes(t, b)
		}
	}
	counted := counterTotal(t, m, "kaas_request_panics_total")
	if counted != 6 {
		t.Fatalf("kaas_request_panics_total: %v, want 6", counted)
	}
	if n := strings.Count(logs.String(), "stack="); n != 1 {
		t.Fatalf("%d stacks logged for one API, want 1:\n%s", n, logs.String())
	}
}
