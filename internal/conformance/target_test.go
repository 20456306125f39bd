package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/kafkaref"
	"github.com/kaas-dev/kaas/internal/proctest"
	"github.com/kaas-dev/kaas/internal/wiretap"
)

// harnessClient is the client id of the suite's own admin client: its
// group requests (the offset sampler's OffsetFetch, FindCoordinator) are
// not the members' and the taps' recorder leaves them out.
const harnessClient = "conformance-harness"

// node is one broker process of the cluster under test.
type node interface {
	id() int32
	start() error
	kill() error                           // SIGKILL, waits for the exit
	terminate(timeout time.Duration) error // SIGTERM; must exit 0 by itself
	stop() error                           // SIGSTOP
	cont() error                           // SIGCONT
	running() bool
	stopped() bool
}

// cluster is the cluster under test: three broker processes, each behind a
// wire tap on 127.0.0.1 whose address it advertises, so that every client
// connection goes through a tap and the recorder sees the group's answers.
type cluster struct {
	kaas      *proctest.Cluster // the kaas processes; nil for another target
	nodes     []*tapped
	rec       *wiretap.Recorder
	deadAfter time.Duration // the brokers' liveness timeout
	replicas  int16         // the test topic's replication factor
	// controller names the node acting as controller.
	controller func(ctx context.Context, cl *kgo.Client) (int32, error)
}

// tapped is a node and its tap: the tap goes down with the process (a
// killed or stopped broker refuses connections and its open ones end) and
// up before it starts, so the clients see what they would without it.
type tapped struct {
	n   node
	tap *wiretap.Tap
}

func (b *tapped) id() int32     { return b.n.id() }
func (b *tapped) running() bool { return b.n.running() }
func (b *tapped) stopped() bool { return b.n.stopped() }
func (b *tapped) stop() error   { return b.n.stop() }
func (b *tapped) cont() error   { return b.n.cont() }

func (b *tapped) start() error {
	if err := b.tap.Up(); err != nil {
		return err
	}
	return b.n.start()
}

func (b *tapped) kill() error {
	err := b.n.kill()
	b.tap.Down()
	return err
}

func (b *tapped) terminate(timeout time.Duration) error {
	err := b.n.terminate(timeout)
	b.tap.Down()
	return err
}

func (c *cluster) node(id int32) *tapped {
	for _, b := range c.nodes {
		if b.id() == id {
			return b
		}
	}
	return nil
}

// addrs are the taps' addresses, what clients bootstrap from.
func (c *cluster) addrs() []string {
	var out []string
	for _, b := range c.nodes {
		out = append(out, b.tap.Addr())
	}
	return out
}

// decodeFailures sums the taps' frames not decoded.
func (c *cluster) decodeFailures() int64 {
	var n int64
	for _, b := range c.nodes {
		n += b.tap.DecodeFailures()
	}
	return n
}

// startTaps starts one tap per broker address on the given ports; their
// decode failures are logged to dir/taps.log.
func startTaps(t *testing.T, dir string, targets []string, ports []int, rec *wiretap.Recorder) []*wiretap.Tap {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lf, err := os.OpenFile(filepath.Join(dir, "taps.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lf.Close() })
	log := slog.New(slog.NewJSONHandler(lf, nil))
	var taps []*wiretap.Tap
	for i, target := range targets {
		tap, err := wiretap.Start(wiretap.Config{Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Target: target,
			Broker: int32(i), Observe: rec.Observe, Logger: log})
		if err != nil {
			t.Fatalf("tap for broker %d: %v", i, err)
		}
		t.Cleanup(tap.Close)
		taps = append(taps, tap)
	}
	return taps
}

// procNode is a broker process run by proctest: a kaas broker, or a node
// of the Kafka reference cluster (kafkaref).
type procNode struct{ b *proctest.Broker }

func (k procNode) id() int32                       { return k.b.ID }
func (k procNode) start() error                    { return k.b.Start() }
func (k procNode) kill() error                     { return k.b.Kill() }
func (k procNode) terminate(d time.Duration) error { return k.b.Terminate(d) }
func (k procNode) stop() error                     { return k.b.Stop() }
func (k procNode) cont() error                     { return k.b.Cont() }
func (k procNode) running() bool                   { return k.b.Running() }
func (k procNode) stopped() bool                   { return k.b.Stopped() }

// startKaas starts three kaas processes, each advertising its tap.
func startKaas(t *testing.T, opts proctest.Options, dir, group string) *cluster {
	t.Helper()
	opts.Brokers, opts.LogDir = 3, filepath.Join(dir, "brokers")
	ports := make([]int, opts.Brokers)
	for i := range ports {
		ports[i] = proctest.FreePort(t)
		opts.Advertise = append(opts.Advertise, fmt.Sprintf("127.0.0.1:%d", ports[i]))
	}
	pc := proctest.New(t, opts)
	rec := wiretap.NewRecorder(group, harnessClient)
	taps := startTaps(t, dir, pc.Addrs(), ports, rec)
	c := &cluster{kaas: pc, rec: rec, deadAfter: pc.Opts.DeadAfter, replicas: 1,
		controller: func(ctx context.Context, cl *kgo.Client) (int32, error) {
			return pc.Controller(ctx, kadm.NewClient(cl))
		}}
	for i, b := range pc.Brokers {
		c.nodes = append(c.nodes, &tapped{n: procNode{b}, tap: taps[i]})
	}
	if err := pc.StartAll(); err != nil {
		t.Fatal(err)
	}
	return c
}

// reference reports whether KAAS_CONFORMANCE_TARGET=kafka asks for the
// Apache Kafka reference cluster instead of kaas.
func reference() bool { return os.Getenv("KAAS_CONFORMANCE_TARGET") == "kafka" }

// targetName names the cluster under test in the results.
func targetName() string {
	if reference() {
		return "Apache Kafka " + kafkaref.Version + " (reference)"
	}
	return "kaas"
}

// needKafka skips (fails in CI) when the reference cluster cannot run.
func needKafka(t *testing.T) {
	if err := kafkaref.Available(); err != nil {
		missing(t, "Apache Kafka "+kafkaref.Version, err)
	}
}

// startKafka starts the reference cluster (internal/kafkaref: three KRaft
// nodes, settings made fair in scripts/kafka-reference.sh), each node
// advertising its tap.
func startKafka(t *testing.T, dir, group string) *cluster {
	t.Helper()
	needKafka(t)
	ports := make([]int, 3)
	var adv []string
	for i := range ports {
		ports[i] = proctest.FreePort(t)
		adv = append(adv, fmt.Sprintf("127.0.0.1:%d", ports[i]))
	}
	kc := kafkaref.Start(t, kafkaref.Options{Dir: filepath.Join(t.TempDir(), "kafka"), LogDir: filepath.Join(dir, "brokers"), Advertise: adv})
	rec := wiretap.NewRecorder(group, harnessClient)
	taps := startTaps(t, dir, kc.Addrs(), ports, rec)
	c := &cluster{rec: rec, deadAfter: kafkaref.DeadAfter, replicas: 3, controller: kafkaref.Controller}
	for i, b := range kc.Brokers {
		c.nodes = append(c.nodes, &tapped{n: procNode{b}, tap: taps[i]})
	}
	return c
}
