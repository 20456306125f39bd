package broker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/volume"
)

// testLogger writes broker logs to the test log when -v, else discards.
func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newBroker makes a broker running alone over cfg.DataDir, with its own
// coordinator (closed when the test ends, after the broker) whose groups
// follow gc (nil: Kafka's defaults). Tests cannot use node (it imports this
// package), so this is node.StartSingle's assembly for tests.
func newBroker(t testing.TB, cfg Config, gc *group.Config) *Broker {
	t.Helper()
	g := group.DefaultConfig()
	if gc != nil {
		g = *gc
	}
	co, err := coord.OpenStandalone(cfg.DataDir, coord.Config{Me: volume.BrokerName(cfg.ID),
		Self: coord.Broker{ID: volume.BrokerName(cfg.ID), NodeID: cfg.ID}, Logger: cfg.Logger, Now: cfg.Now, Group: g})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	cfg.Coordinator = co
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startBroker runs a broker on a loopback port over dir until the test ends.
func startBroker(t testing.TB, dir string, mod func(*Config)) *Broker {
	t.Helper()
	return startGroupBroker(t, dir, nil, mod)
}

// startGroupBroker is startBroker with its groups following gc.
func startGroupBroker(t testing.TB, dir string, gc *group.Config, mod func(*Config)) *Broker {
	t.Helper()
	cfg := Config{ID: 0, DataDir: dir, Listen: "127.0.0.1:0", Logger: testLogger(t)}
	if mod != nil {
		mod(&cfg)
	}
	b := newBroker(t, cfg, gc)
	if err := b.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- b.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return b
}

// stop closes a broker early (a restart within one test).
func stop(t testing.TB, b *Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func client(t testing.TB, b *Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createTopic(t testing.TB, cl *kgo.Client, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, configs, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
	}
}

// consume reads until n records arrived or the timeout passes.
func consume(t testing.TB, b *Broker, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := client(t, b, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before timeout", len(out), n)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Logf("fetch error %s/%d: %v", topic, p, err)
		})
		out = append(out, fs.Records()...)
	}
	return out
}

func produceN(t testing.TB, cl *kgo.Client, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprintf("value-%d", i))})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}
