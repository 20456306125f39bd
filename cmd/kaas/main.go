// Command kaas runs kaas brokers: `kaas broker` runs one broker, `kaas dev`
// a local cluster on one folder, `kaas remove-broker` drops a broker for
// good. Flags (kong) → Config → Run; no logic here.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/cliflag"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/node"
)

// cli is the command line: one command per job. Every flag also reads
// KAAS_<FLAG> from the environment (cliflag.Options).
type cli struct {
	Version      kong.VersionFlag `env:"-" help:"Print the version and exit."`
	Broker       brokerCmd        `cmd:"" help:"Run one broker on the shared volume."`
	Dev          devCmd           `cmd:"" help:"Run a local cluster: several brokers on one folder (the shared volume)."`
	RemoveBroker removeBrokerCmd  `cmd:"" name:"remove-broker" help:"Ask the controller to drop a broker from the cluster for good."`

	Topics  topicsCmd  `cmd:"" group:"Admin (any Kafka cluster)" help:"List, describe, create, delete topics and add partitions."`
	Groups  groupsCmd  `cmd:"" group:"Admin (any Kafka cluster)" help:"List, describe (members, offsets, lag), delete groups, reset and delete their offsets."`
	Route   routeCmd   `cmd:"" group:"Admin (any Kafka cluster)" help:"Which broker coordinates each group, and why (with --data-dir)."`
	Cluster clusterCmd `cmd:"" group:"Admin (any Kafka cluster)" help:"The brokers, the controller, and with --data-dir kaas's assignment."`
}

func main() {
	var c cli
	ctx := cliflag.Parse(&c, "kaas", "A Kafka-compatible broker cluster whose brokers share one storage volume.", os.Args[1:])
	if err := ctx.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "kaas:", err)
		os.Exit(1)
	}
}

// commonFlags are the flags of every command that runs brokers.
type commonFlags struct {
	cliflag.Log `embed:""`

	AutoCreate         bool          `name:"auto-create-topics" help:"Create unknown topics on Metadata and Produce (auto.create.topics.enable)."`
	DefaultPartitions  int           `name:"default-partitions" default:"1" help:"Partitions of auto-created topics and of CreateTopics with -1 (num.partitions)."`
	MaxFrame           int           `name:"max-frame-bytes" default:"104857600" help:"Largest request frame accepted (socket.request.max.bytes)."`
	ReportInterval     time.Duration `name:"report-interval" default:"1s" help:"How often a broker reports liveness."`
	RebalanceDelay     time.Duration `name:"group-initial-rebalance-delay" default:"3s" help:"Initial rebalance delay of an empty group, 0 allowed (group.initial.rebalance.delay.ms)."`
	MinSession         time.Duration `name:"group-min-session-timeout" default:"6s" help:"Smallest session timeout a member may ask for (group.min.session.timeout.ms)."`
	MaxSession         time.Duration `name:"group-max-session-timeout" default:"30m" help:"Largest session timeout a member may ask for (group.max.session.timeout.ms)."`
	MaxGroupSize       int           `name:"group-max-size" default:"0" help:"Most members in one group, 0 unlimited (group.max.size)."`
	ConsumerHeartbeat  time.Duration `name:"group-consumer-heartbeat-interval" default:"5s" help:"Heartbeat interval of consumer-protocol (KIP-848) members (group.consumer.heartbeat.interval.ms)."`
	ConsumerSession    time.Duration `name:"group-consumer-session-timeout" default:"45s" help:"Session timeout of consumer-protocol (KIP-848) members (group.consumer.session.timeout.ms)."`
	ConsumerMaxSize    int           `name:"group-consumer-max-size" default:"0" help:"Most members in one consumer-protocol group, 0 unlimited (group.consumer.max.size)."`
	ConsumerJoinLinger time.Duration `name:"group-consumer-join-linger" default:"3ms" help:"How long the answer to a consumer-protocol (KIP-848) join waits for the next join of the same group, up to ten times this in all: members joining together are answered together, each with its final share; 0 answers each join at once."`
	MigrationPolicy    string        `name:"group-consumer-migration-policy" default:"bidirectional" enum:"bidirectional,upgrade,downgrade,disabled" help:"Online conversions between classic and consumer groups with members: bidirectional, upgrade, downgrade or disabled (group.consumer.migration.policy)."`
	OffsetsRetention   time.Duration `name:"offsets-retention" default:"168h" help:"Committed offsets expire this long after their group became empty (offsets.retention.minutes, KIP-211)."`
	OffsetsCheck       time.Duration `name:"offsets-retention-check-interval" default:"10m" help:"How often committed offsets are checked for expiry (offsets.retention.check.interval.ms)."`
	MaxConns           int           `name:"max-connections" default:"0" help:"Connections beyond it are closed at accept, 0 for 3/4 of the open-file limit (max.connections)."`
	MaxConnsPerIP      int           `name:"max-connections-per-ip" default:"0" help:"Connections from one address beyond it are closed, 0 unlimited (max.connections.per.ip)."`
	ConnsMaxIdle       time.Duration `name:"connections-max-idle" default:"10m" help:"Close a connection with no request for this long (connections.max.idle.ms)."`
	RequestReadTimeout time.Duration `name:"request-read-timeout" default:"30s" help:"The bytes of one request must all arrive within this once its size is read."`
	QueuedMaxBytes     int64         `name:"queued-max-request-bytes" default:"0" help:"Request bytes read and not yet answered over all connections, 0 for twice --max-frame-bytes (queued.max.request.bytes)."`
	DeadAfter          time.Duration `name:"dead-after" default:"3s" help:"A broker whose reports stop for this long is dead."`
	StallLimit         time.Duration `name:"volume-stall-limit" default:"15s" help:"How long a broker stays alive while its cluster loop waits on one volume call (a network file system's stall); after it, its reports stop."`
	AdminPprof         bool          `name:"admin-pprof" help:"Serve Go's profiler at /debug/pprof/ on the admin listener."`

	Election electionFlags `embed:""` // elector.go
}

// validate refuses values a broker cannot run with, naming the fix.
func (c *commonFlags) validate() error {
	if c.DefaultPartitions < 1 {
		return fmt.Errorf("--default-partitions %d: a topic needs at least 1 partition", c.DefaultPartitions)
	}
	if c.MaxFrame < 1<<10 {
		return fmt.Errorf("--max-frame-bytes %d: too small for any request; Kafka's default is 104857600", c.MaxFrame)
	}
	if c.ConsumerJoinLinger < 0 || c.ConsumerJoinLinger > time.Second {
		// Ten times it bounds a join's answer: well within any client's
		// request timeout.
		return fmt.Errorf("--group-consumer-join-linger %v: must be from 0 to 1s", c.ConsumerJoinLinger)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--report-interval", c.ReportInterval}, {"--dead-after", c.DeadAfter}, {"--volume-stall-limit", c.StallLimit},
		{"--group-min-session-timeout", c.MinSession}, {"--group-max-session-timeout", c.MaxSession},
		{"--group-consumer-heartbeat-interval", c.ConsumerHeartbeat}, {"--group-consumer-session-timeout", c.ConsumerSession},
		{"--offsets-retention", c.OffsetsRetention}, {"--offsets-retention-check-interval", c.OffsetsCheck},
		{"--connections-max-idle", c.ConnsMaxIdle}, {"--request-read-timeout", c.RequestReadTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%s %v: must be more than 0", d.name, d.v)
		}
	}
	if c.RebalanceDelay < 0 {
		return fmt.Errorf("--group-initial-rebalance-delay %v: must not be negative", c.RebalanceDelay)
	}
	if c.DeadAfter <= c.ReportInterval {
		return fmt.Errorf("--dead-after %v must be longer than --report-interval %v, or every broker is declared dead between two reports", c.DeadAfter, c.ReportInterval)
	}
	if c.MinSession > c.MaxSession {
		return fmt.Errorf("--group-min-session-timeout %v is above --group-max-session-timeout %v", c.MinSession, c.MaxSession)
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"--group-max-size", c.MaxGroupSize}, {"--group-consumer-max-size", c.ConsumerMaxSize},
		{"--max-connections", c.MaxConns}, {"--max-connections-per-ip", c.MaxConnsPerIP}} {
		if n.v < 0 {
			return fmt.Errorf("%s %d: must be 0 (unlimited or the default) or more", n.name, n.v)
		}
	}
	if c.QueuedMaxBytes < 0 {
		return fmt.Errorf("--queued-max-request-bytes %d: must be 0 (the default) or more", c.QueuedMaxBytes)
	}
	return nil
}

func (c *commonFlags) logger() (*slog.Logger, error) { return c.Log.Logger() }

func (c *commonFlags) config(id int32, dataDir, listen, advertise string, log *slog.Logger) broker.Config {
	return broker.Config{
		ID: id, DataDir: dataDir, Listen: listen, Advertise: advertise,
		AutoCreateTopics:  c.AutoCreate,
		DefaultPartitions: int32(c.DefaultPartitions),
		MaxFrame:          int32(c.MaxFrame),
		Logger:            log,

		OffsetsRetentionCheck: c.OffsetsCheck,
		MaxConnections:        c.MaxConns,
		MaxConnectionsPerIP:   c.MaxConnsPerIP,
		ConnectionsMaxIdle:    c.ConnsMaxIdle,
		RequestReadTimeout:    c.RequestReadTimeout,
		QueuedMaxRequestBytes: c.QueuedMaxBytes,
	}
}

// brokerCmd runs one broker: kaas-<id> in assignment.json.
type brokerCmd struct {
	ID            int    `name:"id" required:"" help:"Broker node id (>= 0); the broker is kaas-<id> in assignment.json."`
	DataDir       string `name:"data-dir" required:"" help:"The shared volume."`
	Listen        string `name:"listen" default:"127.0.0.1:9092" help:"Address to listen on for Kafka clients."`
	Advertise     string `name:"advertise" help:"Address clients are told to connect to (default: the listen address)."`
	ClusterListen string `name:"cluster-listen" help:"Address of the cluster listener, where the other brokers send liveness reports (default: the listen host, any port)."`
	AdminListen   string `name:"admin-listen" help:"Address of the HTTP admin listener: /metrics, /healthz, /readyz (default: none)."`
	commonFlags
}

// Validate: kong calls it after parsing.
func (b *brokerCmd) Validate() error {
	if b.ID < 0 || b.ID > 1<<30 {
		return fmt.Errorf("--id %d: want a node id from 0 to %d", b.ID, 1<<30)
	}
	if err := checkAdvertised(b.Listen, b.Advertise); err != nil {
		return err
	}
	return b.validate()
}

// checkAdvertised refuses to tell clients an address they cannot connect
// to: an unspecified host (0.0.0.0, ::) listens everywhere but names no
// machine.
func checkAdvertised(listen, advertise string) error {
	flag, addr := "--advertise", advertise
	if addr == "" {
		flag, addr = "--listen", listen
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: want host:port (%v)", flag, addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s %q: bad port", flag, addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if flag == "--listen" {
			return fmt.Errorf("--listen %q listens on every address, so it cannot be what clients are told: add --advertise with the host:port clients reach this broker at", addr)
		}
		return fmt.Errorf("--advertise %q: clients cannot connect to an unspecified address; give the host:port they reach this broker at", addr)
	}
	return nil
}

func (b *brokerCmd) Run() error {
	log, err := b.logger()
	if err != nil {
		return err
	}
	nc := b.nodeConfig(b.config(int32(b.ID), b.DataDir, b.Listen, b.Advertise, log))
	nc.ClusterListen, nc.AdminListen, nc.AdminPprof = b.ClusterListen, b.AdminListen, b.AdminPprof
	n, err := node.Start(nc)
	if err != nil {
		return err
	}
	return serveUntilSignal(log, n)
}

// devCmd runs a local cluster in one process.
type devCmd struct {
	DataDir   string `name:"data-dir" default:"./kaas-data" help:"The local folder that plays the shared volume."`
	Port      int    `name:"port" default:"9092" help:"Port of the first broker; the others take the next ports."`
	Brokers   int    `name:"brokers" default:"3" help:"How many brokers to run (1..64)."`
	AdminPort int    `name:"admin-port" default:"9644" help:"Port of the first broker's HTTP admin listener on 127.0.0.1 (/metrics, /healthz, /readyz); the others take the next ports; 0: none."`
	commonFlags
}

// Validate: kong calls it after parsing.
func (d *devCmd) Validate() error {
	if d.Brokers < 1 || d.Brokers > 64 {
		return fmt.Errorf("--brokers %d: want 1..64", d.Brokers)
	}
	if d.Port < 1 || d.Port+d.Brokers-1 > 65535 {
		return fmt.Errorf("--port %d: the %d brokers need ports %d..%d", d.Port, d.Brokers, d.Port, d.Port+d.Brokers-1)
	}
	if d.AdminPort < 0 || d.AdminPort+d.Brokers-1 > 65535 {
		return fmt.Errorf("--admin-port %d: the %d brokers need ports %d..%d (0: no admin listener)", d.AdminPort, d.Brokers, d.AdminPort, d.AdminPort+d.Brokers-1)
	}
	return d.validate()
}

func (d *devCmd) Run() error {
	dataDir, port, brokers, common := d.DataDir, d.Port, d.Brokers, &d.commonFlags
	log, err := common.logger()
	if err != nil {
		return err
	}
	// Brokers start in parallel: each waits for the first assignment, which
	// the controller writes once it has seen them report.
	nodes := make([]*node.Node, brokers)
	errs := make(chan error, brokers)
	for i := range brokers {
		go func() {
			addr := "127.0.0.1:" + strconv.Itoa(port+i)
			nc := common.nodeConfig(common.config(int32(i), dataDir, addr, addr, log))
			if d.AdminPort > 0 {
				nc.AdminListen = "127.0.0.1:" + strconv.Itoa(d.AdminPort+i)
			}
			nc.AdminPprof = common.AdminPprof
			n, err := node.Start(nc)
			nodes[i] = n
			errs <- err
		}()
	}
	var startErr error
	for range brokers {
		if err := <-errs; err != nil && startErr == nil {
			startErr = err
		}
	}
	if startErr != nil {
		for _, n := range nodes {
			if n != nil {
				n.Kill()
			}
		}
		return startErr
	}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	// Ctrl-C drains from the moment the banner says it does.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("kaas dev: %d brokers, bootstrap servers %s (data in %s); Ctrl-C stops\n",
		brokers, strings.Join(addrs, ","), dataDir)
	<-ctx.Done()
	stop() // a second Ctrl-C ends the process at once
	log.Info("shutting down: draining the brokers (Ctrl-C again to exit at once)")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err1 error
	for i := len(nodes) - 1; i >= 0; i-- { // the controller (often kaas-0) last
		if err := nodes[i].Shutdown(sctx); err != nil && err1 == nil {
			err1 = err
		}
	}
	return err1
}

// nodeConfig adds the cluster timings to a broker config.
func (c *commonFlags) nodeConfig(bc broker.Config) node.Config {
	gc := group.DefaultConfig()
	gc.InitialRebalanceDelay = c.RebalanceDelay
	gc.MinSessionTimeout, gc.MaxSessionTimeout, gc.MaxSize = c.MinSession, c.MaxSession, c.MaxGroupSize
	cc := cgroup.DefaultConfig()
	cc.HeartbeatInterval, cc.SessionTimeout, cc.MaxSize = c.ConsumerHeartbeat, c.ConsumerSession, c.ConsumerMaxSize
	cc.MigrationPolicy, cc.JoinLinger = c.MigrationPolicy, c.ConsumerJoinLinger
	return node.Config{Broker: bc, ReportInterval: c.ReportInterval, DeadAfter: c.DeadAfter, StallLimit: c.StallLimit,
		Group: &gc, Consumer: &cc, OffsetsRetention: c.OffsetsRetention, Elector: c.Election.elector(bc, c.DeadAfter)}
}

// serveUntilSignal serves until SIGINT/SIGTERM, then drains and stops.
func serveUntilSignal(log *slog.Logger, n *node.Node) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- n.Wait() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stop() // a second signal ends the process at once
	log.Info("shutting down: draining (Ctrl-C again to exit at once)")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Shutdown(sctx)
}
