package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/cluster"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metric returns the value of the sample of name whose labels include
// want, from the admin listener's /metrics (0 when there is none).
func metric(t *testing.T, base, name string, want map[string]string) float64 {
	t.Helper()
	_, body := get(t, base+"/metrics")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not the Prometheus text format: %v", err)
	}
	f, ok := fams[name]
	if !ok {
		return 0
	}
	sum := 0.0
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// TestAdminListenerServesMetricsAndHealth: a broker with --admin-listen
// answers /healthz and /readyz, and /metrics counts what clients did:
// requests by API and error, produced records and bytes, commits and their
// durable writes, fetched records, generations of a classic and a KIP-848
// group, groups by type and state, and the cluster it sees.
// /readyz turns 503 once the broker drains.
func TestAdminListenerServesMetricsAndHealth(t *testing.T) {
	n, err := Start(Config{Broker: broker.Config{ID: 0, DataDir: t.TempDir(), Listen: "127.0.0.1:0"},
		ReportInterval: 100 * time.Millisecond, DeadAfter: time.Second, PollInterval: 50 * time.Millisecond,
		AdminListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Kill()
	base := "http://" + n.AdminAddr()
	if code, body := get(t, base+"/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz of a serving broker: %d", code)
	}

	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr()), kgo.DefaultProduceTopic("m"), kgo.ConsumerGroup("mg"),
		kgo.ConsumeTopics("m"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, "m"); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	for got < 25 {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		fs := cl.PollFetches(pctx)
		expired := pctx.Err()
		cancel()
		if expired != nil {
			t.Fatalf("consumed %d of 25", got)
		}
		got += len(fs.Records())
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	// A KIP-848 member reads the topic too: a consumer group's epoch.
	cl848, err := kgo.NewClient(kgo.SeedBrokers(n.Addr()), kgo.ConsumerGroup("mg848"), kgo.ConsumeTopics("m"),
		kgo.ServerSideBalancer(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl848.Close()
	for got = 0; got < 25; {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		fs := cl848.PollFetches(pctx)
		expired := pctx.Err()
		cancel()
		if expired != nil {
			t.Fatalf("the KIP-848 member consumed %d of 25", got)
		}
		got += len(fs.Records())
	}
	// One refused request: Metadata for a topic that does not exist.
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("no-such-topic")}}
	if _, err := mreq.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
		max    float64
	}{
		{"kaas_requests_total", map[string]string{"api": "Produce", "error": "NONE"}, 25, 1e9},
		{"kaas_requests_total", map[string]string{"api": "Metadata", "error": "UNKNOWN_TOPIC_OR_PARTITION"}, 1, 1e9},
		{"kaas_request_duration_seconds", map[string]string{"api": "Fetch"}, 1, 1e9},
		{"kaas_produce_records_total", nil, 25, 25},
		{"kaas_produce_bytes_total", nil, 25 * 60, 1e9},
		{"kaas_fetch_bytes_total", nil, 25 * 60, 1e9},
		{"kaas_fetch_records_total", nil, 50, 1e9},
		{"kaas_group_generations_total", map[string]string{"type": "classic"}, 1, 3},
		{"kaas_group_generations_total", map[string]string{"type": "consumer"}, 1, 3},
		{"kaas_groups", map[string]string{"type": "consumer", "state": "Stable"}, 1, 1},
		{"kaas_group_members", map[string]string{"type": "consumer"}, 1, 1},
		{"kaas_assignment_version", nil, 1, 1e9},
		{"kaas_assignment_apply_duration_seconds", nil, 1, 1e9},
		{"kaas_offset_commits_total", nil, 1, 2},
		{"kaas_durable_write_duration_seconds", map[string]string{"file": "log"}, 25, 1e9},
		{"kaas_durable_write_duration_seconds", map[string]string{"file": "group"}, 1, 1e9},
		{"kaas_groups", map[string]string{"type": "classic", "state": "Stable"}, 1, 1},
		{"kaas_group_members", map[string]string{"type": "classic"}, 1, 1},
		{"kaas_connections", nil, 1, 1e9},
		{"kaas_controller", nil, 1, 1},
		{"kaas_ready", nil, 1, 1},
		{"kaas_brokers", map[string]string{"health": "alive"}, 1, 1},
		{"kaas_partitions_led", nil, 2, 2},
		{"kaas_controller_epoch", nil, 1, 1e9},
		{"go_goroutines", nil, 1, 1e9},
	} {
		if v := metric(t, base, c.name, c.labels); v < c.min || v > c.max {
			t.Errorf("%s%v = %v, want %v..%v", c.name, c.labels, v, c.min, c.max)
		}
	}

	// Draining: not ready any more, still alive until it stops.
	done := make(chan error, 1)
	go func() { done <- n.Shutdown(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, base+"/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz while draining: %d %q", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("the admin listener still answers after the broker stopped")
	}
}

// gatedElector elects no one until open is closed, then elects through
// the volume like the default elector.
type gatedElector struct {
	open <-chan struct{}
	file *cluster.FileElector
}

func (e *gatedElector) Tick(ctx context.Context, now time.Time) (cluster.Election, error) {
	select {
	case <-e.open:
		return e.file.Tick(ctx, now)
	default:
		return cluster.Election{}, nil
	}
}

func (e *gatedElector) Resign(ctx context.Context) error { return e.file.Resign(ctx) }

// TestReadyzIsFalseUntilTheFirstAssignment: while no controller has
// published an assignment that lists the broker alive, /healthz answers
// 200 and /readyz 503 (the starting reason); once one is applied, /readyz
// answers 200.
func TestReadyzIsFalseUntilTheFirstAssignment(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminAddr := l.Addr().String()
	l.Close()
	file, err := cluster.NewFileElector(dir, Name(0), time.Second, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	open := make(chan struct{})
	type started struct {
		n   *Node
		err error
	}
	done := make(chan started, 1)
	go func() {
		n, err := Start(Config{Broker: broker.Config{ID: 0, DataDir: dir, Listen: "127.0.0.1:0"},
			ReportInterval: 100 * time.Millisecond, DeadAfter: time.Second, PollInterval: 50 * time.Millisecond,
			ReadyTimeout: time.Minute, Elector: &gatedElector{open: open, file: file}, AdminListen: adminAddr})
		done <- started{n, err}
	}()
	base := "http://" + adminAddr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin listener never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 5 { // several report intervals without a controller
		if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no applied assignment") {
			t.Fatalf("/readyz before any assignment: %d %q", code, body)
		}
		if v := metric(t, base, "kaas_ready", nil); v != 0 {
			t.Fatalf("kaas_ready before any assignment: %v", v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(open)
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	defer s.n.Kill()
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz once serving: %d %q", code, body)
	}
}
