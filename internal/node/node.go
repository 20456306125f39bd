// Package node is the composition root of one kaas broker process: it wires
// the protocol server (internal/broker) to the cluster runtime
// (internal/cluster), and owns start-up order and shutdown. cmd/kaas and the
// in-process cluster harness use it; nothing imports it but them.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/kaas-dev/kaas/internal/admin"
	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/fsutil"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/groupconfig"
	"github.com/kaas-dev/kaas/internal/metrics"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/volume"
)

// Config is a broker's configuration plus the cluster runtime's timings.
type Config struct {
	Broker broker.Config // Cluster and TopicsChanged are set by the node

	ReportInterval time.Duration // liveness report period; default 1s
	DeadAfter      time.Duration // kill -9 detection; default 3s
	StallLimit     time.Duration // a cluster loop waiting on the volume stays alive this long; default 15s
	PollInterval   time.Duration // assignment poll / controller tick; default 200ms
	ReadyTimeout   time.Duration // how long Start waits for the first assignment; default 30s
	Elector        cluster.Elector
	Group          *group.Config  // nil: Kafka's defaults
	Consumer       *cgroup.Config // KIP-848 groups; nil: Kafka's defaults
	// OffsetsRetention is KIP-211's offsets.retention.minutes; 0: 7 days.
	OffsetsRetention time.Duration
	// ClusterListen is the cluster listener, where the other brokers send
	// their liveness reports; "": the Kafka listener's host, any port (the
	// address is advertised in the reports).
	ClusterListen string
	// AdminListen is the HTTP admin listener (/metrics, /healthz, /readyz;
	// docs/operations.md); "": none. AdminPprof adds /debug/pprof/.
	AdminListen string
	AdminPprof  bool
}

func consumerConfig(c *cgroup.Config) cgroup.Config {
	if c == nil {
		return cgroup.DefaultConfig()
	}
	return *c
}

// Name is the broker id used in assignment.json for a node id.
func Name(nodeID int32) string { return volume.BrokerName(nodeID) }

// Node is one running broker.
type Node struct {
	Broker  *broker.Broker
	Runtime *cluster.Runtime
	Metrics *metrics.Broker
	log     *slog.Logger
	view    *view
	served  chan error
	stopped atomic.Bool
	store   *offsets.Store
	writes  *fsutil.Writes
	// stallLimit bounds the wait for writes in flight at shutdown.
	stallLimit time.Duration
	admin      *admin.Server // nil without AdminListen
	// serving: clients are served and the broker is not draining (/readyz).
	serving atomic.Bool
}

// Start opens the broker, binds its listener, starts the cluster runtime,
// waits until an assignment lists this broker alive, and only then serves
// clients: no request is answered before the broker knows the cluster.
func Start(cfg Config) (*Node, error) {
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	v := &view{}
	bc := cfg.Broker
	bc.Cluster = v
	if err := checkVolume(bc.DataDir); err != nil {
		return nil, err
	}
	log := bc.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Nothing is opened on the volume while another process runs as
	// this broker: its partitions and groups are that process's.
	if err := cluster.CheckNotRunning(context.Background(), nil, bc.DataDir, Name(bc.ID), cfg.ReportInterval, cfg.DeadAfter); err != nil {
		return nil, err
	}
	m := metrics.New()
	bc.Metrics = m
	n := &Node{Metrics: m, log: log, view: v, served: make(chan error, 1)}
	if cfg.AdminListen != "" {
		a, err := admin.Listen(cfg.AdminListen, admin.Options{Registry: m.Registry, Ready: n.ready, Pprof: cfg.AdminPprof,
			Log: log.With("broker", Name(bc.ID))})
		if err != nil {
			return nil, err
		}
		n.admin = a
	}
	// The group and transaction file writes in flight, by the assignment
	// they were granted under: the liveness reports carry the oldest, and
	// the brokers gaining a group wait for them (docs/cluster.md, "Hand-off").
	writes := fsutil.NewWrites()
	bc.Writes = writes
	store, err := offsets.Open(offsets.Options{Dir: volume.OffsetsDir(bc.DataDir), Logger: log, OnCorrupt: m.GroupFileCorrupt, Writes: writes})
	if err != nil {
		n.closeAdmin()
		return nil, err
	}
	gc := group.DefaultConfig()
	if cfg.Group != nil {
		gc = *cfg.Group
	}
	// The runtime is made below, after the listener; until then the
	// coordinator serves nothing (the bootstrap source), so neither
	// function is called before rt is set.
	var rtp atomic.Pointer[cluster.Runtime]
	deadAfter := cfg.DeadAfter
	if deadAfter <= 0 {
		deadAfter = 3 * time.Second
	}
	gcs := groupconfig.Open(bc.DataDir)
	bc.GroupConfigs = gcs
	co := coord.New(coord.Config{Me: Name(bc.ID), Self: coord.Broker{ID: Name(bc.ID), NodeID: bc.ID},
		Store: store, Logger: log, Now: bc.Now, Group: gc, Consumer: consumerConfig(cfg.Consumer), Retention: cfg.OffsetsRetention,
		GroupConfigs: gcs,
		Fresh: func() bool {
			rt := rtp.Load()
			return rt != nil && rt.Fresh()
		},
		Settled: func(a *cluster.Assignment, lapsed bool) bool {
			rt := rtp.Load()
			return rt != nil && rt.SettledOrLapsed(a, lapsed)
		},
		SettleTimeout: deadAfter, Metrics: m})
	bc.Coordinator = co
	var rt *cluster.Runtime
	bc.TopicsChanged = func() {
		if rt != nil {
			rt.Poke()
		}
	}
	b, err := broker.New(bc)
	if err != nil {
		store.Close()
		return nil, err
	}
	// fail undoes what Start opened, in reverse order, on any later error.
	fail := func(err error) (*Node, error) {
		_ = b.Close(context.Background())
		store.Close()
		n.closeAdmin()
		return nil, err
	}
	if err := b.Listen(); err != nil {
		return fail(err)
	}
	adv := bc.Advertise
	if adv == "" {
		adv = b.Addr()
	}
	host, portS, err := net.SplitHostPort(adv)
	if err != nil {
		return fail(fmt.Errorf("node: advertise %q: %w", adv, err))
	}
	port, _ := strconv.Atoi(portS)
	clusterListen := cfg.ClusterListen
	if clusterListen == "" {
		lh, _, err := net.SplitHostPort(b.Addr())
		if err != nil {
			return fail(fmt.Errorf("node: listener %q: %w", b.Addr(), err))
		}
		clusterListen = net.JoinHostPort(lh, "0")
	}
	rt, err = cluster.New(cluster.Config{ClusterListen: clusterListen,
		DataDir: bc.DataDir, ID: Name(bc.ID), NodeID: bc.ID, Host: host, Port: int32(port), Rack: bc.Rack,
		ReportInterval: cfg.ReportInterval, DeadAfter: cfg.DeadAfter, PollInterval: cfg.PollInterval, StallLimit: cfg.StallLimit,
		Elector: cfg.Elector, Logger: log, ActiveGroups: co.ActiveGroups, Writes: writes,
		Topics: func() []cluster.TopicInfo {
			if err := b.Topics().Refresh(); err != nil {
				log.Warn("topic registry refresh failed", "err", err)
			}
			var out []cluster.TopicInfo
			for _, t := range b.Topics().All() {
				out = append(out, cluster.TopicInfo{Name: t.Name, Partitions: t.Partitions})
			}
			return out
		},
	})
	if err != nil {
		return fail(err)
	}
	v.rt, v.me = rt, bc.ID
	rtp.Store(rt)
	// On every applied assignment: the coordinator swaps in the
	// assignment-backed source and sweeps orphans first, then leadership
	// moves. The first application happens before Ready, so the bootstrap
	// source never serves a client.
	rt.OnApply(func(prev, next *cluster.Assignment) {
		start := time.Now()
		co.Apply(prev, next)
		v.update(next)
		b.AssignmentChanged()
		m.Applied(time.Since(start))
	})
	n.Broker, n.Runtime, n.store, n.writes = b, rt, store, writes
	n.stallLimit = cfg.StallLimit
	if n.stallLimit <= 0 {
		n.stallLimit = 15 * time.Second
	}
	me := Name(bc.ID)
	m.Observe(co.Stats, func() metrics.ClusterStat {
		cs := metrics.ClusterStat{Controller: rt.IsController(), Ready: n.serving.Load(), Brokers: map[string]int{}}
		if a := rt.Current(); a != nil {
			cs.ControllerEpoch, cs.AssignmentVersion = a.ControllerEpoch, a.AssignmentVersion
			for _, r := range a.Brokers {
				cs.Brokers[string(r.Health)]++
			}
			for _, p := range a.Partitions {
				if p.Broker == me {
					cs.Partitions++
				}
			}
		}
		return cs
	})
	rt.Start()
	select {
	case <-rt.Ready():
	case <-time.After(cfg.ReadyTimeout):
		n.Kill()
		return nil, fmt.Errorf("node: no assignment listing %s alive within %v", Name(bc.ID), cfg.ReadyTimeout)
	}
	go func() { n.served <- b.Serve() }()
	n.serving.Store(true)
	log.Info("serving clients", "broker", Name(bc.ID), "addr", adv)
	return n, nil
}

// ready is /readyz: the broker serves clients (an applied assignment lists
// it alive) and is not draining.
func (n *Node) ready() (bool, string) {
	switch {
	case n.stopped.Load():
		return false, "draining or stopped"
	case !n.serving.Load():
		return false, "starting: no applied assignment lists this broker alive yet"
	}
	return true, ""
}

// closeAdmin stops the admin listener, if any.
func (n *Node) closeAdmin() {
	if n.admin == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = n.admin.Close(ctx)
}

// AdminAddr is the admin listener's address ("" without one).
func (n *Node) AdminAddr() string {
	if n.admin == nil {
		return ""
	}
	return n.admin.Addr()
}

// Addr is the broker's listener address.
func (n *Node) Addr() string { return n.Broker.Addr() }

// Shutdown is the SIGTERM path: mark draining, wait until partitions and
// groups have moved to other brokers, stop serving, report stopped and
// resign the controller role.
func (n *Node) Shutdown(ctx context.Context) error {
	if !n.stopped.CompareAndSwap(false, true) {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	derr := n.Runtime.Drain(dctx)
	cancel()
	if derr != nil {
		n.log.Warn("drain did not finish; stopping anyway", "err", derr)
	}
	err := n.Broker.Close(ctx)
	if serr := <-n.served; serr != nil && err == nil {
		err = serr
	}
	// The stopped report lets the brokers gaining this one's groups serve
	// them at once: not while a write of this one's is still in flight
	// (a volume may hold a rename for seconds). Past the stall limit the
	// reports went silent anyway (cluster.Config.Writes).
	wctx, wcancel := context.WithTimeout(ctx, n.stallLimit)
	if werr := n.writes.Wait(wctx); werr != nil {
		n.log.Warn("stopping with group or transaction writes still in flight", "err", werr)
	}
	wcancel()
	if rerr := n.Runtime.Stop(ctx); rerr != nil && err == nil {
		err = rerr
	}
	if cerr := n.store.Close(); cerr != nil && err == nil {
		err = cerr
	}
	n.closeAdmin()
	return err
}

// Kill stops the node as abruptly as an in-process harness can: no drain,
// no stopped report, no resignation; connections are cut.
func (n *Node) Kill() {
	if !n.stopped.CompareAndSwap(false, true) {
		return
	}
	n.Runtime.Abort()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // an expired context: the listener's connections are cut at once
	_ = n.Broker.Close(ctx)
	_ = n.store.Close()
	n.closeAdmin()
	select {
	case <-n.served:
	default:
	}
}

// Wait blocks until the broker stops serving.
func (n *Node) Wait() error {
	err := <-n.served
	n.served <- err
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// checkVolume refuses, before anything is written, a data dir whose file
// system does not give what kaas relies on (docs/volume.md).
func checkVolume(dataDir string) error {
	dir := volume.ClusterDir(dataDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("node: data dir %s: %w", dataDir, err)
	}
	if err := fsutil.CheckVolume(dir); err != nil {
		return fmt.Errorf("node: refusing to start on %s: %w", dataDir, err)
	}
	return nil
}

// Single is one broker running alone on a data dir, without a cluster
// runtime: it leads every partition and coordinates every group. Tools and
// benchmarks use it; `kaas broker` and `kaas dev` run Nodes.
type Single struct {
	Broker *broker.Broker
	coord  *coord.Coordinator
	served chan error
}

// StartSingle assembles a single broker (its coordinator over its own
// offsets store, then the broker), binds its listener and serves. group nil
// is Kafka's group defaults.
func StartSingle(bc broker.Config, gc *group.Config) (*Single, error) {
	g := group.DefaultConfig()
	if gc != nil {
		g = *gc
	}
	co, err := coord.OpenStandalone(bc.DataDir, coord.Config{Me: Name(bc.ID),
		Self: coord.Broker{ID: Name(bc.ID), NodeID: bc.ID}, Logger: bc.Logger, Now: bc.Now, Group: g, Consumer: cgroup.DefaultConfig()})
	if err != nil {
		return nil, err
	}
	bc.Coordinator = co
	b, err := broker.New(bc)
	if err != nil {
		co.Close()
		return nil, err
	}
	if err := b.Listen(); err != nil {
		_ = b.Close(context.Background())
		co.Close()
		return nil, err
	}
	s := &Single{Broker: b, coord: co, served: make(chan error, 1)}
	go func() { s.served <- b.Serve() }()
	return s, nil
}

// Addr is the broker's listener address.
func (s *Single) Addr() string { return s.Broker.Addr() }

// Close stops the broker (connections finish what they read until ctx
// ends), then its coordinator's store.
func (s *Single) Close(ctx context.Context) error {
	err := s.Broker.Close(ctx)
	if serr := <-s.served; serr != nil && err == nil {
		err = serr
	}
	if cerr := s.coord.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
