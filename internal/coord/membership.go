package coord

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/offsets"
)

// membership is the thin shell around one group's pure state machine: it
// feeds inputs under the shell's lock, delivers the responses the core
// returns to the waiting requests, and arms the timers it asks for.
// Every method runs with shell.mu held.
type membership struct {
	c      *Coordinator
	s      *shell
	core   *group.Group
	timers map[group.TimerKey]armed
	// seenGen is the last generation counted in the metrics: one loaded
	// from the volume is not a new one.
	seenGen int32
	// barrier is done once the last membership write queued by this
	// shell is durable and the answers held behind it are delivered; nil
	// when none is in flight. JoinGroup, SyncGroup and LeaveGroup answers
	// produced meanwhile wait behind it, so that no answer leaves before a
	// membership write that an earlier input asked for, and they fail
	// when it failed: they were computed from the state it did not record.
	barrier *heldAnswers
}

// heldAnswers is the outcome of a membership write and of the writes
// queued before it, once done is closed: err is the first failure among
// them (nil: all durable).
type heldAnswers struct {
	done chan struct{}
	err  error
}

// armed is a timer the shell started for a slot, with the core's sequence.
type armed struct {
	t   *time.Timer
	seq uint64
}

func (m *membership) empty() bool                { return m.core.Empty() }
func (m *membership) generation() int32          { return m.core.Generation() }
func (m *membership) state() string              { return m.core.State().String() }
func (m *membership) protocolType() string       { return m.core.ProtocolType() }
func (m *membership) subscribedTopics() []string { t, _ := m.core.Topics(); return t }

// ensureMembership creates the state machine on first use. Called with
// s.mu held, after the group's durable state was loaded (lockLoaded).
func (c *Coordinator) ensureMembership(s *shell) *membership {
	if s.member == nil {
		s.member = c.newMembership(s)
	}
	return s.member
}

func (c *Coordinator) newMembership(s *shell) *membership {
	return &membership{c: c, s: s, core: group.New(s.id, c.cfg.Group), timers: map[group.TimerKey]armed{}}
}

// lockLoaded returns the shell of a group this broker coordinates, locked,
// with the group's durable state loaded on first touch: a group that moved
// here, or that was evicted from memory, continues the generation its file
// records. The file is read without the shell's lock (the store's writer
// holds the store's lock while it asks the coordinator for ownership); the
// first caller to lock the shell afterwards restores what it read.
func (c *Coordinator) lockLoaded(groupID string) (*shell, error) {
	s, err := c.shellFor(groupID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return nil, ErrNotCoordinator
	}
	if s.loaded {
		return s, nil
	}
	s.mu.Unlock()
	c.hook("load", groupID)
	start := time.Now()
	mem, info, err := c.store.GroupState(groupID, c.owner(groupID))
	if err != nil {
		return nil, storeErr(groupID, err)
	}
	c.cfg.Metrics.GroupLoaded(time.Since(start))
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return nil, ErrNotCoordinator
	}
	if !s.loaded {
		c.restore(s, mem, info)
	}
	return s, nil
}

// restore installs the durable state read from the group's file. Called
// with s.mu held, once per shell. A membership the state machine refuses
// (a damaged file) is logged and ignored: the group starts Empty as it did
// before membership was durable, and its offsets are untouched.
func (c *Coordinator) restore(s *shell, mem *offsets.Membership, info offsets.Retention) {
	s.loaded = true
	if info.ProtocolType != "" {
		s.info, s.infoSet = info, true
		s.infoEmpty = info.EmptySince > 0
	}
	if info.EmptySince > 0 {
		s.emptySince = time.UnixMilli(info.EmptySince)
	}
	if mem == nil {
		return
	}
	if mem.Consumer != nil {
		c.restoreConsumer(s, mem)
		return
	}
	m := c.newMembership(s)
	out, err := m.core.Restore(c.cfg.Now(), snapshotOf(mem))
	if err != nil {
		c.log.Warn("group membership on the volume ignored", "group", s.id, "err", err)
		return
	}
	s.member = m
	m.seenGen = m.core.Generation()
	s.infoGen, s.infoEmpty = m.core.Generation(), m.core.Empty()
	if !m.core.Empty() {
		s.emptySince = time.Time{}
	}
	m.apply(out)
	c.log.Info("group membership loaded", "group", s.id, "gen", m.core.Generation(),
		"members", m.core.Members(), "state", m.core.State().String())
}

// snapshotOf and membershipOf convert between the state machine's snapshot
// and the file's membership section.
func snapshotOf(mem *offsets.Membership) group.Snapshot {
	snap := group.Snapshot{ProtocolType: mem.ProtocolType, Generation: mem.Generation, Leader: mem.Leader,
		Rebalancing: mem.Rebalancing}
	if mem.Protocol != nil {
		snap.Protocol, snap.HasProtocol = *mem.Protocol, true
	}
	for _, mb := range mem.Members {
		ms := group.MemberSnapshot{MemberID: mb.ID, InstanceID: mb.InstanceID, ClientID: mb.ClientID, ClientHost: mb.ClientHost,
			SessionTimeout:   time.Duration(mb.SessionTimeoutMs) * time.Millisecond,
			RebalanceTimeout: time.Duration(mb.RebalanceTimeoutMs) * time.Millisecond, Assignment: mb.Assignment}
		for _, p := range mb.Protocols {
			ms.Protocols = append(ms.Protocols, group.Protocol{Name: p.Name, Metadata: p.Metadata})
		}
		snap.Members = append(snap.Members, ms)
	}
	return snap
}

func membershipOf(snap group.Snapshot) *offsets.Membership {
	mem := &offsets.Membership{ProtocolType: snap.ProtocolType, Generation: snap.Generation, Leader: snap.Leader,
		Rebalancing: snap.Rebalancing}
	if snap.HasProtocol {
		p := snap.Protocol
		mem.Protocol = &p
	}
	for _, ms := range snap.Members {
		mb := offsets.Member{ID: ms.MemberID, InstanceID: ms.InstanceID, ClientID: ms.ClientID, ClientHost: ms.ClientHost,
			SessionTimeoutMs: ms.SessionTimeout.Milliseconds(), RebalanceTimeoutMs: ms.RebalanceTimeout.Milliseconds(),
			Assignment: ms.Assignment}
		for _, p := range ms.Protocols {
			mb.Protocols = append(mb.Protocols, offsets.MemberProtocol{Name: p.Name, Metadata: p.Metadata})
		}
		mem.Members = append(mem.Members, mb)
	}
	return mem
}

// admitCommit applies ownership and the group's generation rules to an
// OffsetCommit or TxnOffsetCommit, and notes the commit for group balancing.
//
// For a consumer (KIP-848) group the member epoch is checked per partition
// (KIP-1251): partitions refused come back in the map, the others may be
// committed. version is the OffsetCommit version (unused when
// Transactional).
func (c *Coordinator) admitCommit(groupID string, in group.CommitCheck, version int16, tps []offsets.TP) (map[offsets.TP]error, error) {
	if err := c.check(groupID); err != nil {
		return nil, err
	}
	s, err := c.lockLoaded(groupID)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if s.consumer != nil && (!s.consumer.core.Empty() || in.MemberID != "") {
		refused, err := c.checkConsumerCommit(s, in, version, tps)
		if err == nil {
			s.lastCommit = c.cfg.Now()
		}
		return refused, err
	}
	switch {
	case s.member == nil && in.Generation >= 0 && !(in.Transactional && in.MemberID == ""):
		// No membership here: a member's commit comes from a generation
		// this coordinator never saw (Kafka answers ILLEGAL_GENERATION for a
		// group it does not have).
		return nil, ErrIllegalGeneration
	case s.member != nil && (!in.Transactional || in.MemberID != ""):
		code, out := s.member.core.CheckCommit(c.cfg.Now(), in)
		s.member.apply(out)
		if code != 0 {
			return nil, CodeError(code)
		}
	}
	s.lastCommit = c.cfg.Now()
	return nil, nil
}

// unload answers every parked request so that clients go back to
// FindCoordinator, stops the timers, and forgets the group. Called with
// s.mu held.
func (s *shell) unload() {
	s.gone = true
	s.dropConsumer()
	s.dropClassic()
}

// dropClassic forgets the classic state machine (answering what it holds
// parked and stopping its timers). Called with s.mu held.
func (s *shell) dropClassic() {
	if s.member != nil {
		s.endClassic(s.member.core.Unload())
	}
}

// endClassic forgets the classic state machine once out (its Unload or
// Migrate) has answered what it held parked. Called with s.mu held.
func (s *shell) endClassic(out group.Output) {
	m := s.member
	m.apply(out)
	for k, a := range m.timers {
		a.t.Stop()
		delete(m.timers, k)
	}
	s.member = nil
}

// dropConsumer forgets the consumer group state machine. Called with s.mu
// held.
func (s *shell) dropConsumer() {
	if s.consumer != nil {
		s.consumer.stop()
		s.consumer = nil
	}
}

// apply performs an Output: responses, timers, log events. Called with
// s.mu held; channel sends never block (each waiter's channel has room for
// its one answer).
//
// When out.Persist is set the group's snapshot is queued for a durable
// write (after the retention data, so the write covers both) and the
// JoinGroup, SyncGroup and LeaveGroup answers of out are held until it is
// durable; heartbeat answers never wait.
func (m *membership) apply(out group.Output) {
	for _, r := range out.Heartbeats {
		r.Ref.(chan group.HeartbeatResult) <- r
	}
	for _, k := range out.Cancel {
		if a, ok := m.timers[k]; ok {
			a.t.Stop()
			delete(m.timers, k)
		}
	}
	for _, a := range out.Arm {
		if old, ok := m.timers[a.Key]; ok {
			old.t.Stop()
		}
		key, seq := a.Key, a.Seq
		// The delay is measured on the coordinator's clock, the one the core
		// decided with.
		m.timers[key] = armed{t: time.AfterFunc(a.At.Sub(m.c.cfg.Now()), func() { m.c.fire(m.s, m, key, seq) }), seq: seq}
	}
	for _, ev := range out.Events {
		level := slog.LevelInfo
		switch ev.Kind {
		case group.EventBug:
			level = slog.LevelError
		case group.EventPendingAdded, group.EventPendingRemoved:
			level = slog.LevelDebug // one per KIP-394 handshake: noise at info
		}
		m.c.log.LogAttrs(context.Background(), level, ev.Kind.String(), ev.Attrs()...)
	}
	if gen := m.core.Generation(); gen > m.seenGen {
		m.seenGen = gen
		m.c.cfg.Metrics.Generation("classic")
	}
	if m.core.Empty() && m.s.emptySince.IsZero() {
		m.s.emptySince = m.c.cfg.Now()
	} else if !m.core.Empty() {
		m.s.emptySince = time.Time{}
	}
	m.noteRetention()
	switch {
	case out.Persist:
		m.c.hook("membership", m.s.id)
		wait, err := m.c.store.SetMembership(m.s.id, m.c.owner(m.s.id), membershipOf(m.core.Snapshot()))
		m.hold(out, wait, err)
	case m.barrier != nil:
		m.hold(out, nil, nil)
	default:
		deliver(out)
	}
}

// deliver sends the JoinGroup, SyncGroup and LeaveGroup answers of out.
// Channel sends never block (each waiter's channel has room for its one
// answer).
func deliver(out group.Output) {
	for _, r := range out.Joins {
		r.Ref.(chan group.JoinResult) <- r
	}
	for _, r := range out.Syncs {
		r.Ref.(chan group.SyncResult) <- r
	}
	for _, r := range out.Leaves {
		r.Ref.(chan group.LeaveResult) <- r
	}
}

// hold delivers the answers of out once the membership writes queued before
// it and its own (wait, or the queueing error qerr) are done. A failed
// write, its own or one before it, turns the successful answers into errors
// (NOT_COORDINATOR when this broker lost the group,
// COORDINATOR_NOT_AVAILABLE otherwise: both send the client back to
// FindCoordinator): a follower's SyncGroup answered after the leader's
// carries its share of the generation the leader's write records, and must
// not succeed if that write did not. Its own failure starts a rebalance,
// so that the next generation is written again, as Kafka does when it
// cannot store a generation. Called with s.mu held; the goroutine is the
// coordinator's (Close waits for it) and ends when the store has answered.
func (m *membership) hold(out group.Output, wait func(context.Context) error, qerr error) {
	prev := m.barrier
	h := &heldAnswers{done: make(chan struct{})}
	m.barrier = h
	c := m.c
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		var before error
		if prev != nil {
			<-prev.done
			before = prev.err
		}
		err := qerr
		if err == nil && wait != nil {
			err = wait(context.Background())
		}
		h.err = cmp.Or(before, err)
		if h.err != nil {
			failAnswers(&out, writeErrCode(h.err))
		}
		deliver(out)
		close(h.done)
		m.s.mu.Lock()
		defer m.s.mu.Unlock()
		if m.barrier == h {
			m.barrier = nil
		}
		if err != nil && !m.s.gone && m.s.member == m {
			c.log.Warn("group membership not recorded; rebalancing", "group", m.s.id, "gen", m.core.Generation(), "err", err)
			m.apply(m.core.Rebalance(c.cfg.Now(), "the membership write failed"))
		}
	}()
}

// writeErrCode is the answer to requests whose membership write failed.
func writeErrCode(err error) group.Code {
	err = storeErr("", err)
	if errors.Is(err, ErrNotCoordinator) || errors.Is(err, ErrLoadInProgress) {
		return group.ErrNotCoordinator
	}
	return group.ErrCoordinatorNotAvailable
}

// failAnswers replaces the successful answers of out with code.
func failAnswers(out *group.Output, code group.Code) {
	for i, r := range out.Joins {
		if r.Err == group.ErrNone {
			out.Joins[i] = group.JoinResult{Ref: r.Ref, Err: code, MemberID: r.MemberID, Generation: -1}
		}
	}
	for i, r := range out.Syncs {
		if r.Err == group.ErrNone {
			out.Syncs[i] = group.SyncResult{Ref: r.Ref, Err: code}
		}
	}
	for i := range out.Leaves {
		l := &out.Leaves[i]
		if l.Err == group.ErrNone {
			l.Err = code
		}
		for j := range l.Members {
			if l.Members[j].Err == group.ErrNone {
				l.Members[j].Err = code
			}
		}
	}
}

// noteRetention queues a write of what retention needs to know of the
// group (protocol type, when it became Empty, the subscribed topics) when
// that changed: on the transitions to and from Empty and when a generation
// changes the subscription, never on a heartbeat or a commit. The write is
// not waited for; the store orders it with the group's other writes.
// Called with s.mu held.
func (m *membership) noteRetention() {
	pt := m.core.ProtocolType()
	if pt == "" {
		return
	}
	gen, empty := m.core.Generation(), m.core.Empty()
	if m.s.infoSet && m.s.infoGen == gen && m.s.infoEmpty == empty && m.s.info.ProtocolType == pt &&
		(!empty || m.s.info.EmptySince == m.s.emptySince.UnixMilli()) {
		return // nothing retention needs changed (the common case: a heartbeat)
	}
	m.s.infoGen, m.s.infoEmpty = gen, empty
	info := offsets.Retention{ProtocolType: pt}
	if m.core.Empty() {
		info.EmptySince = m.s.emptySince.UnixMilli()
	} else if pt == "consumer" {
		if topics, known := m.core.Topics(); known {
			slices.Sort(topics)
			info.Subscribed = topics
		}
	}
	if m.s.infoSet && m.s.info.ProtocolType == info.ProtocolType && m.s.info.EmptySince == info.EmptySince &&
		slices.Equal(m.s.info.Subscribed, info.Subscribed) {
		return
	}
	if _, err := m.c.store.SetRetention(m.s.id, m.c.owner(m.s.id), info); err != nil {
		m.c.log.Warn("offsets retention data not recorded", "group", m.s.id, "err", err)
		return
	}
	m.s.info, m.s.infoSet = info, true
}

// fire delivers a timer to the core, unless the group was unloaded or the
// membership replaced since the timer was armed.
func (c *Coordinator) fire(s *shell, m *membership, key group.TimerKey, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone || s.member != m {
		return
	}
	if a, ok := m.timers[key]; ok && a.seq == seq {
		delete(m.timers, key)
	}
	// A timer's outcome (a join phase ending, members expiring) is an
	// answer of the coordinator: not while this broker's view is stale or
	// the group is being handed over. It waits, and a move unloads the
	// group and answers what is parked with NOT_COORDINATOR.
	if _, err := c.grant(s.id); err != nil {
		if a, ok := m.timers[key]; ok && a.seq != seq {
			return // a newer timer of the slot supersedes this one
		}
		m.timers[key] = armed{t: time.AfterFunc(timerRetry, func() { c.fire(s, m, key, seq) }), seq: seq}
		return
	}
	m.apply(m.core.Timer(c.cfg.Now(), key, seq))
}

// timerRetry is how soon a timer that fired while this broker could not
// answer for the group fires again.
const timerRetry = 100 * time.Millisecond

// begin locks an owned group's shell for a membership request and returns
// its state machine, nil for a consumer group with members (its classic
// members are served by it: migration.go); the caller unlocks s.mu.
func (c *Coordinator) begin(groupID string) (*shell, *membership, error) {
	if err := c.check(groupID); err != nil {
		return nil, nil, err
	}
	s, err := c.lockLoaded(groupID)
	if err != nil {
		return nil, nil, err
	}
	if s.consumerInUse() {
		return s, nil, nil
	}
	s.dropConsumer() // an Empty consumer group becomes a classic one
	return s, c.ensureMembership(s), nil
}

// Join feeds a JoinGroup to the group; the answer arrives on the returned
// channel when the join phase ends (JoinGroup is a long poll).
func (c *Coordinator) Join(groupID string, in group.JoinInput) (<-chan group.JoinResult, error) {
	s, m, err := c.begin(groupID)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return c.consumerJoin(s, in)
	}
	defer s.mu.Unlock()
	ch := make(chan group.JoinResult, 1)
	in.Ref = ch
	m.apply(m.core.Join(c.cfg.Now(), in))
	return ch, nil
}

// Sync feeds a SyncGroup; followers wait for the leader's assignment.
func (c *Coordinator) Sync(groupID string, in group.SyncInput) (<-chan group.SyncResult, error) {
	s, m, err := c.begin(groupID)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return c.consumerSync(s, in)
	}
	defer s.mu.Unlock()
	ch := make(chan group.SyncResult, 1)
	in.Ref = ch
	m.apply(m.core.Sync(c.cfg.Now(), in))
	return ch, nil
}

// Heartbeat feeds a Heartbeat; the answer is immediate.
func (c *Coordinator) Heartbeat(groupID string, in group.HeartbeatInput) (group.HeartbeatResult, error) {
	s, m, err := c.begin(groupID)
	if err != nil {
		return group.HeartbeatResult{}, err
	}
	if m == nil {
		return c.consumerHeartbeat(s, in)
	}
	ch := make(chan group.HeartbeatResult, 1)
	in.Ref = ch
	m.apply(m.core.Heartbeat(c.cfg.Now(), in))
	s.mu.Unlock()
	return <-ch, nil
}

// Leave feeds a LeaveGroup; the answer is immediate.
func (c *Coordinator) Leave(groupID string, in group.LeaveInput) (group.LeaveResult, error) {
	s, m, err := c.begin(groupID)
	if err != nil {
		return group.LeaveResult{}, err
	}
	if m == nil {
		return c.consumerLeave(s, in)
	}
	ch := make(chan group.LeaveResult, 1)
	in.Ref = ch
	m.apply(m.core.Leave(c.cfg.Now(), in))
	s.mu.Unlock()
	return <-ch, nil // after the membership write the leave asked for
}

// Describe describes a group this broker coordinates. A group that exists
// only as an offsets file is Empty; an unknown group is ErrGroupNotFound.
func (c *Coordinator) Describe(groupID string) (group.Description, error) {
	if err := c.check(groupID); err != nil {
		return group.Description{}, err
	}
	ok, err := c.store.Exists(groupID)
	if err != nil {
		return group.Description{}, storeErr(groupID, err)
	}
	if ok || c.resident(groupID) != nil {
		s, err := c.lockLoaded(groupID)
		if err != nil {
			return group.Description{}, err
		}
		if s.consumer != nil {
			s.mu.Unlock()
			return group.Description{}, ErrNotClassicGroup
		}
		if s.member != nil && (!s.member.empty() || s.member.generation() > 0) {
			d := s.member.core.Describe()
			s.mu.Unlock()
			return d, nil
		}
		s.mu.Unlock()
	}
	if !ok {
		return group.Description{}, ErrGroupNotFound
	}
	return group.Description{State: "Empty"}, nil
}
