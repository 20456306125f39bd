// Command kaas runs kaas brokers: `kaas broker` runs one broker, `kaas dev`
// a local cluster on one folder. Flags → Config → Run; no logic here.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/cliflag"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/node"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "broker":
		err = runBroker(os.Args[2:])
	case "dev":
		err = runDev(os.Args[2:])
	case "remove-broker":
		err = runRemoveBroker(os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "kaas: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaas:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  kaas broker --id N --data-dir DIR --listen HOST:PORT [--advertise HOST:PORT]
  kaas dev [--brokers 3] [--data-dir DIR] [--port 9092]
  kaas remove-broker --data-dir DIR --id kaas-N
Run 'kaas <command> -h' for the flags; every flag also reads KAAS_<FLAG> from
the environment (upper case, '-' as '_'), e.g. KAAS_DATA_DIR.
`)
}

type commonFlags struct {
	log                cliflag.Log
	autoCreate         bool
	defaultPartitions  int
	maxFrame           int
	reportInterval     time.Duration
	rebalanceDelay     time.Duration
	minSession         time.Duration
	maxSession         time.Duration
	maxGroupSize       int
	consumerHeartbeat  time.Duration
	consumerSession    time.Duration
	consumerMaxSize    int
	offsetsRetention   time.Duration
	offsetsCheck       time.Duration
	maxConns           int
	maxConnsPerIP      int
	connsMaxIdle       time.Duration
	requestReadTimeout time.Duration
	queuedMaxBytes     int64
	deadAfter          time.Duration
	stallLimit         time.Duration
	election           electionFlags // elector.go
}

func (c *commonFlags) register(fs cliflag.Set) {
	c.log.Register(fs)
	fs.BoolVar(&c.autoCreate, "auto-create-topics", false, "create unknown topics on Metadata and Produce")
	fs.IntVar(&c.defaultPartitions, "default-partitions", 1, "partitions of auto-created topics and of CreateTopics with -1")
	fs.IntVar(&c.maxFrame, "max-frame-bytes", 100<<20, "largest request frame accepted")
	fs.DurationVar(&c.reportInterval, "report-interval", time.Second, "how often a broker reports liveness")
	fs.DurationVar(&c.rebalanceDelay, "group-initial-rebalance-delay", 3*time.Second, "initial rebalance delay of an empty group (0 allowed)")
	fs.DurationVar(&c.minSession, "group-min-session-timeout", 6*time.Second, "smallest session timeout a member may ask for")
	fs.DurationVar(&c.maxSession, "group-max-session-timeout", 30*time.Minute, "largest session timeout a member may ask for")
	fs.IntVar(&c.maxGroupSize, "group-max-size", 0, "most members in one group (0: unlimited)")
	fs.DurationVar(&c.consumerHeartbeat, "group-consumer-heartbeat-interval", 5*time.Second, "heartbeat interval of consumer-protocol (KIP-848) members (group.consumer.heartbeat.interval.ms)")
	fs.DurationVar(&c.consumerSession, "group-consumer-session-timeout", 45*time.Second, "session timeout of consumer-protocol (KIP-848) members (group.consumer.session.timeout.ms)")
	fs.IntVar(&c.consumerMaxSize, "group-consumer-max-size", 0, "most members in one consumer-protocol group (group.consumer.max.size; 0: unlimited)")
	fs.DurationVar(&c.offsetsRetention, "offsets-retention", 7*24*time.Hour, "committed offsets expire this long after their group became empty (KIP-211)")
	fs.DurationVar(&c.offsetsCheck, "offsets-retention-check-interval", 10*time.Minute, "how often committed offsets are checked for expiry (offsets.retention.check.interval.ms)")
	fs.IntVar(&c.maxConns, "max-connections", 0, "max.connections: connections beyond it are closed at accept (0: 3/4 of the open-file limit)")
	fs.IntVar(&c.maxConnsPerIP, "max-connections-per-ip", 0, "max.connections.per.ip (0: unlimited)")
	fs.DurationVar(&c.connsMaxIdle, "connections-max-idle", 10*time.Minute, "connections.max.idle.ms: close a connection with no request for this long")
	fs.DurationVar(&c.requestReadTimeout, "request-read-timeout", 30*time.Second, "the bytes of one request must all arrive within this once its size is read")
	fs.Int64Var(&c.queuedMaxBytes, "queued-max-request-bytes", 0, "queued.max.request.bytes: request bytes read and not yet answered, all connections (0: 2 × --max-frame-bytes)")
	fs.DurationVar(&c.deadAfter, "dead-after", 3*time.Second, "a broker whose reports stop for this long is dead")
	fs.DurationVar(&c.stallLimit, "volume-stall-limit", 15*time.Second, "how long a broker stays alive while its cluster loop waits on the volume (a network file system's stall); after it, its reports stop")
	c.election.register(fs)
}

func (c *commonFlags) logger() (*slog.Logger, error) { return c.log.Logger() }

func (c *commonFlags) config(id int32, dataDir, listen, advertise string, log *slog.Logger) broker.Config {
	return broker.Config{
		ID: id, DataDir: dataDir, Listen: listen, Advertise: advertise,
		AutoCreateTopics:  c.autoCreate,
		DefaultPartitions: int32(c.defaultPartitions),
		MaxFrame:          int32(c.maxFrame),
		Logger:            log,

		OffsetsRetentionCheck: c.offsetsCheck,
		MaxConnections:        c.maxConns,
		MaxConnectionsPerIP:   c.maxConnsPerIP,
		ConnectionsMaxIdle:    c.connsMaxIdle,
		RequestReadTimeout:    c.requestReadTimeout,
		QueuedMaxRequestBytes: c.queuedMaxBytes,
	}
}

func runBroker(args []string) error {
	fs := cliflag.New("broker")
	var (
		id                                        int
		dataDir, listen, advertise, clusterListen string
		common                                    commonFlags
	)
	fs.IntVar(&id, "id", -1, "broker node id (required, >= 0); the broker is kaas-<id> in assignment.json")
	fs.StringVar(&dataDir, "data-dir", "", "the shared volume (required)")
	fs.StringVar(&listen, "listen", "127.0.0.1:9092", "address to listen on")
	fs.StringVar(&advertise, "advertise", "", "address clients are told (default: the listen address)")
	fs.StringVar(&clusterListen, "cluster-listen", "", "address of the cluster listener, where the other brokers send liveness reports (default: the listen host, any port)")
	common.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if id < 0 || id > 1<<30 {
		return errors.New("--id is required (a node id >= 0)")
	}
	if dataDir == "" {
		return errors.New("--data-dir is required")
	}
	log, err := common.logger()
	if err != nil {
		return err
	}
	nc := common.nodeConfig(common.config(int32(id), dataDir, listen, advertise, log))
	nc.ClusterListen = clusterListen
	n, err := node.Start(nc)
	if err != nil {
		return err
	}
	return serveUntilSignal(log, n)
}

func runDev(args []string) error {
	fs := cliflag.New("dev")
	var (
		dataDir string
		port    int
		brokers int
		common  commonFlags
	)
	fs.StringVar(&dataDir, "data-dir", "./kaas-data", "the local folder that plays the shared volume")
	fs.IntVar(&port, "port", 9092, "port of the first broker; the others take the next ports")
	fs.IntVar(&brokers, "brokers", 3, "how many brokers to run")
	common.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if brokers < 1 || brokers > 64 {
		return errors.New("--brokers must be 1..64")
	}
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
			n, err := node.Start(common.nodeConfig(common.config(int32(i), dataDir, addr, addr, log)))
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
	fmt.Printf("kaas dev: %d brokers, bootstrap servers %s (data in %s); Ctrl-C stops\n",
		brokers, strings.Join(addrs, ","), dataDir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Info("shutting down")
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
	gc.InitialRebalanceDelay = c.rebalanceDelay
	gc.MinSessionTimeout, gc.MaxSessionTimeout, gc.MaxSize = c.minSession, c.maxSession, c.maxGroupSize
	cc := cgroup.DefaultConfig()
	cc.HeartbeatInterval, cc.SessionTimeout, cc.MaxSize = c.consumerHeartbeat, c.consumerSession, c.consumerMaxSize
	return node.Config{Broker: bc, ReportInterval: c.reportInterval, DeadAfter: c.deadAfter, StallLimit: c.stallLimit,
		Group: &gc, Consumer: &cc, OffsetsRetention: c.offsetsRetention, Elector: c.election.elector(bc, c.deadAfter)}
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
	log.Info("shutting down: draining")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Shutdown(sctx)
}
