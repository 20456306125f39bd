package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaas-dev/kaas/internal/fsutil"
	"github.com/kaas-dev/kaas/internal/volume"
)

// Config configures a broker's cluster runtime.
type Config struct {
	DataDir string
	ID      string // broker id in assignment.json, e.g. "kaas-0"
	NodeID  int32
	Host    string // advertised host and port, for Metadata
	Port    int32
	Rack    string

	// ClusterListen is the address of the cluster listener, where the other
	// brokers send their liveness reports (docs/cluster.md, "Liveness");
	// "" keeps liveness on the volume alone (unit tests).
	ClusterListen string

	ReportInterval time.Duration // default 1s
	DeadAfter      time.Duration // default 3s: kill -9 is detected within this
	PollInterval   time.Duration // assignment poll and controller tick; default 200ms
	// StallLimit is how long the runtime loop may wait on one volume call while
	// the heartbeat keeps reporting this broker alive over the network
	// (docs/cluster.md, "A volume whose calls stall"); default 15s.
	StallLimit time.Duration

	Elector Elector // nil: the FileElector with TTL = DeadAfter
	// Volume reaches the runtime's files; nil: OS (tests model a network
	// file system with a view that shows other brokers' writes late).
	Volume Volume
	Logger *slog.Logger

	// Topics lists the topics (the controller assigns their partitions).
	Topics func() []TopicInfo
	// ActiveGroups lists the groups this broker coordinates and that are in
	// use; reported to the controller for group balancing.
	ActiveGroups func() []string
	// Writes counts this broker's group and transaction file writes in
	// flight; the reports carry the oldest (Report.Writing), sent at once
	// when it changes, and a write in flight for longer than StallLimit
	// silences the reports as a stalled loop does. nil: none counted.
	Writes *fsutil.Writes
}

func (c *Config) setDefaults() {
	if c.ReportInterval <= 0 {
		c.ReportInterval = time.Second
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = 3 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	if c.StallLimit <= 0 {
		c.StallLimit = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Volume == nil {
		c.Volume = OS{}
	}
	if c.Topics == nil {
		c.Topics = func() []TopicInfo { return nil }
	}
	if c.ActiveGroups == nil {
		c.ActiveGroups = func() []string { return nil }
	}
}

// Hook is called, on the runtime goroutine, after an assignment is applied.
// prev is nil for the first one.
type Hook func(prev, next *Assignment)

// Runtime runs one broker's part of the cluster: it reports liveness,
// campaigns for the controller role, applies assignments, and, while it is
// the controller, computes and writes them.
type Runtime struct {
	cfg  Config
	log  *slog.Logger
	path string // assignment.json

	hooks []Hook // set before Start

	current atomic.Pointer[Assignment]
	ready   chan struct{} // closed once an assignment lists this broker alive
	readyOn sync.Once
	leader  atomic.Bool
	known   atomic.Int64 // highest controller epoch known
	// fresh is the start of the newest step whose liveness report
	// succeeded and after which an assignment poll completed; applied is
	// what each broker's report says it acts on. Written by the loop,
	// read by request goroutines (Fresh, Settled).
	fresh   atomic.Pointer[time.Time]
	applied atomic.Pointer[map[string]appliedStamp]
	// written is signalled when the oldest write in flight changed: the
	// heartbeat sends a report at once.
	written chan struct{}
	paused  atomic.Bool // Pause in progress: the cluster listener answers nothing

	peers *peers // nil without ClusterListen

	// repMu orders the reports: the loop's and the heartbeat's take their
	// seq under it, so a higher seq never carries older content.
	repMu   sync.Mutex
	seq     int64   // guarded by repMu
	lastRep *Report // guarded by repMu: the loop's latest report
	// progress is when the loop last finished a step or a volume call (or
	// started); the heartbeat speaks for the loop only while it is recent.
	progress atomic.Pointer[time.Time]
	sentAt   atomic.Pointer[time.Time] // the latest report sent to the peers

	// Owned by the loop goroutine.
	watch       *watcher
	incarnation string
	state       atomic.Value // string: running, draining, stopped
	lastReport  time.Time
	reportedAt  time.Time // the step start of the last successful report
	lastStat    string    // Volume.Stamp of assignment.json as last read or written
	lastElect   time.Time
	election    Election
	// elected is a copy of election for the heartbeat (updateFresh).
	elected atomic.Pointer[Election]
	removed map[string]bool

	wakeup chan struct{}
	pause  chan time.Duration
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop has ended
	beat   chan struct{} // closed when the heartbeat has ended
}

// New prepares a runtime; Start runs it.
func New(cfg Config) (*Runtime, error) {
	cfg.setDefaults()
	if cfg.ID == "" || cfg.DataDir == "" {
		return nil, errors.New("cluster: ID and DataDir are required")
	}
	for _, d := range []string{reportsDir(cfg.DataDir), removalsDir(cfg.DataDir)} {
		if err := cfg.Volume.MkdirAll(d); err != nil {
			return nil, err
		}
	}
	var inc [8]byte
	_, _ = rand.Read(inc[:])
	r := &Runtime{
		cfg: cfg, log: cfg.Logger.With("broker", cfg.ID),
		path:        volume.AssignmentPath(cfg.DataDir),
		ready:       make(chan struct{}),
		watch:       newWatcher(),
		incarnation: hex.EncodeToString(inc[:]),
		removed:     map[string]bool{},
		wakeup:      make(chan struct{}, 1),
		pause:       make(chan time.Duration, 1),
		done:        make(chan struct{}),
		beat:        make(chan struct{}),
		written:     make(chan struct{}, 1),
	}
	cfg.Writes.OnChange(func() {
		select {
		case r.written <- struct{}{}:
		default:
		}
	})
	r.state.Store(StateRunning)
	cfg.Volume = loopVolume{Volume: cfg.Volume, progress: &r.progress}
	r.cfg.Volume = cfg.Volume
	if r.cfg.Elector == nil {
		e, err := newFileElector(cfg.Volume, cfg.DataDir, cfg.ID, cfg.DeadAfter, r.reportedStopped, r.log)
		if err != nil {
			return nil, err
		}
		if cfg.ClusterListen != "" {
			e.holding = r.holding
		}
		r.cfg.Elector = e
	}
	if cfg.ClusterListen != "" {
		p, err := listenPeers(cfg.ID, cfg.ClusterListen, cfg.Host, max(cfg.ReportInterval, 500*time.Millisecond), r.log)
		if err != nil {
			return nil, err
		}
		p.status = r.status
		p.assignment = r.current.Load
		r.peers = p
	}
	return r, nil
}

// OnApply registers a hook. Call before Start.
func (r *Runtime) OnApply(h Hook) { r.hooks = append(r.hooks, h) }

// ID is this broker's id.
func (r *Runtime) ID() string { return r.cfg.ID }

// Current is the assignment in force (nil before the first).
func (r *Runtime) Current() *Assignment { return r.current.Load() }

// IsController reports whether this broker holds the controller role.
func (r *Runtime) IsController() bool { return r.leader.Load() }

// KnownEpoch is the highest controller epoch this broker knows.
func (r *Runtime) KnownEpoch() int64 { return r.known.Load() }

// Ready is closed once an applied assignment lists this broker alive.
func (r *Runtime) Ready() <-chan struct{} { return r.ready }

// Start runs the runtime loop (and the cluster listener) until Stop.
func (r *Runtime) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	now := time.Now()
	r.progress.Store(&now)
	if r.peers != nil {
		r.peers.serve()
		go r.heartbeat(ctx)
	} else {
		close(r.beat)
	}
	go r.loop(ctx)
}

// ClusterAddr is the bound cluster listener ("" without one).
func (r *Runtime) ClusterAddr() string {
	if r.peers == nil {
		return ""
	}
	return r.peers.Addr()
}

// status is this broker's answer to a peer's report.
func (r *Runtime) status() peerAck {
	ack := peerAck{ID: r.cfg.ID, Leader: r.leader.Load(), KnownEpoch: r.known.Load()}
	if a := r.current.Load(); a != nil {
		ack.AppliedEpoch, ack.AppliedVersion = a.ControllerEpoch, a.AssignmentVersion
	}
	if r.paused.Load() { // a stalled broker answers nothing (tests' Pause)
		ack.ID = ""
	}
	return ack
}

// holding judges the controller of epoch from its reports (FileElector):
// it holds the role while a report of it arrived within DeadAfter and its
// latest report does not say it stopped leading at that epoch (a report
// made before it knew the epoch says nothing). Without any report of it
// yet, the record decides (ok false). Runs on the loop.
func (r *Runtime) holding(id string, epoch int64, now time.Time) (holds, ok bool) {
	t, seen := r.watch.changed[id]
	if !seen {
		return false, false
	}
	if now.Sub(t) >= r.cfg.DeadAfter {
		return false, true
	}
	rep := r.watch.last[id]
	if rep.KnownEpoch >= epoch && !rep.Leader && rep.State != "" {
		return false, true
	}
	return true, true
}

// Poke makes the loop run now (e.g. a topic was created).
func (r *Runtime) Poke() {
	select {
	case r.wakeup <- struct{}{}:
	default:
	}
}

// Drain marks this broker draining and waits until the applied assignment
// gives it no partition and the routing no longer sends it groups (its row
// is no longer alive), then lingers (see below), or until ctx ends.
//
// The linger: the broker keeps answering until every broker acts on the
// hand-off (Settled), so that FindCoordinator and Metadata at any broker
// point past this one, and RetryGrace more for requests already on their way.
// Those get NOT_COORDINATOR or NOT_LEADER_OR_FOLLOWER instead of a refused
// connection. A broker the metadata no longer lists names no new leader in
// those answers (KIP-951 hints; see the broker's leader_hints.go): clients
// refresh their metadata, and one that refreshed from a broker still acting
// on the older assignment asks here again after its retry backoff. So the
// linger goes on RetryGrace past the moment every broker acts on the
// hand-off, and one that asked again is sent on by fresh metadata, not left
// with a refused connection and a metadata refresh that its client puts
// off (franz-go: metadata min age, 5 s). The linger is bounded by DeadAfter.
func (r *Runtime) Drain(ctx context.Context) error {
	r.state.Store(StateDraining)
	r.Poke()
	r.log.Info("draining: handing partitions and groups to other brokers")
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var handed, settled time.Time
	for {
		a := r.Current()
		if a != nil && !a.IsAlive(r.cfg.ID) && !leadsAny(a, r.cfg.ID) {
			if handed.IsZero() {
				handed = time.Now()
				r.log.Info("draining: handed off; answering until every broker acts on it", "epoch", a.ControllerEpoch, "version", a.AssignmentVersion)
			}
			if settled.IsZero() && time.Since(handed) >= r.cfg.PollInterval && r.Settled(a) {
				settled = time.Now()
			}
			if (!settled.IsZero() && time.Since(settled) >= RetryGrace) || time.Since(handed) >= r.cfg.DeadAfter {
				return nil
			}
		}
		if a != nil && !othersAlive(a, r.cfg.ID) {
			r.log.Info("draining: no other alive broker to take over; stopping")
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// RetryGrace is how long a drained broker goes on answering once every
// broker acts on the hand-off: longer than the first retry backoff of the
// common clients (100 ms in the Java client and librdkafka, 250 ms or
// more in franz-go), so that a client whose metadata refresh was answered
// from an older assignment is sent on from here once more.
const RetryGrace = time.Second

func othersAlive(a *Assignment, me string) bool {
	for _, b := range a.Brokers {
		if b.ID != me && b.Health == Alive {
			return true
		}
	}
	return false
}

func leadsAny(a *Assignment, id string) bool {
	for _, p := range a.Partitions {
		if p.Broker == id {
			return true
		}
	}
	return false
}

// Stop reports this broker stopped, resigns the controller role, and ends
// the loop.
func (r *Runtime) Stop(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	for _, ch := range []chan struct{}{r.done, r.beat} {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.state.Store(StateStopped)
	err := r.report(time.Now())
	if rerr := r.cfg.Elector.Resign(ctx); rerr != nil && err == nil {
		err = rerr
	}
	r.leader.Store(false)
	if r.peers != nil {
		r.peers.close() // after the stopped report reached the peers it could
	}
	return err
}

func (r *Runtime) reportedStopped(id string) bool {
	rep, ok := r.watch.last[id]
	return ok && (rep.State == StateStopped || r.gone(id))
}

// gone reports whether broker id's process is gone: its cluster listener
// refused a report sent after its own last report was read here, and it has
// since missed a report (a report interval without one). Nothing listens at
// the address it reported from, so it is not merely slow or frozen (those
// still accept connections) but exited or killed; the missed report leaves
// the dying process's last writes (the kernel flushes its open files as it
// exits) time to land before another broker takes its partitions. A
// restarted process reports again (at the same or a new address) and is
// alive from then on. Runs on the loop.
func (r *Runtime) gone(id string) bool {
	if r.peers == nil {
		return false
	}
	at, ok := r.peers.refusedSince(id)
	changed, seen := r.watch.changed[id]
	return ok && seen && at.After(changed) && time.Since(changed) >= r.cfg.ReportInterval
}

// loop is the runtime goroutine: report, observe, elect, apply, control.
func (r *Runtime) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		r.step(ctx, time.Now())
		done := time.Now()
		r.progress.Store(&done)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wakeup:
		case d := <-r.pause:
			r.paused.Store(true)
			select {
			case <-ctx.Done():
				r.paused.Store(false)
				return
			case <-time.After(d):
			}
			r.paused.Store(false)
			done := time.Now() // not stalled on the volume: paused
			r.progress.Store(&done)
		}
	}
}

func (r *Runtime) step(ctx context.Context, now time.Time) {
	if now.Sub(r.lastReport) >= r.cfg.ReportInterval || r.state.Load() != r.lastState() {
		if err := r.report(now); err != nil {
			r.log.Warn("liveness report failed", "err", err)
		}
	}
	if reports, unreadable, err := readReports(r.cfg.Volume, r.cfg.DataDir); err != nil {
		r.log.Warn("reading liveness reports failed", "err", err)
	} else {
		if r.peers != nil {
			r.peers.learn(reports)
			reports = r.merge(reports)
		}
		// A change counts from when it was read, not from the start of
		// the step: a step can wait on the volume for seconds, and a
		// report read after that wait is that recent.
		r.watch.observe(time.Now(), reports, unreadable)
		r.publishApplied()
	}
	r.learnEpochs()
	if now.Sub(r.lastElect) >= r.cfg.PollInterval*2 || r.leader.Load() {
		el, err := r.cfg.Elector.Tick(ctx, now)
		if err != nil {
			r.log.Warn("election tick failed", "err", err)
		}
		r.lastElect = now
		r.election = el
		r.elected.Store(&el)
		if el.Epoch > r.known.Load() {
			r.known.Store(el.Epoch)
		}
		r.leader.Store(el.Leader && el.Epoch >= r.known.Load())
	}
	applied := r.poll()
	if r.peers != nil && r.fetchNewer(ctx) {
		applied = true
	}
	if applied {
		// Say at once that this broker acts on the new assignment: the
		// brokers gaining groups wait for it (Settled).
		if err := r.report(now); err != nil {
			r.log.Warn("liveness report failed", "err", err)
		}
	}
	r.updateFresh(now)
	if r.leader.Load() {
		r.control(ctx, now)
	}
}

// merge overlays the reports received over the network on those read from
// the volume: for each other broker, the newer of the two (the network's
// when they come from different incarnations: it is the live one).
func (r *Runtime) merge(files map[string]Report) map[string]Report {
	for id, net := range r.peers.received() {
		if id == r.cfg.ID {
			continue
		}
		f, ok := files[id]
		if !ok || f.Incarnation != net.Incarnation || net.Seq >= f.Seq {
			files[id] = net
		}
	}
	return files
}

// learnEpochs raises the known controller epoch to the highest any peer
// reports knowing: a controller that was replaced while it could not see
// the new epoch's record (a stalled or caching volume) stops controlling at
// once. Runs on the loop.
func (r *Runtime) learnEpochs() {
	if r.peers == nil {
		return
	}
	top := r.known.Load()
	for _, rep := range r.watch.last {
		top = max(top, rep.KnownEpoch)
	}
	for _, a := range r.peers.lastAcks() {
		top = max(top, a.ack.KnownEpoch)
	}
	if top > r.known.Load() {
		r.known.Store(top)
		if r.leader.Load() && r.election.Epoch < top {
			r.log.Warn("a higher controller epoch is known to peers; no longer controlling",
				"epoch", r.election.Epoch, "known_epoch", top)
			r.leader.Store(false)
		}
	}
}

// fetchNewer applies, over the network, a newer assignment than this
// broker's that a peer (normally the controller) reports acting on: the
// volume may show assignment.json late. It reports whether one was applied.
func (r *Runtime) fetchNewer(ctx context.Context) bool {
	cur := r.current.Load()
	best, from := cur, ""
	for id, a := range r.peers.lastAcks() {
		cand := &Assignment{ControllerEpoch: a.ack.AppliedEpoch, AssignmentVersion: a.ack.AppliedVersion}
		if a.ack.AppliedVersion > 0 && cand.Newer(best) {
			best, from = cand, id
		}
	}
	if from == "" {
		return false
	}
	fctx, cancel := context.WithTimeout(ctx, 2*r.cfg.PollInterval)
	defer cancel()
	a, err := r.peers.fetchAssignment(fctx, from)
	if err != nil {
		r.log.Debug("fetching a newer assignment from a peer failed", "peer", from, "err", err)
		return false
	}
	return r.apply(a)
}

// updateFresh records, for Fresh, when this broker's view was last
// confirmed. With peers: a follower's view is confirmed by the controller's
// answer to one of its reports (sent at that time, and this broker already
// applies the assignment the controller applies); the controller's by its
// own lease, and, when it has peers, by a peer's answer showing no higher
// epoch. Without peers: a report on the volume and a poll after it. Runs on
// the loop, and with peers on the heartbeat too: an answer to a report the
// heartbeat sent confirms the view as well, though the loop waits on the
// volume (it reads only atomics and the peers' answers; fresh only moves
// forward).
func (r *Runtime) updateFresh(now time.Time) {
	var at time.Time
	el := r.elected.Load()
	switch {
	case r.peers == nil:
		at = r.reportedAt
	case el == nil:
	case r.leader.Load():
		if r.othersAlive() == 0 {
			at = now // alone: the lease is the only judge
			break
		}
		for _, a := range r.peers.lastAcks() {
			if a.ack.KnownEpoch <= el.Epoch && a.sentAt.After(at) {
				at = a.sentAt
			}
		}
	default:
		a, ok := r.peers.lastAcks()[el.Holder]
		cur := r.current.Load()
		if ok && a.ack.Leader && cur != nil && a.ack.AppliedVersion > 0 &&
			!(&Assignment{ControllerEpoch: a.ack.AppliedEpoch, AssignmentVersion: a.ack.AppliedVersion}).Newer(cur) {
			at = a.sentAt
		}
	}
	if at.IsZero() {
		return
	}
	for {
		old := r.fresh.Load()
		if old != nil && !at.After(*old) {
			return
		}
		if r.fresh.CompareAndSwap(old, &at) {
			return
		}
	}
}

// othersAlive counts the other brokers alive in the applied assignment.
func (r *Runtime) othersAlive() int {
	a := r.current.Load()
	if a == nil {
		return 0
	}
	n := 0
	for _, b := range a.Brokers {
		if b.ID != r.cfg.ID && b.Health == Alive {
			n++
		}
	}
	return n
}

// appliedStamp is the assignment a broker reports acting on, and the
// oldest one under which it reports a write in flight.
type appliedStamp struct {
	epoch, version int64
	writing        *fsutil.Stamp
}

// publishApplied makes the reported applied assignments readable by
// Settled. Runs on the loop goroutine.
func (r *Runtime) publishApplied() {
	m := make(map[string]appliedStamp, len(r.watch.last))
	for id, rep := range r.watch.last {
		m[id] = appliedStamp{rep.AppliedEpoch, rep.AppliedVersion, rep.Writing}
	}
	r.applied.Store(&m)
}

// writing is the oldest assignment a write of this broker's in flight was
// granted under, for the reports.
func (r *Runtime) writing() *fsutil.Stamp {
	if s, ok := r.cfg.Writes.Oldest(); ok {
		return &s
	}
	return nil
}

// stalledFor is how long the loop has been waiting on one volume call, or
// the oldest group or transaction write in flight has been, whichever is
// longer, and which.
func (r *Runtime) stalledFor(now time.Time) (time.Duration, string) {
	wait, what := now.Sub(*r.progress.Load()), "cluster loop"
	if since, ok := r.cfg.Writes.Since(); ok && now.Sub(since) > wait {
		wait, what = now.Sub(since), "a group or transaction file write"
	}
	return wait, what
}

// Fresh reports whether this broker's view of the cluster is recent enough
// to act on: a liveness report succeeded, and an assignment poll completed
// after it, less than DeadAfter - PollInterval ago on this broker's
// monotonic clock. The controller declares a broker dead only after its
// report has not changed for DeadAfter on the controller's clock, and only
// then can another broker take its groups; so a broker that writes only
// while Fresh never writes after a takeover it has not seen. A frozen
// (SIGSTOP) or cut-off broker is not Fresh.
func (r *Runtime) Fresh() bool {
	at := r.fresh.Load()
	return at != nil && time.Since(*at) < r.cfg.DeadAfter-r.cfg.PollInterval
}

// Settled reports whether every broker that may still act on an assignment
// older than a has applied a or a newer one: every row of the newest
// assignment that is not dead, other than this broker, reports an applied
// assignment no older than a, and no write in flight granted under an
// older one.
func (r *Runtime) Settled(a *Assignment) bool { return r.SettledOrLapsed(a, false) }

// SettledOrLapsed is Settled, where with lapsed a row that has not
// reported applying a counts too, unless it reports a write in flight
// granted under an older assignment: a was applied here long enough ago
// that a broker that has not applied it is no longer Fresh and starts no
// write (coord.Config.SettleTimeout); a write it had started is waited
// for until it returns or the broker is declared dead.
func (r *Runtime) SettledOrLapsed(a *Assignment, lapsed bool) bool {
	cur := r.current.Load()
	if cur == nil {
		return false
	}
	mp := r.applied.Load()
	if mp == nil {
		return false
	}
	for _, row := range cur.Brokers {
		if row.Health == Dead || row.ID == r.cfg.ID {
			continue
		}
		st, ok := (*mp)[row.ID]
		if !ok {
			if lapsed {
				continue
			}
			return false
		}
		stamp := fsutil.Stamp{Epoch: a.ControllerEpoch, Version: a.AssignmentVersion}
		if st.writing != nil && st.writing.Less(stamp) {
			return false
		}
		if !lapsed && (fsutil.Stamp{Epoch: st.epoch, Version: st.version}).Less(stamp) {
			return false
		}
	}
	return true
}

func (r *Runtime) lastState() any {
	rep, ok := r.watch.last[r.cfg.ID]
	if !ok || rep.Incarnation != r.incarnation {
		return nil
	}
	return rep.State
}

func (r *Runtime) report(now time.Time) error {
	rep := Report{
		ID: r.cfg.ID, NodeID: r.cfg.NodeID, Host: r.cfg.Host, Port: r.cfg.Port, Rack: r.cfg.Rack,
		State: r.state.Load().(string), Incarnation: r.incarnation, At: now.UTC(),
		Groups: r.cfg.ActiveGroups(),
	}
	if a := r.current.Load(); a != nil {
		rep.AppliedEpoch, rep.AppliedVersion = a.ControllerEpoch, a.AssignmentVersion
	}
	rep.Writing = r.writing()
	rep.KnownEpoch, rep.Leader = r.known.Load(), r.leader.Load()
	if r.peers != nil {
		rep.ClusterAddr = r.peers.Addr()
	}
	r.repMu.Lock()
	r.seq++
	rep.Seq = r.seq
	r.lastRep = &rep
	r.repMu.Unlock()
	if r.peers != nil {
		r.send(rep, now)
	}
	if err := writeReport(r.cfg.Volume, r.cfg.DataDir, rep); err != nil {
		return err
	}
	r.lastReport, r.reportedAt = now, now
	return nil
}

// send broadcasts a report to the peers and notes when.
func (r *Runtime) send(rep Report, now time.Time) {
	r.peers.broadcast(rep, now)
	r.sentAt.Store(&now)
}

// heartbeat re-sends the loop's latest report, with a new seq, to the peers
// whenever a report interval passed without one: the loop sends its reports
// between volume calls, and a network file system can hold one call for
// seconds (docs/volume.md, "Stalls"), which alone must not make this broker
// dead or its controller role lapse. It speaks for the loop only while the
// loop's latest volume call returned (or its latest step ended) within
// StallLimit: a broker stuck on one call for longer goes silent and is
// declared dead. Within that limit it also keeps
// Fresh up to date from the peers' answers (updateFresh). A paused (tests'
// frozen) broker does neither. Runs until ctx ends.
func (r *Runtime) heartbeat(ctx context.Context) {
	defer close(r.beat)
	t := time.NewTicker(max(r.cfg.ReportInterval/4, 10*time.Millisecond))
	defer t.Stop()
	stalled := false
	for {
		now, prompt := time.Time{}, false
		select {
		case <-ctx.Done():
			return
		case now = <-t.C:
		case <-r.written:
			now, prompt = time.Now(), true
		}
		if r.paused.Load() {
			continue
		}
		if wait, what := r.stalledFor(now); wait > r.cfg.StallLimit {
			if !stalled {
				r.log.Error(what+" waiting on the volume for longer than the stall limit; no longer reporting alive",
					"waiting", wait.Round(time.Millisecond), "stall_limit", r.cfg.StallLimit)
				stalled = true
			}
			continue
		}
		if stalled {
			r.log.Info("volume calls returning again; reporting alive")
			stalled = false
		}
		r.updateFresh(now)
		if last := r.sentAt.Load(); !prompt && last != nil && now.Sub(*last) < r.cfg.ReportInterval {
			continue
		}
		r.repMu.Lock()
		if r.lastRep == nil {
			r.repMu.Unlock()
			continue
		}
		rep := *r.lastRep
		r.seq++
		rep.Seq, rep.At = r.seq, now.UTC()
		// What the broker knows of the controller role and its writes
		// in flight is current; the rest is the loop's last word.
		rep.KnownEpoch, rep.Leader = r.known.Load(), r.leader.Load()
		rep.Writing = r.writing()
		r.repMu.Unlock()
		r.send(rep, now)
	}
}

// poll reads assignment.json when it changed and applies it; it reports
// whether a new assignment was applied.
func (r *Runtime) poll() bool {
	st, err := r.cfg.Volume.Stamp(r.path)
	if err != nil {
		return false // missing: keep what we have
	}
	if st != "" && r.lastStat == st {
		return false
	}
	a, err := readAssignment(r.cfg.Volume, r.path)
	if err != nil {
		r.log.Warn("assignment.json unreadable; keeping the current one", "err", err)
		return false
	}
	r.lastStat = st
	return r.apply(a)
}

// apply installs a if it is newer than the current assignment and not from
// a deposed controller.
func (r *Runtime) apply(a *Assignment) bool {
	if known := r.known.Load(); a.ControllerEpoch < known {
		if r.current.Load() == nil {
			// Start-up: the file is what an earlier controller left (it
			// resigned or died); the current one writes a newer one.
			r.log.Info("ignoring the assignment an earlier controller left; waiting for the current controller's",
				"epoch", a.ControllerEpoch, "known_epoch", known, "version", a.AssignmentVersion)
			return false
		}
		r.log.Warn("refusing assignment from a deposed controller",
			"epoch", a.ControllerEpoch, "known_epoch", known, "version", a.AssignmentVersion)
		return false
	}
	prev := r.current.Load()
	if !a.Newer(prev) {
		return false
	}
	if a.ControllerEpoch > r.known.Load() {
		r.known.Store(a.ControllerEpoch)
	}
	r.current.Store(a)
	r.logChanges(prev, a)
	for _, h := range r.hooks {
		h(prev, a)
	}
	if a.IsAlive(r.cfg.ID) {
		r.readyOn.Do(func() { close(r.ready) })
	}
	return true
}

func (r *Runtime) logChanges(prev, next *Assignment) {
	old := map[string]Health{}
	if prev != nil {
		for _, b := range prev.Brokers {
			old[b.ID] = b.Health
		}
	}
	// The controller that decided a change logs it; every other broker
	// applies the same assignment and logs it at debug level, so a
	// cluster's log states each fact once.
	level := slog.LevelDebug
	if next.Controller == r.cfg.ID {
		level = slog.LevelInfo
	}
	for _, b := range next.Brokers {
		if old[b.ID] != b.Health {
			r.log.Log(context.Background(), level, "broker health", "peer", b.ID, "health", string(b.Health), "was", string(old[b.ID]),
				"epoch", next.ControllerEpoch, "version", next.AssignmentVersion)
		}
	}
	r.log.Debug("assignment applied", "epoch", next.ControllerEpoch, "version", next.AssignmentVersion,
		"controller", next.Controller, "partitions", len(next.Partitions), "groups", len(next.ConsumerGroups))
}

// control computes and writes the next assignment. Runs on the loop.
func (r *Runtime) control(ctx context.Context, now time.Time) {
	r.readRemovals()
	obs := map[string]Observed{}
	for id, rep := range r.watch.last {
		h, _ := r.watch.health(id, now, r.cfg.DeadAfter)
		if h != Dead && r.gone(id) {
			h = Dead
		}
		obs[id] = Observed{Health: h, Report: rep}
	}
	stalled := r.watch.quietFor(r.cfg.ID, now) > r.cfg.DeadAfter
	if stalled {
		r.log.Warn("own liveness reports are not landing; declaring no broker dead")
	}
	prev := r.current.Load()
	disk, err := readAssignment(r.cfg.Volume, r.path)
	if err == nil && disk.Newer(prev) {
		prev = disk
	}
	next := Compute(Inputs{
		Prev: prev, Epoch: r.election.Epoch, Me: r.cfg.ID, Now: now,
		Brokers: obs, Removed: r.removed, Topics: r.cfg.Topics(), Stalled: stalled,
	})
	if next == nil {
		// Nothing changed, but the file on disk must be this controller's:
		// a deposed controller's late write (or a torn file) would otherwise
		// stay there for brokers that start later.
		if prev == nil || (disk != nil && disk.ControllerEpoch == prev.ControllerEpoch &&
			disk.AssignmentVersion == prev.AssignmentVersion) {
			return
		}
		r.log.Warn("assignment.json on disk is not the controller's; rewriting",
			"epoch", prev.ControllerEpoch, "version", prev.AssignmentVersion)
		next = prev.clone()
		next.ControllerEpoch, next.Controller, next.GeneratedAt = r.election.Epoch, r.cfg.ID, now.UTC()
		next.AssignmentVersion = prev.AssignmentVersion + 1
	}
	// Still the controller? A higher epoch on disk means we were replaced.
	if el, err := r.cfg.Elector.Tick(ctx, now); err != nil || !el.Leader || el.Epoch != next.ControllerEpoch {
		r.leader.Store(false)
		return
	}
	data, err := json.Marshal(next)
	if err != nil {
		r.log.Error("encoding assignment failed", "err", err)
		return
	}
	if err := r.cfg.Volume.WriteFile(r.path, data); err != nil {
		r.log.Error("writing assignment.json failed", "err", err, "epoch", next.ControllerEpoch, "version", next.AssignmentVersion)
		return
	}
	r.lastStat = ""
	if st, err := r.cfg.Volume.Stamp(r.path); err == nil {
		r.lastStat = st
	}
	if r.apply(next) {
		if err := r.report(now); err != nil {
			r.log.Warn("liveness report failed", "err", err)
		}
	}
	for id := range r.removed {
		if _, ok := next.Row(id); !ok {
			_ = r.cfg.Volume.Remove(filepath.Join(removalsDir(r.cfg.DataDir), id))
			_ = r.cfg.Volume.Remove(filepath.Join(reportsDir(r.cfg.DataDir), id+".json"))
			delete(r.removed, id)
			if r.peers != nil {
				r.peers.forget(id)
			}
			r.log.Info("broker removed from the cluster", "peer", id)
		}
	}
}

func removalsDir(dataDir string) string { return volume.RemovalsDir(dataDir) }

// RequestRemoval asks the controller to drop broker id's row once it is
// not alive (the on-purpose removal of a broker from the cluster).
func RequestRemoval(dataDir, id string) error {
	if err := os.MkdirAll(removalsDir(dataDir), 0o755); err != nil {
		return err
	}
	return fsutil.WriteFile(filepath.Join(removalsDir(dataDir), id), []byte(id))
}

func (r *Runtime) readRemovals() {
	names, err := r.cfg.Volume.ReadDir(removalsDir(r.cfg.DataDir))
	if err != nil {
		return
	}
	for _, n := range names {
		if n != "" && n[0] != '.' {
			r.removed[n] = true
		}
	}
}

// Abort ends the loop without a stopped report or resignation, as a crash
// would (used by the in-process harness to simulate kill -9). The network
// side goes first, as a killed process's sockets do: the loop may be
// waiting on the volume (a stalled call ends when the file server says),
// and its peers must not go on hearing it meanwhile.
func (r *Runtime) Abort() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	if r.peers != nil {
		r.peers.close()
	}
	<-r.done
	<-r.beat
	r.leader.Store(false)
}

// Pause stops the loop's work for d (reports, polls, control), as a brief
// stall would; for tests of liveness tolerance.
func (r *Runtime) Pause(d time.Duration) {
	select {
	case r.pause <- d:
	default:
	}
}
