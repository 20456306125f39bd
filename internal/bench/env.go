package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/node"
)

// Target is one running Kafka-compatible cluster a goal can drive.
type Target struct {
	Name    string   // "kaas", "kaas-tmpfs", "kfake", "kafka"
	Addrs   []string // bootstrap addresses, all on 127.0.0.1
	DataDir string   // the volume of a kaas target; "" for kfake and Kafka
	Durable bool     // acks=all waits for an fsync that reaches a disk
	// Replication is the replication factor of the topics a goal creates:
	// 0 means 1 (kaas and kfake keep one copy); -1 is the cluster's
	// default.replication.factor (Kafka, whose durability is its replicas).
	Replication int16
}

// Env is what one run gives its goals. The Runner owns it: targets started
// through it are closed when the run ends.
type Env struct {
	// Kaas is one kaas broker on the data dir (durable).
	Kaas Target
	// KaasMem is one kaas broker with its data dir on tmpfs (/dev/shm), the
	// in-memory twin compared with kfake; nil when no tmpfs is available.
	KaasMem *Target
	// Kfake is franz-go's in-memory kfake with one broker.
	Kfake Target
	// Kafka is an Apache Kafka cluster the run was given (kaas-bench
	// --kafka), measured beside kaas where the rows compare like with like;
	// nil without one. KafkaDesc says what it is (brokers, replication,
	// flush policy), as read from the cluster.
	Kafka     *Target
	KafkaDesc string

	DataDir     string        // the volume under test (limits and Kaas live under it)
	Duration    time.Duration // how long each throughput measurement runs
	Concurrency []int         // producer/committer counts to sweep
	Log         *slog.Logger

	mu          sync.Mutex // guards closers, limits, groupTarget
	closers     []func()
	limits      *Limits
	groupTarget *Target // see GroupTarget
}

// EnvConfig configures NewEnv.
type EnvConfig struct {
	DataDir     string // required: a directory on the volume under test
	Duration    time.Duration
	Concurrency []int
	Log         *slog.Logger
	NoTmpfs     bool     // skip the kaas-on-tmpfs target
	Kafka       []string // bootstrap addresses of an Apache Kafka cluster; none: no Kafka column
}

// NewEnv starts the three standard targets. Close stops them.
func NewEnv(ctx context.Context, cfg EnvConfig) (*Env, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("bench: data dir is required")
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Second
	}
	if len(cfg.Concurrency) == 0 {
		cfg.Concurrency = []int{1, 8, 64}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	e := &Env{DataDir: cfg.DataDir, Duration: cfg.Duration, Concurrency: cfg.Concurrency, Log: cfg.Log}
	var err error
	if e.Kaas, err = e.StartKaas(ctx, "kaas", filepath.Join(cfg.DataDir, "kaas"), nil); err != nil {
		e.Close()
		return nil, err
	}
	if !cfg.NoTmpfs {
		if shm, ok := TmpfsDir(); ok {
			dir, err := os.MkdirTemp(shm, "kaas-bench-")
			if err == nil {
				e.onClose(func() { os.RemoveAll(dir) })
				t, err := e.StartKaas(ctx, "kaas-tmpfs", dir, nil)
				if err != nil {
					e.Close()
					return nil, err
				}
				e.KaasMem = &t
			}
		}
	}
	if e.Kfake, err = e.StartKfake("kfake"); err != nil {
		e.Close()
		return nil, err
	}
	if len(cfg.Kafka) > 0 {
		t := Target{Name: "kafka", Addrs: cfg.Kafka, Replication: -1}
		if e.KafkaDesc, err = DescribeKafka(ctx, t); err != nil {
			e.Close()
			return nil, err
		}
		e.Settle() // the new __consumer_offsets' files, before the limits are measured
		e.Kafka = &t
	}
	return e, nil
}

// LoopbackAddrs parses a comma-separated list of host:port addresses and
// refuses any that is not on loopback: the benchmark's load goes to this
// machine only.
func LoopbackAddrs(list string) ([]string, error) {
	var addrs []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", a, err)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return nil, fmt.Errorf("%q: port %q is not a number", a, port)
		}
		ip, err := netip.ParseAddr(host)
		if host == "localhost" {
			ip, err = netip.MustParseAddr("127.0.0.1"), nil
		}
		if err != nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("%q: not a loopback address (127.0.0.0/8, ::1 or localhost)", a)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// Settle is called after each measurement on Kafka: Kafka acknowledges
// writes from the page cache and leaves them for the kernel to write back
// (and keeps a deleted topic's files for a minute), so without it the
// gigabytes a Kafka produce run leaves dirty are written while the next
// kaas measurement fsyncs, and that measurement pays for them. sync(2)
// puts them on disk before the run goes on.
func (e *Env) Settle() {
	t0 := time.Now()
	syncAll()
	e.Log.Debug("bench: page cache written back after a kafka measurement", "took", time.Since(t0))
}

// waitGroupCoordinator waits until the cluster names a group coordinator:
// a fresh Kafka cluster creates __consumer_offsets on the first
// FindCoordinator and answers COORDINATOR_NOT_AVAILABLE until its
// partitions have leaders, which no goal should measure.
func waitGroupCoordinator(ctx context.Context, adm *kadm.Client) error {
	for {
		err := adm.FindGroupCoordinators(ctx, "kaas-bench-warm-up").Error()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: kafka names no group coordinator: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// DescribeKafka says what the cluster at t is, read from it: its brokers and
// the settings that decide what an acknowledged write means (replication,
// min.insync.replicas, flush policy). It fails when the cluster does not
// answer, so that a run given a wrong address stops before measuring, and
// returns once the cluster names a group coordinator.
func DescribeKafka(ctx context.Context, t Target) (string, error) {
	cl, err := kgo.NewClient(ClientOpts(t)...)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(cctx)
	if err != nil {
		return "", fmt.Errorf("bench: kafka at %s: %w", strings.Join(t.Addrs, ","), err)
	}
	if len(md.Brokers) == 0 {
		return "", fmt.Errorf("bench: kafka at %s lists no broker", strings.Join(t.Addrs, ","))
	}
	desc := fmt.Sprintf("%d brokers at %s", len(md.Brokers), strings.Join(t.Addrs, ", "))
	if len(md.Brokers) == 1 {
		desc = "1 broker at " + strings.Join(t.Addrs, ", ")
	}
	// The clients follow the addresses the brokers advertise: those must
	// be on loopback too.
	for _, b := range md.Brokers {
		if _, err := LoopbackAddrs(net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))); err != nil {
			return "", fmt.Errorf("bench: kafka broker %d advertises %w", b.NodeID, err)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := waitGroupCoordinator(wctx, adm); err != nil {
		return "", err
	}
	rcs, err := adm.DescribeBrokerConfigs(cctx, md.Brokers[0].NodeID)
	if err != nil {
		return desc, nil // the figures stand without the settings
	}
	want := []string{"default.replication.factor", "min.insync.replicas", "log.flush.interval.messages"}
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		for _, name := range want {
			for _, c := range rc.Configs {
				if c.Key == name {
					desc += fmt.Sprintf(", %s %s", name, c.MaybeValue())
				}
			}
		}
		break
	}
	return desc, nil
}

func (e *Env) onClose(f func()) {
	e.mu.Lock()
	e.closers = append(e.closers, f)
	e.mu.Unlock()
}

// Close stops every target started through e, last started first.
func (e *Env) Close() {
	e.mu.Lock()
	cs := e.closers
	e.closers = nil
	e.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// StartKaas starts one more kaas broker on dir (node.StartSingle), closed
// with e. gc, if not nil, is its groups' configuration.
func (e *Env) StartKaas(ctx context.Context, name, dir string, gc *group.Config) (Target, error) {
	s, err := node.StartSingle(broker.Config{ID: 0, DataDir: dir, Listen: "127.0.0.1:0", Logger: e.Log.With("target", name)}, gc)
	if err != nil {
		return Target{}, fmt.Errorf("bench: start %s: %w", name, err)
	}
	e.onClose(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			e.Log.Warn("close kaas", "target", name, "err", err)
		}
	})
	tmpfs := IsTmpfs(dir)
	return Target{Name: name, Addrs: []string{s.Addr()}, DataDir: dir, Durable: !tmpfs}, nil
}

// StartKfake starts one more kfake cluster with one broker (kaas runs one
// broker too), closed with e. opts are appended to the defaults.
func (e *Env) StartKfake(name string, opts ...kfake.Opt) (Target, error) {
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		return Target{}, fmt.Errorf("bench: start %s: %w", name, err)
	}
	e.onClose(c.Close)
	return Target{Name: name, Addrs: c.ListenAddrs()}, nil
}

// Versions is the protocol version table every load generator is pinned to:
// the client's stable table capped at what kaas advertises, so that kaas and
// kfake are driven with the same request versions.
func Versions() *kversion.Versions {
	v := kversion.Stable()
	for _, k := range broker.SupportedVersions() {
		if cur, ok := v.LookupMaxKeyVersion(k.ApiKey); ok && cur > k.MaxVersion {
			v.SetMaxKeyVersion(k.ApiKey, k.MaxVersion)
		}
	}
	return v
}

// ClientOpts are the options of every benchmark client against t: the same
// for every target, with extra appended.
func ClientOpts(t Target, extra ...kgo.Opt) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(t.Addrs...),
		kgo.MaxVersions(Versions()),
		kgo.ClientID("kaas-bench"),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RequestRetries(3),
		kgo.RetryTimeout(10 * time.Second),
	}
	return append(opts, extra...)
}

// Limits returns the raw limits, measuring them on first use so that every
// goal of one run compares with the same figures.
func (e *Env) Limits(ctx context.Context) (*Limits, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.limits != nil {
		return e.limits, nil
	}
	l, err := MeasureLimits(ctx, filepath.Join(e.DataDir, "limits"), e.limitWindow())
	if err != nil {
		return nil, err
	}
	e.limits = l
	return l, nil
}

// limitWindow is how long each raw limit is sampled: the run's duration,
// capped at 2 s (the limits are stable well before that).
func (e *Env) limitWindow() time.Duration {
	return min(e.Duration, 2*time.Second)
}

// GroupTarget returns the in-memory kaas target of the group goals: a kaas
// broker on tmpfs whose initial rebalance delay is 0, because kfake has no
// such delay and rebalances are compared with the delay at 0 on both sides
// (docs/performance: the peer). It starts on first use and is shared by the
// goals of the run. Without tmpfs it runs on the data dir (Durable is then
// true and the goals say so).
func (e *Env) GroupTarget(ctx context.Context) (Target, error) {
	e.mu.Lock()
	if e.groupTarget != nil {
		t := *e.groupTarget
		e.mu.Unlock()
		return t, nil
	}
	e.mu.Unlock()
	dir, err := e.ScratchDir(true, "kaas-groups-")
	if err != nil {
		return Target{}, err
	}
	gc := group.DefaultConfig()
	gc.InitialRebalanceDelay = 0
	t, err := e.StartKaas(ctx, "kaas-tmpfs-delay0", dir, &gc)
	if err != nil {
		return Target{}, err
	}
	e.mu.Lock()
	e.groupTarget = &t
	e.mu.Unlock()
	return t, nil
}

// ScratchDir makes a fresh directory, removed when the run ends: on tmpfs
// when memory is true and a tmpfs is available, else under the data dir.
func (e *Env) ScratchDir(memory bool, prefix string) (string, error) {
	parent := e.DataDir
	if memory {
		if shm, ok := TmpfsDir(); ok {
			parent = shm
		}
	}
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return "", fmt.Errorf("bench: scratch dir: %w", err)
	}
	e.onClose(func() { os.RemoveAll(dir) })
	return dir, nil
}
