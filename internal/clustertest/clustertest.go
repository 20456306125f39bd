// Package clustertest runs N kaas brokers in one test process over a temp
// dir, with kill (as close to kill -9 as a process can do to itself),
// restart and drain. It is for tests only.
package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/node"
)

// Options tune a harness cluster. Zero values take fast test timings.
type Options struct {
	Brokers        int
	ReportInterval time.Duration // default 100ms
	DeadAfter      time.Duration // default 1s
	PollInterval   time.Duration // default 50ms
	Broker         func(*broker.Config)
	Group          func(*group.Config) // adjusts Kafka's group defaults
}

// Cluster is a set of in-process brokers sharing Dir.
type Cluster struct {
	t    testing.TB
	Dir  string
	opts Options

	mu    sync.Mutex // guards nodes, addrs
	nodes []*node.Node
	addrs []string // fixed per broker across restarts
}

// Logger returns a logger for tests: to stderr with -v, else discarded.
func Logger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// Start runs opts.Brokers brokers (default 3) and waits until all serve.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Brokers <= 0 {
		opts.Brokers = 3
	}
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = 100 * time.Millisecond
	}
	if opts.DeadAfter <= 0 {
		opts.DeadAfter = time.Second
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 50 * time.Millisecond
	}
	c := &Cluster{t: t, Dir: t.TempDir(), opts: opts,
		nodes: make([]*node.Node, opts.Brokers), addrs: make([]string, opts.Brokers)}
	var wg sync.WaitGroup
	errs := make([]error, opts.Brokers)
	for i := range opts.Brokers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.start(i) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
	}
	t.Cleanup(c.Close)
	return c
}

func (c *Cluster) start(i int) error {
	c.mu.Lock()
	listen := c.addrs[i]
	c.mu.Unlock()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	bc := broker.Config{ID: int32(i), DataDir: c.Dir, Listen: listen, Logger: Logger(c.t)}
	if c.opts.Broker != nil {
		c.opts.Broker(&bc)
	}
	gc := group.DefaultConfig()
	if c.opts.Group != nil {
		c.opts.Group(&gc)
	}
	n, err := node.Start(node.Config{Broker: bc, ReportInterval: c.opts.ReportInterval,
		DeadAfter: c.opts.DeadAfter, PollInterval: c.opts.PollInterval, ReadyTimeout: 20 * time.Second, Group: &gc})
	if err != nil {
		return fmt.Errorf("start broker %d: %w", i, err)
	}
	c.mu.Lock()
	c.nodes[i], c.addrs[i] = n, n.Addr()
	c.mu.Unlock()
	return nil
}

// Node returns broker i (nil while it is down).
func (c *Cluster) Node(i int) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Addrs lists the addresses of the brokers that are up, for seeding clients.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for i, n := range c.nodes {
		if n != nil {
			out = append(out, c.addrs[i])
		}
	}
	return out
}

// AllAddrs lists every broker's address, up or down.
func (c *Cluster) AllAddrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.addrs...)
}

// Kill stops broker i abruptly: no drain, no stopped report, no resignation.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if n != nil {
		n.Kill()
	}
}

// Shutdown stops broker i gracefully (the SIGTERM path).
func (c *Cluster) Shutdown(i int) error {
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if n == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Shutdown(ctx)
}

// Restart starts broker i again on its old address.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.start(i); err != nil {
		c.t.Fatal(err)
	}
}

// Controller returns the index of the broker holding the controller role,
// or -1.
func (c *Cluster) Controller() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.nodes {
		if n != nil && n.Runtime.IsController() {
			return i
		}
	}
	return -1
}

// Close stops every broker that is up.
func (c *Cluster) Close() {
	for i := range c.nodes {
		if n := c.Node(i); n != nil {
			c.Kill(i)
		}
	}
}

// Seeds is a comma-joined address list.
func (c *Cluster) Seeds() string { return strings.Join(c.AllAddrs(), ",") }
