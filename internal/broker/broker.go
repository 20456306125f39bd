// Package broker owns the Kafka protocol server of one kaas broker: the
// listener, per-connection ordering, dispatch to one handler per API (files
// named by API key), and the partitions this broker leads. It builds on
// internal/wire, internal/topics and internal/storage, and learns the cluster
// (brokers, leaders, controller) through the Cluster interface so that it does
// not import the cluster runtime.
package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/fsutil"
	"github.com/kaas-dev/kaas/internal/groupconfig"
	"github.com/kaas-dev/kaas/internal/metrics"
	"github.com/kaas-dev/kaas/internal/storage"
	"github.com/kaas-dev/kaas/internal/topics"
	"github.com/kaas-dev/kaas/internal/txn"
	"github.com/kaas-dev/kaas/internal/volume"
	"github.com/kaas-dev/kaas/internal/wire"
)

// Config configures one broker. Zero values take the documented defaults.
type Config struct {
	ID        int32  // Kafka node id
	DataDir   string // the shared volume
	Listen    string // host:port to listen on
	Advertise string // host:port clients are told; default: the listener's address
	Rack      string

	MaxFrame               int32         // largest request frame; default wire.DefaultMaxFrame
	AutoCreateTopics       bool          // create unknown topics on Metadata/Produce (default off)
	DefaultPartitions      int32         // partitions of auto-created topics; default 1
	DefaultRetentionMs     int64         // default 7 days; -1 forever
	DefaultRetentionBytes  int64         // default -1
	DefaultMaxMessageBytes int32         // default 1048588
	DefaultSegmentBytes    int64         // default 128 MiB
	RetentionCheck         time.Duration // how often log retention runs; default 1 min
	MaxInFlight            int           // pipelined requests per connection; default 64
	// Connection limits, with Kafka's names (docs/failure-handling.md).
	// MaxConnections is max.connections: connections beyond it are closed
	// at accept; default three quarters of the process's open-file limit,
	// so that log segments and group files always find descriptors.
	MaxConnections int
	// MaxConnectionsPerIP is max.connections.per.ip; 0: unlimited.
	MaxConnectionsPerIP int
	// ConnectionsMaxIdle is connections.max.idle.ms: a connection with no
	// request for this long is closed; default 10 min.
	ConnectionsMaxIdle time.Duration
	// RequestReadTimeout bounds how long the bytes of one request may take
	// to arrive once its size prefix is read; default 30 s.
	RequestReadTimeout time.Duration
	// QueuedMaxRequestBytes is queued.max.request.bytes: the bytes of
	// requests read and not yet answered, across all connections; a reader
	// waits for room before it reads more. Default 2 × MaxFrame.
	QueuedMaxRequestBytes int64
	// OffsetsRetentionCheck is how often committed offsets are checked for
	// expiry (Kafka's offsets.retention.check.interval.ms); default 10 min.
	OffsetsRetentionCheck time.Duration
	// GoneLeaderWait bounds how long a Metadata answer that names a leader
	// whose address refuses connections waits for its partitions to move
	// (gone_leaders.go); default 3 s.
	GoneLeaderWait time.Duration

	Logger *slog.Logger
	// TopicsChanged is called after this broker created or deleted a topic
	// (the cluster runtime assigns leaders sooner).
	TopicsChanged func()
	// Cluster is the broker's view of the cluster. Nil runs a single broker
	// that leads every partition.
	Cluster Cluster
	// Coordinator coordinates consumer groups; required. Its maker (node)
	// closes it after the broker.
	Coordinator *coord.Coordinator
	// Writes counts the transaction file writes in flight (with the
	// offsets store's group file writes; cluster.Config.Writes); nil: none.
	Writes *fsutil.Writes
	// Metrics records requests, connections and durable writes; nil
	// records nothing.
	Metrics *metrics.Broker
	// GroupConfigs holds the configs set on groups; nil: the broker opens
	// the volume's (node shares one with the coordinator).
	GroupConfigs *groupconfig.Store
	// Now is the clock (tests inject); nil is time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.MaxFrame <= 0 {
		c.MaxFrame = wire.DefaultMaxFrame
	}
	if c.DefaultPartitions <= 0 {
		c.DefaultPartitions = 1
	}
	if c.DefaultRetentionMs == 0 {
		c.DefaultRetentionMs = 7 * 24 * time.Hour.Milliseconds()
	}
	if c.DefaultRetentionBytes == 0 {
		c.DefaultRetentionBytes = -1
	}
	if c.DefaultMaxMessageBytes <= 0 {
		c.DefaultMaxMessageBytes = 1048588
	}
	if c.DefaultSegmentBytes <= 0 {
		c.DefaultSegmentBytes = 128 << 20
	}
	if c.RetentionCheck <= 0 {
		c.RetentionCheck = time.Minute
	}
	if c.OffsetsRetentionCheck <= 0 {
		c.OffsetsRetentionCheck = 10 * time.Minute
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 64
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = defaultMaxConnections()
	}
	if c.ConnectionsMaxIdle <= 0 {
		c.ConnectionsMaxIdle = 10 * time.Minute
	}
	if c.RequestReadTimeout <= 0 {
		c.RequestReadTimeout = 30 * time.Second
	}
	if c.GoneLeaderWait <= 0 {
		c.GoneLeaderWait = 3 * time.Second
	}
	if c.QueuedMaxRequestBytes <= 0 {
		c.QueuedMaxRequestBytes = 2 * int64(c.MaxFrame)
	}
	c.QueuedMaxRequestBytes = max(c.QueuedMaxRequestBytes, int64(c.MaxFrame)) // one frame always fits
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.TopicsChanged == nil {
		c.TopicsChanged = func() {}
	}
}

// BrokerInfo is one broker as clients see it in Metadata.
type BrokerInfo struct {
	NodeID int32
	Host   string
	Port   int32
	Rack   string
}

// Cluster is what the broker needs to know about the other brokers.
type Cluster interface {
	// Brokers lists the brokers clients may connect to (alive ones).
	Brokers() []BrokerInfo
	// ControllerID is the node id of the controller, or -1.
	ControllerID() int32
	// Leader returns the leader of a partition and its leader epoch.
	Leader(topic string, partition int32) (node int32, epoch int32, ok bool)
}

// single is the Cluster of a broker running alone: it leads everything.
type single struct{ b *Broker }

func (s single) Brokers() []BrokerInfo { return []BrokerInfo{s.b.self()} }
func (s single) ControllerID() int32   { return s.b.cfg.ID }
func (s single) Leader(string, int32) (int32, int32, bool) {
	return s.b.cfg.ID, 0, true
}

// Broker is one kaas broker.
type Broker struct {
	cfg    Config
	log    *slog.Logger
	topics *topics.Registry
	coord  *coord.Coordinator
	txn    *txn.Coordinator
	peers  peers
	// configsGen is the topic registry generation whose configs the open
	// partitions have (applyTopicConfigs; the maintenance goroutine's).
	configsGen uint64
	// image is the consumer groups' view of the topics as of registry
	// generation imageGen (consumerImage).
	imageMu  sync.Mutex // guards image, imageGen
	image    *cgroup.Image
	imageGen uint64
	// groupConfigs holds the configs set on groups (IncrementalAlterConfigs,
	// DescribeConfigs of GROUP resources).
	groupConfigs *groupconfig.Store
	clusterID    string
	pids         *pidAllocator

	srvMu sync.Mutex // guards srv
	srv   *server

	partMu  sync.Mutex // guards parts, opening
	parts   map[tp]*partition
	opening map[tp]chan struct{} // closed when the partition's open finished
	probes  probes               // which brokers' addresses refuse connections (gone_leaders.go)
	hw      notifier             // wakes long-polling fetches when a high watermark moves
	applied notifier             // wakes requests waiting for a newer assignment (catchUp)

	ctx    context.Context
	cancel context.CancelFunc
	// closing is closed when Close begins: parked fetches answer at once.
	closing chan struct{}
	wg      sync.WaitGroup // background goroutines owned by the broker

	closeOnce sync.Once
	closeErr  error

	clientErrs clientErrors // rate-limits client error log lines (client_errors.go)
	panics     panicLog     // handler panics whose stack was logged (panics.go)
}

func (b *Broker) now() time.Time { return b.cfg.Now() }

// Coordinator is the group coordinator this broker serves with.
func (b *Broker) Coordinator() *coord.Coordinator { return b.coord }

type tp struct {
	topic     string
	partition int32
}

// New opens the broker's state on the data dir. Call Serve to accept clients.
func New(cfg Config) (*Broker, error) {
	cfg.setDefaults()
	if err := cfg.validateTopicDefaults(); err != nil {
		return nil, err
	}
	if cfg.DataDir == "" {
		return nil, errors.New("broker: data dir is required")
	}
	if cfg.Coordinator == nil {
		return nil, errors.New("broker: Config.Coordinator is required (node assembles a broker)")
	}
	if err := os.MkdirAll(volume.ClusterDir(cfg.DataDir), 0o755); err != nil {
		return nil, fmt.Errorf("broker: data dir: %w", err)
	}
	log := cfg.Logger.With("broker", volume.BrokerName(cfg.ID))
	reg, err := topics.Open(cfg.DataDir, log)
	if err != nil {
		return nil, err
	}
	cid, err := clusterID(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{
		cfg: cfg, log: log, topics: reg, clusterID: cid, groupConfigs: cfg.GroupConfigs,
		pids:  newPIDAllocator(volume.ProducerIDsDir(cfg.DataDir), cfg.ID),
		parts: map[tp]*partition{}, opening: map[tp]chan struct{}{},
		ctx: ctx, cancel: cancel, closing: make(chan struct{}),
	}
	if b.groupConfigs == nil {
		b.groupConfigs = groupconfig.Open(cfg.DataDir)
	}
	if b.cfg.Cluster == nil {
		b.cfg.Cluster = single{b}
	}
	b.coord = cfg.Coordinator
	b.coord.SetTopics(b.consumerImage)
	b.txn, err = txn.New(txn.Config{
		Me: volume.BrokerName(cfg.ID), Dir: volume.TransactionsDir(cfg.DataDir),
		Logger: log, Grant: b.coord.GrantTxn,
		NewProducerID: b.pids.next, Markers: b, Now: cfg.Now, Writes: cfg.Writes,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	b.wg.Add(2)
	go b.housekeeping()
	go b.txnSweeper()
	return b, nil
}

// Topics exposes the topic registry (for the cluster runtime and tests).
func (b *Broker) Topics() *topics.Registry { return b.topics }

// ClusterID is the id shared by every broker on the volume.
func (b *Broker) ClusterID() string { return b.clusterID }

// clusterIDPrefix starts every cluster id kaas makes.
const clusterIDPrefix = "kaas-"

// clusterID reads or creates <data>/__cluster/cluster.json.
func clusterID(dataDir string) (string, error) {
	path := volume.ClusterIDPath(dataDir)
	var f struct {
		ClusterID string `json:"clusterId"`
	}
	for range 3 {
		data, err := os.ReadFile(path)
		if err == nil {
			if err := json.Unmarshal(data, &f); err != nil {
				return "", fmt.Errorf("broker: %s is unreadable: %w", path, err)
			}
			if f.ClusterID == "" {
				return "", fmt.Errorf("broker: %s holds no clusterId", path)
			}
			return f.ClusterID, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("broker: cluster id: %w", err)
		}
		var id [16]byte
		_, _ = rand.Read(id[:])
		f.ClusterID = clusterIDPrefix + hex.EncodeToString(id[:8])
		data, _ = json.Marshal(f)
		if err := fsutil.CreateExclusive(path, data); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("broker: cluster id: %w", err)
		}
	}
	return "", fmt.Errorf("broker: cluster id: %s keeps vanishing", path)
}

func (b *Broker) self() BrokerInfo {
	host, port := "127.0.0.1", int32(9092)
	addr := b.cfg.Advertise
	if addr == "" {
		addr = b.Addr()
	}
	if h, p, err := splitHostPort(addr); err == nil {
		host, port = h, p
	}
	return BrokerInfo{NodeID: b.cfg.ID, Host: host, Port: port, Rack: b.cfg.Rack}
}

// housekeeping runs retention and the topic registry refresh until Close.
// Runs on its own goroutine, owned by the broker.
func (b *Broker) housekeeping() {
	defer b.wg.Done()
	retention := time.NewTicker(b.cfg.RetentionCheck)
	defer retention.Stop()
	offsetsRetention := time.NewTicker(b.cfg.OffsetsRetentionCheck)
	defer offsetsRetention.Stop()
	refresh := time.NewTicker(time.Second)
	defer refresh.Stop()
	b.cleanTemp()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-refresh.C:
			before := b.topics.All()
			if err := b.topics.Refresh(); err != nil {
				b.log.Warn("topic registry refresh failed", "err", err)
			}
			for _, t := range before {
				if now, ok := b.topics.Get(t.Name); !ok || now.ID != t.ID {
					b.purgeTopicOffsets(t.Name) // deleted by another broker
				}
			}
			b.dropStalePartitions()
			b.applyTopicConfigs()
		case <-offsetsRetention.C:
			b.coord.ExpireOffsets(b.ctx)
			b.cleanTemp()
		case <-retention.C:
			b.enforceRetention()
			if n := b.coord.EvictIdle(idleGroupEviction); n > 0 {
				b.log.Debug("idle groups evicted from memory", "groups", n)
			}
		}
	}
}

// tempAge is how old a group file's temp file must be to be a crashed
// writer's: a live write keeps one for the time of a write and an fsync.
const tempAge = time.Hour

// cleanTemp removes the group files' temp files that crashed writers left.
func (b *Broker) cleanTemp() {
	n, err := b.coord.CleanTemp(b.ctx, tempAge)
	if err != nil && b.ctx.Err() == nil {
		b.log.Warn("removing temp files left by crashed writers failed", "err", err)
	}
	if n > 0 {
		b.log.Info("removed temp files left by crashed writers", "files", n, "older_than", tempAge)
	}
}

// txnSweeper aborts timed-out transactions and completes prepared ones a
// previous coordinator left, every second (and looks for such work on the
// volume every ten). Runs on its own goroutine, owned by the broker.
func (b *Broker) txnSweeper() {
	defer b.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
			if b.coord.Serving() {
				b.txn.Sweep(b.ctx, i%10 == 0)
			}
		}
	}
}

// applyTopicConfigs gives the open partition logs their topic's configs
// as the registry has them now (IncrementalAlterConfigs, here or on the
// controller): segment size, retention, max message size and whether
// retention deletes. It runs on the maintenance goroutine, the only
// reader of partition.deletes after the partition is published; a
// registry that has not changed since the last call costs nothing.
func (b *Broker) applyTopicConfigs() {
	gen := b.topics.Gen()
	if gen == b.configsGen {
		return
	}
	b.configsGen = gen
	b.partMu.Lock()
	ps := make([]*partition, 0, len(b.parts))
	for _, p := range b.parts {
		ps = append(ps, p)
	}
	b.partMu.Unlock()
	for _, p := range ps {
		t, ok := b.topics.Get(p.topic)
		if !ok || t.ID != p.topicID {
			continue
		}
		p.log.SetOptions(b.logOptions(t, p.epoch))
		p.deletes = t.Deletes()
	}
}

func (b *Broker) enforceRetention() {
	b.partMu.Lock()
	ps := make([]*partition, 0, len(b.parts))
	for _, p := range b.parts {
		ps = append(ps, p)
	}
	b.partMu.Unlock()
	for _, p := range ps {
		if !p.deletes {
			continue
		}
		n, err := p.log.EnforceRetention()
		if err != nil {
			b.log.Warn("retention failed", "topic", p.topic, "partition", p.index, "err", err)
		} else if n > 0 {
			b.log.Info("retention deleted segments", "topic", p.topic, "partition", p.index, "segments", n)
		}
	}
}

// Close stops the broker: the listener (if serving) shuts down gracefully
// within ctx, then every partition log is closed. Later calls return the
// first call's result.
func (b *Broker) Close(ctx context.Context) error {
	b.closeOnce.Do(func() { b.closeErr = b.close(ctx) })
	return b.closeErr
}

func (b *Broker) close(ctx context.Context) error {
	close(b.closing)
	b.srvMu.Lock()
	srv := b.srv
	b.srvMu.Unlock()
	var err error
	if srv != nil {
		err = srv.shutdown(ctx)
	}
	b.cancel()
	b.wg.Wait()
	b.peers.close()
	b.closeProbes()
	b.partMu.Lock()
	parts := b.parts
	b.parts = map[tp]*partition{}
	b.partMu.Unlock()
	for _, p := range parts {
		if cerr := p.close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// idleGroupEviction is how long a group without members or commits stays in
// memory (its files stay on the volume).
const idleGroupEviction = 10 * time.Minute

// partition is an open log this broker leads.
type partition struct {
	topic   string
	index   int32
	topicID topics.ID
	epoch   int32
	deletes bool
	log     *storage.Log

	kick chan struct{} // asks the flusher to Sync
	done chan struct{} // closed when the flusher has stopped
	stop chan struct{}
}

// flusher syncs the log soon after acks=0/1 appends so that the high
// watermark advances without a waiting producer, and wakes long-polling
// fetches when the high watermark moves. Runs on its own goroutine, owned by
// the partition.
func (p *partition) flusher(log *slog.Logger, hw *notifier) {
	defer close(p.done)
	for {
		advanced := p.log.Wait()
		select {
		case <-p.stop:
			return
		case <-advanced:
			hw.broadcast()
		case <-p.kick:
			if err := p.log.Sync(); err != nil && !errors.Is(err, storage.ErrClosed) {
				log.Warn("background sync failed", "topic", p.topic, "partition", p.index, "err", err)
			}
		}
	}
}

func (p *partition) flushSoon() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *partition) close() error {
	close(p.stop)
	<-p.done
	return p.log.Close()
}

var (
	errUnknownTopic = errors.New("unknown topic or partition")
	errNotLeader    = errors.New("not the leader")
	errNoLeader     = errors.New("leader not available")
)

// partitionFor returns the open log of a partition this broker leads,
// opening it (taking it over with the current leader epoch) on first use.
func (b *Broker) partitionFor(topic string, idx int32) (*partition, error) {
	t, ok := b.topics.Get(topic)
	if !ok || idx < 0 || idx >= t.Partitions {
		return nil, errUnknownTopic
	}
	node, epoch, ok := b.cfg.Cluster.Leader(topic, idx)
	if !ok {
		return nil, errNoLeader
	}
	if node != b.cfg.ID {
		return nil, errNotLeader
	}
	key := tp{topic, idx}
	for {
		b.partMu.Lock()
		if p, ok := b.parts[key]; ok && p.epoch == epoch && p.topicID == t.ID {
			b.partMu.Unlock()
			return p, nil
		}
		if wait, ok := b.opening[key]; ok {
			// Another request is opening this partition: wait for it rather
			// than hold the broker-wide lock through a recovery scan.
			b.partMu.Unlock()
			<-wait
			continue
		}
		stale := b.parts[key]
		delete(b.parts, key)
		opened := make(chan struct{})
		b.opening[key] = opened
		b.partMu.Unlock()

		if stale != nil { // led here at an older epoch, or a deleted topic's log
			if err := stale.close(); err != nil {
				b.log.Warn("closing partition failed", "topic", topic, "partition", idx, "err", err)
			}
		}
		l, err := b.openLog(t, idx, epoch)
		var p *partition
		if err == nil {
			p = &partition{
				topic: topic, index: idx, topicID: t.ID, epoch: epoch, deletes: t.Deletes(), log: l,
				kick: make(chan struct{}, 1), done: make(chan struct{}), stop: make(chan struct{}),
			}
			go p.flusher(b.log, &b.hw)
			b.log.Info("partition opened", "topic", topic, "partition", idx, "epoch", epoch,
				"end_offset", l.EndOffset(), "log_start", l.LogStartOffset())
		}
		b.partMu.Lock()
		delete(b.opening, key)
		if p != nil {
			b.parts[key] = p
		}
		close(opened)
		b.partMu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("open %s/%d: %w", topic, idx, err)
		}
		return p, nil
	}
}

// defaultSegmentMs is Kafka's log.roll.hours default, 7 days: a segment
// rolls by age at most this long after its first batch.
const defaultSegmentMs = 7 * 24 * 60 * 60 * 1000

func (b *Broker) logOptions(t *topics.Topic, epoch int32) storage.Options {
	return storage.Options{
		SegmentBytes:    t.Int64("segment.bytes", b.cfg.DefaultSegmentBytes),
		SegmentMs:       t.Int64("segment.ms", defaultSegmentMs),
		RetentionMs:     t.Int64("retention.ms", b.cfg.DefaultRetentionMs),
		RetentionBytes:  t.Int64("retention.bytes", b.cfg.DefaultRetentionBytes),
		MaxMessageBytes: int32(t.Int64("max.message.bytes", int64(b.cfg.DefaultMaxMessageBytes))),
		LeaderEpoch:     epoch,
		Logger:          b.log,
		Owner:           t.ID.String(),
	}
}

// AssignmentChanged tells the broker that leadership may have moved: it
// closes the logs of partitions it no longer leads at their epoch, wakes
// the fetches parked on them and the requests waiting to catch up with a
// client (catchUp), and drops the probes of brokers no longer listed.
func (b *Broker) AssignmentChanged() {
	b.dropStalePartitions()
	b.pruneProbes() // gone_leaders.go
	b.applied.broadcast()
}

// dropStalePartitions closes logs of deleted topics and of partitions this
// broker no longer leads.
func (b *Broker) dropStalePartitions() {
	b.partMu.Lock()
	var stale []*partition
	for key, p := range b.parts {
		t, ok := b.topics.Get(key.topic)
		node, epoch, lok := b.cfg.Cluster.Leader(key.topic, key.partition)
		if ok && t.ID == p.topicID && lok && node == b.cfg.ID && epoch == p.epoch {
			continue
		}
		delete(b.parts, key)
		stale = append(stale, p)
	}
	b.partMu.Unlock()
	for _, p := range stale {
		b.log.Info("partition closed: no longer led here", "topic", p.topic, "partition", p.index, "epoch", p.epoch)
		if err := p.close(); err != nil {
			b.log.Warn("closing partition failed", "topic", p.topic, "partition", p.index, "err", err)
		}
	}
	if len(stale) > 0 {
		// Fetches parked on those partitions answer now (NOT_LEADER_OR_FOLLOWER,
		// with the new leader) instead of at their max wait.
		b.hw.broadcast()
	}
}

// purgeTopicOffsets removes a deleted topic's committed offsets from the
// groups this broker coordinates, so that a re-created topic never inherits
// them.
func (b *Broker) purgeTopicOffsets(topic string) {
	if err := b.coord.DeleteTopic(b.ctx, topic); err != nil {
		b.log.Warn("removing a deleted topic's committed offsets failed", "topic", topic, "err", err)
	}
}

// removeTopicData closes this broker's logs of a deleted topic and removes
// its directory from the volume.
func (b *Broker) removeTopicData(t *topics.Topic) error {
	b.partMu.Lock()
	var open []*partition
	for key, p := range b.parts {
		if key.topic == t.Name {
			delete(b.parts, key)
			open = append(open, p)
		}
	}
	b.partMu.Unlock()
	for _, p := range open {
		if err := p.close(); err != nil {
			b.log.Warn("closing partition failed", "topic", p.topic, "partition", p.index, "err", err)
		}
	}
	return moveAside(b.cfg.DataDir, volume.TopicDir(b.cfg.DataDir, t.Name), t.ID.String())
}

// moveAside renames dir into the deleted folder under name (a topic's id:
// a topic name of up to 249 characters plus an id would pass the file
// system's 255-byte limit), makes the rename durable in both folders, and
// removes it. So a topic created again under the same name starts from an
// empty directory, and a crash cannot bring the old one back.
func moveAside(dataDir, dir, name string) error {
	deleted := volume.DeletedDir(dataDir)
	if err := os.MkdirAll(deleted, 0o755); err != nil {
		return err
	}
	trash := filepath.Join(deleted, name)
	if err := os.Rename(dir, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := fsutil.SyncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := fsutil.SyncDir(deleted); err != nil {
		return err
	}
	return os.RemoveAll(trash)
}

// openLog opens partition idx of t at epoch. A directory a crash left
// behind from a deleted topic of the same name (another topic id in its
// owner file) is moved aside first.
func (b *Broker) openLog(t *topics.Topic, idx, epoch int32) (*storage.Log, error) {
	dir := partitionDir(b.cfg.DataDir, t.Name, idx)
	l, err := storage.Open(dir, b.logOptions(t, epoch))
	if !errors.Is(err, storage.ErrOtherOwner) {
		return l, err
	}
	b.log.Warn("a deleted topic's partition was left on the volume; moving it aside", "topic", t.Name, "partition", idx, "err", err)
	if err := moveAside(b.cfg.DataDir, dir, fmt.Sprintf("%s-%d-stale-%d", t.ID, idx, b.now().UnixNano())); err != nil {
		return nil, fmt.Errorf("move aside %s: %w", dir, err)
	}
	return storage.Open(dir, b.logOptions(t, epoch))
}

func partitionDir(dataDir, topic string, idx int32) string {
	return volume.PartitionDir(dataDir, topic, idx)
}
