package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/node"
)

// Target is one running Kafka-compatible cluster a goal can drive.
type Target struct {
	Name    string   // "kaas", "kaas-tmpfs", "kfake"
	Addrs   []string // bootstrap addresses, all on 127.0.0.1
	DataDir string   // the volume of a kaas target; "" for kfake
	Durable bool     // acks=all waits for an fsync that reaches a disk
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
	NoTmpfs     bool // skip the kaas-on-tmpfs target
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
	return e, nil
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
