package coord

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/groupconfig"
	"github.com/kaas-dev/kaas/internal/offsets"
)

// consumerGroup is the shell around one KIP-848 group's state machine
// (internal/cgroup, docs/cgroup.md): it feeds heartbeats and deadline
// firings under the shell's lock, queues the group's snapshot for a durable
// write whenever the core says so (the answer waits for it), and keeps one
// timer armed for the core's next deadline. Every method runs with s.mu
// held.
type consumerGroup struct {
	c     *Coordinator
	s     *shell
	core  *cgroup.Group
	timer *time.Timer
	at    time.Time // the deadline timer is armed for
	// inflight is the snapshot write taken and being written (nil: none);
	// pending the next one, scheduled behind it and not yet taken: a
	// change made meanwhile joins it (apply), and it is taken once inflight
	// is done (finish). So at most one write of the group is under way,
	// snapshots land in order, and a burst of changes is one write, not
	// one each. Every answer waits for the last of them (apply), so no
	// client learns a state that is not durable.
	inflight, pending *snapshotWrite
	// broken: a write failed, so the state in memory may be ahead of the
	// file. Nothing more is answered from it; once the writes in flight are
	// done it is dropped and the next request loads the file (never
	// earlier: a write still queued may land after a reload). brokenErr is
	// the failure (a lost ownership answers NOT_COORDINATOR).
	broken    bool
	brokenErr error
	// seenEpoch is the last group epoch counted in the metrics.
	seenEpoch int32
	// snapLen is the length of the last snapshot taken (take).
	snapLen int
	// downgradeDue: the last consumer-protocol member went; the group
	// becomes a classic one once the writes in flight have landed
	// (maybeDowngrade).
	downgradeDue bool
	// joins is the joins waiting to be answered together (nil: none; see
	// joinBatch).
	joins *joinBatch
}

// joinBatch is the joins of one consumer group whose answers wait for the
// group to go JoinLinger without a join (at most ten times JoinLinger in
// all), so that members started together get their final shares at once.
// Each join is fed to the state machine when it arrives, like any
// heartbeat, so the target assignment counts every member; but what a join
// was given then is not what it should keep: the first of a burst was
// given every partition, the others none, since the first owned them. So
// when the batch closes, each member heartbeats once more on its client's
// behalf as the client would next, owning what it said at its join
// (nothing), since it was told nothing since, in the order they joined,
// twice: the first round releases
// what the earlier members held and gives each member what is free of its
// share, the second gives the rest. Each client is answered with its last
// result, once that is durable. Kafka batches the other way round: it
// computes a group's target assignment at most once a second
// (consumer.assignment.interval.ms, KIP-1263).
type joinBatch struct {
	started, last time.Time
	members       []batchedJoin
	done          chan struct{} // closed once the results are set
	// Set before done is closed: the write the answers wait for (nil:
	// none), or why none is answered.
	w   *snapshotWrite
	err error
}

// batchedJoin is one join of a batch: its request and its answer so far.
type batchedJoin struct {
	in  cgroup.HeartbeatInput
	res cgroup.HeartbeatResult
}

// again is the heartbeat member j's client would send next, having been
// told nothing yet: its epoch, owning what it said it owned when it joined
// (nothing: a join that says it owns partitions is refused, as on Kafka;
// or not said), everything else unchanged.
func (j *batchedJoin) again() cgroup.HeartbeatInput {
	return cgroup.HeartbeatInput{Version: j.in.Version, MemberID: j.res.MemberID, MemberEpoch: j.res.MemberEpoch,
		InstanceID: j.in.InstanceID, RebalanceTimeoutMs: -1, OwnedSent: j.in.OwnedSent, OwnedTopicPartitions: j.in.OwnedTopicPartitions,
		ClientID: j.in.ClientID, ClientHost: j.in.ClientHost}
}

// batchJoin adds a join, accepted, to the group's batch, opening one if
// none is open, and returns the batch and the join's place in it. Called
// with s.mu held.
func (g *consumerGroup) batchJoin(in cgroup.HeartbeatInput, res cgroup.HeartbeatResult) (*joinBatch, int) {
	now := time.Now()
	b := g.joins
	if b == nil {
		b = &joinBatch{started: now, done: make(chan struct{})}
		g.joins = b
		time.AfterFunc(g.c.cfg.Consumer.JoinLinger, func() { g.closeJoins(b) })
	}
	b.last = now
	b.members = append(b.members, batchedJoin{in: in, res: res})
	return b, len(b.members) - 1
}

// closeJoins closes batch b once the group went JoinLinger without a join
// (or ten times that since the batch opened): it runs the members' second
// heartbeats (see joinBatch), schedules their write and releases the
// waiters. Runs on a timer.
func (g *consumerGroup) closeJoins(b *joinBatch) {
	s := g.s
	linger := g.c.cfg.Consumer.JoinLinger
	s.mu.Lock()
	live := s.consumer == g && !s.gone && !g.broken && !g.c.closed.Load()
	if now := time.Now(); live {
		if wait := b.last.Add(linger).Sub(now); wait > 0 && now.Sub(b.started) < 10*linger {
			time.AfterFunc(wait, func() { g.closeJoins(b) })
			s.mu.Unlock()
			return
		}
	}
	if g.joins == b {
		g.joins = nil
	}
	var run *snapshotWrite
	switch {
	case g.broken:
		b.err = g.brokenErr
	case !live:
		b.err = ErrNotCoordinator
	default:
		im := g.c.image()
		for range 2 {
			for i := range b.members {
				j := &b.members[i]
				if j.res.Err != cgroup.ErrNone {
					continue
				}
				res, out := g.core.Heartbeat(g.c.cfg.Now(), im, j.again())
				if res.Err == cgroup.ErrNone && !res.HasAssignment {
					// Unchanged since the last result: the client has
					// not been told that either.
					res.HasAssignment, res.Assignment = true, j.res.Assignment
				}
				j.res = res
				w, r := g.apply(out)
				if r {
					run = w
				}
				if w != nil {
					b.w = w
				}
			}
		}
		g.c.log.Debug("consumer group joins answered together", "group", s.id, "joins", len(b.members),
			"epoch", g.core.Epoch(), "waited", time.Since(b.started).Round(time.Microsecond))
	}
	s.mu.Unlock()
	close(b.done)
	if run != nil {
		g.perform(run)
	}
}

// answer waits for batch b to close and its write to land, and returns the
// answer to the join at place i.
func (b *joinBatch) answer(ctx context.Context, i int) (cgroup.HeartbeatResult, error) {
	select {
	case <-b.done:
	case <-ctx.Done():
		return cgroup.HeartbeatResult{}, ctx.Err() // the batch goes on; nobody is waiting for this answer
	}
	if b.err != nil {
		return cgroup.HeartbeatResult{}, b.err
	}
	if err := b.w.wait(ctx); err != nil {
		return cgroup.HeartbeatResult{}, err
	}
	return b.members[i].res, nil
}

// SetTopics gives the coordinator the topics consumer groups assign (the
// broker's registry); until it is called they see none.
func (c *Coordinator) SetTopics(fn func() *cgroup.Image) { c.topicsFn.Store(&fn) }

func (c *Coordinator) image() *cgroup.Image {
	if fn := c.topicsFn.Load(); fn != nil {
		return (*fn)()
	}
	return cgroup.NewImage()
}

func (c *Coordinator) newConsumer(s *shell) *consumerGroup {
	return &consumerGroup{c: c, s: s, core: cgroup.New(s.id, c.cfg.Consumer)}
}

// hasMembers: the group has members of either protocol. Called with s.mu
// held.
func (s *shell) hasMembers() bool {
	return (s.member != nil && !s.member.empty()) || (s.consumer != nil && !s.consumer.core.Empty())
}

// classicInUse: the group is a classic group with members (consumer
// protocol requests are refused).
func (s *shell) classicInUse() bool { return s.member != nil && !s.member.empty() }

// consumerInUse: the group is a consumer group with members (classic
// requests are refused).
func (s *shell) consumerInUse() bool { return s.consumer != nil && !s.consumer.core.Empty() }

// restoreConsumer installs a consumer group's durable state. Called with
// s.mu held from restore.
func (c *Coordinator) restoreConsumer(s *shell, mem *offsets.Membership) {
	var snap cgroup.Snapshot
	cg := c.newConsumer(s)
	if err := json.Unmarshal(mem.Consumer, &snap); err != nil {
		c.log.Warn("consumer group state on the volume ignored", "group", s.id, "err", err)
		return
	}
	if err := cg.core.Restore(c.cfg.Now(), snap); err != nil {
		c.log.Warn("consumer group state on the volume ignored", "group", s.id, "err", err)
		return
	}
	s.consumer = cg
	cg.seenEpoch = cg.core.Epoch()
	if !cg.core.Empty() {
		s.emptySince = time.Time{}
	}
	cg.rearm()
	c.log.Info("consumer group loaded", "group", s.id, "epoch", cg.core.Epoch(), "members", cg.core.Members(), "state", cg.core.State())
}

// apply performs an Output: log its events, schedule the snapshot when it
// changed (and what retention needs), and re-arm the deadline timer. It
// returns the write the answer waits for (nil: none): the one carrying
// the change, else the last one under way, whose state the answer may
// show. run: the write was taken here (none was under way), and the caller
// performs it (g.perform) once it has released the lock.
func (g *consumerGroup) apply(out cgroup.Output) (w *snapshotWrite, run bool) {
	for _, ev := range out.Events {
		g.c.log.Info("consumer group: "+ev.What, "group", g.s.id, "member", ev.Member, "epoch", ev.Epoch, "why", ev.Why)
	}
	g.rearm()
	if out.Downgrade {
		g.downgradeDue = true
	}
	if e := g.core.Epoch(); e > g.seenEpoch {
		g.seenEpoch = e
		g.c.cfg.Metrics.Generation("consumer")
	}
	switch {
	case !out.Persist:
		return g.last(), false
	case g.pending != nil:
		return g.pending, false
	}
	p := &snapshotWrite{done: make(chan struct{})}
	if g.inflight != nil {
		g.pending = p
		return p, false
	}
	g.take(p)
	return p, true
}

// last is the last write scheduled (nil: none under way).
func (g *consumerGroup) last() *snapshotWrite {
	if g.pending != nil {
		return g.pending
	}
	return g.inflight
}

// snapshotWrite is one durable write of a group's snapshot, shared by every
// change made before it was taken: a burst of heartbeats of a large group
// (a hundred members joining, each bumping the epoch) is one snapshot and
// one write, not one each.
type snapshotWrite struct {
	done chan struct{} // closed once the write landed or failed
	// err is its outcome, once done is closed (as answered: NOT_COORDINATOR
	// when the group moved away or its ownership was lost). A write fails
	// when one before it failed: an answer judges by the write it waited
	// for alone.
	err error
	// Taken under the group's lock (take), for perform: the snapshot's
	// JSON, the group epoch and the owner that writes it.
	data  []byte
	epoch int32
	own   offsets.Owner
}

// wait waits for write w (nil: none) to land and returns its outcome, or
// ctx's error when the request ends first: the write goes on, nobody is
// waiting for its answer.
func (w *snapshotWrite) wait(ctx context.Context) error {
	if w == nil {
		return nil
	}
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take makes p the write under way with the group's snapshot as it is now,
// which holds every change made before. Called with s.mu held and no write
// under way; perform writes it.
func (g *consumerGroup) take(p *snapshotWrite) {
	g.noteRetention()
	g.c.hook("membership", g.s.id)
	// The snapshot is encoded here, from the state machine itself: for a
	// hundred members, about 3 µs when one member changed and 40 µs when
	// all of them did. Its buffer is sized by the last one. The store
	// keeps each buffer as the group's file content.
	p.data = g.core.AppendSnapshot(make([]byte, 0, g.snapLen+g.snapLen/8+64))
	g.snapLen = len(p.data)
	p.epoch, p.own = g.core.Epoch(), g.c.owner(g.s.id)
	g.inflight = p
	g.c.bg.Add(1) // until finish
}

// perform writes p, taken, and reports its outcome (finish). Called
// without the lock. The write waits with context.Background:
// it is never withdrawn, whatever becomes of the request that made it.
func (g *consumerGroup) perform(p *snapshotWrite) {
	mem := &offsets.Membership{ProtocolType: "consumer", Generation: p.epoch, Consumer: p.data}
	g.finish(p, g.c.store.WriteMembership(context.Background(), g.s.id, p.own, mem))
}

// finish records p's outcome, then takes the write scheduled behind it and
// starts it. A failed write breaks the group (what is in memory may be
// ahead of the file): the writes behind fail alike, and once none is under
// way the group is dropped and the next request loads the file. A group
// dropped meanwhile (moved away, deleted) writes nothing more: the waiters
// of the scheduled write are told NOT_COORDINATOR.
func (g *consumerGroup) finish(p *snapshotWrite, err error) {
	defer g.c.bg.Done()
	s := g.s
	p.err = storeErr(s.id, err)
	if err == nil {
		// The answers go out before the bookkeeping below: under a burst
		// of heartbeats the group's lock is contended, and the write is
		// durable already.
		close(p.done)
	}
	s.mu.Lock()
	if err != nil && !g.broken {
		g.broken, g.brokenErr = true, p.err
		g.c.log.Warn("consumer group state not recorded; reloading it from the volume once the writes in flight are done", "group", s.id, "err", err)
	}
	g.inflight = nil
	next := g.pending
	g.pending = nil
	if next != nil {
		switch {
		case g.broken:
			next.err = g.brokenErr
		case s.consumer != g || s.gone:
			next.err = ErrNotCoordinator
		default:
			g.take(next)
			go g.perform(next)
		}
		if g.inflight == nil {
			close(next.done)
		}
	}
	if g.inflight == nil {
		if g.broken && s.consumer == g && !s.gone {
			g.stop()
			s.consumer, s.loaded = nil, false
		} else if g.downgradeDue {
			g.maybeDowngrade()
		}
	}
	s.mu.Unlock()
	if err != nil {
		close(p.done) // after the group is marked broken
	}
}

// noteRetention records the protocol type, when the group became Empty and
// the subscribed topics when that changed (see membership.noteRetention).
func (g *consumerGroup) noteRetention() {
	s := g.s
	empty := g.core.Empty()
	if empty && s.emptySince.IsZero() {
		s.emptySince = g.c.cfg.Now()
	} else if !empty {
		s.emptySince = time.Time{}
	}
	info := offsets.Retention{ProtocolType: "consumer"}
	if empty {
		info.EmptySince = s.emptySince.UnixMilli()
	} else {
		info.Subscribed = g.core.SubscribedTopics(g.c.image())
		sort.Strings(info.Subscribed)
	}
	if s.infoSet && s.info.ProtocolType == info.ProtocolType && s.info.EmptySince == info.EmptySince &&
		slices.Equal(s.info.Subscribed, info.Subscribed) {
		return
	}
	if _, err := g.c.store.SetRetention(s.id, g.c.owner(s.id), info); err != nil {
		g.c.log.Warn("offsets retention data not recorded", "group", s.id, "err", err)
		return
	}
	s.info, s.infoSet, s.infoEmpty = info, true, empty
}

// rearm keeps the timer no later than the core's next deadline: armed
// already no later than every deadline set since, it stays (an early
// firing expires nothing and re-arms on a fresh scan); otherwise it is
// armed for the next deadline.
func (g *consumerGroup) rearm() {
	soonest := g.core.SoonestSet()
	if g.timer != nil && (soonest.IsZero() || !soonest.Before(g.at)) {
		return
	}
	next := g.core.NextDeadline()
	if next.Equal(g.at) && (g.timer != nil || next.IsZero()) {
		return
	}
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	g.at = next
	if next.IsZero() {
		return
	}
	g.timer = time.AfterFunc(next.Sub(g.c.cfg.Now()), g.fire)
}

// fire expires members past their deadlines.
func (g *consumerGroup) fire() {
	s := g.s
	s.mu.Lock()
	if s.gone || s.consumer != g || g.broken || g.c.closed.Load() {
		s.mu.Unlock()
		return
	}
	g.timer, g.at = nil, time.Time{}
	w, run := g.apply(g.core.Expire(g.c.cfg.Now(), g.c.image()))
	s.mu.Unlock()
	if run {
		g.perform(w)
	}
}

func (g *consumerGroup) stop() {
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
}

// ErrNotConsumerGroup: a consumer protocol request for a classic group
// with members (Kafka answers GROUP_ID_NOT_FOUND, "is not a consumer
// group"). ErrNotClassicGroup: DescribeGroups of a consumer group (Kafka
// answers GROUP_ID_NOT_FOUND, "is not a classic group").
var (
	ErrNotConsumerGroup = errors.New("coord: the group is a classic group")
	ErrNotClassicGroup  = errors.New("coord: the group is a consumer group")
)

// ConsumerHeartbeat feeds a ConsumerGroupHeartbeat to the group and answers
// once what it changed is durable.
func (c *Coordinator) ConsumerHeartbeat(ctx context.Context, groupID string, in cgroup.HeartbeatInput) (cgroup.HeartbeatResult, error) {
	if err := c.check(groupID); err != nil {
		return cgroup.HeartbeatResult{}, err
	}
	var overrides groupconfig.Overrides
	if c.cfg.GroupConfigs != nil {
		overrides = c.cfg.GroupConfigs.Overrides(groupID) // may re-read the volume: not under the lock
	}
	s, err := c.lockLoaded(groupID)
	if err != nil {
		return cgroup.HeartbeatResult{}, err
	}
	g := s.consumer
	var converted *consumerGroup
	if s.classicInUse() {
		// A join may upgrade the classic group (online migration).
		if in.MemberEpoch == cgroup.JoinEpoch {
			converted, err = c.upgrade(s)
		} else {
			err = ErrNotConsumerGroup
		}
		if err != nil {
			s.mu.Unlock()
			return cgroup.HeartbeatResult{}, err
		}
		g = converted
	}
	if g != nil && g.broken {
		err := g.brokenErr
		s.mu.Unlock()
		return cgroup.HeartbeatResult{}, err
	}
	fresh := g == nil
	if fresh {
		g = c.newConsumer(s)
	}
	g.core.SetTimeouts(overrides.SessionTimeout, overrides.HeartbeatInterval)
	res, out := g.core.Heartbeat(c.cfg.Now(), c.image(), in)
	if converted != nil {
		if res.Err != cgroup.ErrNone {
			// Refused: the classic group stays as it was, as on Kafka
			// (the conversion and the join are one operation).
			s.mu.Unlock()
			return res, nil
		}
		c.install(s, converted)
		out.Persist = true
	}
	if fresh {
		if !out.Persist { // refused: nothing was created
			s.mu.Unlock()
			return res, nil
		}
		s.dropClassic() // an Empty classic group becomes a consumer group
		s.consumer = g
	}
	var batch *joinBatch
	var place int
	if in.MemberEpoch == cgroup.JoinEpoch && res.Err == cgroup.ErrNone && c.cfg.Consumer.JoinLinger > 0 {
		batch, place = g.batchJoin(in, res)
	}
	w, run := g.apply(out)
	s.mu.Unlock()
	if run {
		g.perform(w)
	}
	if batch != nil {
		// The join's own write lands before the batch's, which the
		// answer waits for.
		return batch.answer(ctx, place)
	}
	if err := w.wait(ctx); err != nil {
		return cgroup.HeartbeatResult{}, err
	}
	return res, nil
}

// ConsumerDescribe describes a consumer group (ConsumerGroupDescribe).
func (c *Coordinator) ConsumerDescribe(groupID string) (cgroup.Description, error) {
	if err := c.check(groupID); err != nil {
		return cgroup.Description{}, err
	}
	ok, err := c.store.Exists(groupID)
	if err != nil {
		return cgroup.Description{}, storeErr(groupID, err)
	}
	if !ok && c.resident(groupID) == nil {
		return cgroup.Description{}, ErrGroupNotFound
	}
	s, err := c.lockLoaded(groupID)
	if err != nil {
		return cgroup.Description{}, err
	}
	defer s.mu.Unlock()
	if s.consumer == nil {
		if s.member != nil && (!s.member.empty() || s.member.generation() > 0) {
			return cgroup.Description{}, ErrNotConsumerGroup
		}
		return cgroup.Description{}, ErrGroupNotFound
	}
	return s.consumer.core.Describe(), nil
}

// checkConsumerCommit is admitCommit for a consumer group: the member and
// epoch rules of KIP-848 with KIP-1251's per-partition epochs. Called with
// s.mu held.
func (c *Coordinator) checkConsumerCommit(s *shell, in group.CommitCheck, version int16, tps []offsets.TP) (map[offsets.TP]error, error) {
	im := c.image()
	byID := map[cgroup.TP]offsets.TP{}
	ctps := make([]cgroup.TP, 0, len(tps))
	for _, tp := range tps {
		t, ok := im.ByName(tp.Topic)
		if !ok {
			continue
		}
		ctp := cgroup.TP{Topic: t.ID, Partition: tp.Partition}
		byID[ctp] = tp
		ctps = append(ctps, ctp)
	}
	code, bad := s.consumer.core.CheckCommit(cgroup.CommitCheck{MemberID: in.MemberID, InstanceID: in.InstanceID,
		MemberEpoch: in.Generation, Transactional: in.Transactional, Version: version}, ctps)
	if code != cgroup.ErrNone {
		return nil, CodeError(code)
	}
	var refused map[offsets.TP]error
	for ctp, code := range bad {
		if code == cgroup.ErrNone {
			continue
		}
		if refused == nil {
			refused = map[offsets.TP]error{}
		}
		refused[byID[ctp]] = CodeError(code)
	}
	return refused, nil
}

// CheckFetch is OffsetFetch v9's member gate (KIP-848): a request naming a
// member, or an epoch, of a consumer group must come from a member at its
// current epoch (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH otherwise). A
// request with neither (an admin client, a classic consumer) and any
// request for a classic group pass, as on Kafka.
func (c *Coordinator) CheckFetch(groupID string, memberID *string, epoch int32) error {
	if memberID == nil && epoch < 0 {
		return nil
	}
	if err := c.check(groupID); err != nil {
		return err
	}
	exists, err := c.store.Exists(groupID)
	if err != nil {
		return storeErr(groupID, err)
	}
	if !exists && c.resident(groupID) == nil {
		return nil // no group: nothing to check against, offsets are -1
	}
	s, err := c.lockLoaded(groupID)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.consumer == nil {
		return nil
	}
	if code := s.consumer.core.CheckFetch(memberID, epoch); code != cgroup.ErrNone {
		return CodeError(code)
	}
	return nil
}
