package coord

import (
	"context"
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
// s.mu held.
func (c *Coordinator) ensureMembership(s *shell) *membership {
	if s.member == nil {
		s.member = &membership{c: c, s: s, core: group.New(s.id, c.cfg.Group), timers: map[group.TimerKey]armed{}}
	}
	return s.member
}

// admitCommit applies ownership and the group's generation rules to an
// OffsetCommit or TxnOffsetCommit, and notes the commit for group balancing.
func (c *Coordinator) admitCommit(groupID string, in group.CommitCheck) error {
	if err := c.check(groupID); err != nil {
		return err
	}
	s, err := c.shellFor(groupID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return ErrNotCoordinator
	}
	switch {
	case s.member == nil && in.Generation >= 0 && !(in.Transactional && in.MemberID == ""):
		// No membership here: a member's commit comes from a generation
		// this coordinator never saw (Kafka answers ILLEGAL_GENERATION for a
		// group it does not have).
		return ErrIllegalGeneration
	case s.member != nil && (!in.Transactional || in.MemberID != ""):
		code, out := s.member.core.CheckCommit(c.cfg.Now(), in)
		s.member.apply(out)
		if code != 0 {
			return CodeError(code)
		}
	}
	s.lastCommit = c.cfg.Now()
	return nil
}

// unload answers every parked request so that clients go back to
// FindCoordinator, stops the timers, and forgets the group. Called with
// s.mu held.
func (s *shell) unload() {
	s.gone = true
	if s.member == nil {
		return
	}
	m := s.member
	m.apply(m.core.Unload())
	for k, a := range m.timers {
		a.t.Stop()
		delete(m.timers, k)
	}
	s.member = nil
}

// apply performs an Output: responses, timers, log events. Called with
// s.mu held; channel sends never block (each waiter's channel has room for
// its one answer).
func (m *membership) apply(out group.Output) {
	for _, r := range out.Joins {
		r.Ref.(chan group.JoinResult) <- r
	}
	for _, r := range out.Syncs {
		r.Ref.(chan group.SyncResult) <- r
	}
	for _, r := range out.Heartbeats {
		r.Ref.(chan group.HeartbeatResult) <- r
	}
	for _, r := range out.Leaves {
		r.Ref.(chan group.LeaveResult) <- r
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
	if m.core.Empty() && m.s.emptySince.IsZero() {
		m.s.emptySince = m.c.cfg.Now()
	} else if !m.core.Empty() {
		m.s.emptySince = time.Time{}
	}
	m.noteRetention()
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
	m.apply(m.core.Timer(c.cfg.Now(), key, seq))
}

// begin locks an owned group's shell for a membership request and returns
// its state machine; the caller unlocks s.mu.
func (c *Coordinator) begin(groupID string) (*shell, *membership, error) {
	if err := c.check(groupID); err != nil {
		return nil, nil, err
	}
	s, err := c.shellFor(groupID)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return nil, nil, ErrNotCoordinator
	}
	return s, c.ensureMembership(s), nil
}

// Join feeds a JoinGroup to the group; the answer arrives on the returned
// channel when the join phase ends (JoinGroup is a long poll).
func (c *Coordinator) Join(groupID string, in group.JoinInput) (<-chan group.JoinResult, error) {
	s, m, err := c.begin(groupID)
	if err != nil {
		return nil, err
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
	defer s.mu.Unlock()
	ch := make(chan group.HeartbeatResult, 1)
	in.Ref = ch
	m.apply(m.core.Heartbeat(c.cfg.Now(), in))
	return <-ch, nil
}

// Leave feeds a LeaveGroup; the answer is immediate.
func (c *Coordinator) Leave(groupID string, in group.LeaveInput) (group.LeaveResult, error) {
	s, m, err := c.begin(groupID)
	if err != nil {
		return group.LeaveResult{}, err
	}
	defer s.mu.Unlock()
	ch := make(chan group.LeaveResult, 1)
	in.Ref = ch
	m.apply(m.core.Leave(c.cfg.Now(), in))
	return <-ch, nil
}

// Describe describes a group this broker coordinates. A group that exists
// only as an offsets file is Empty; an unknown group is ErrGroupNotFound.
func (c *Coordinator) Describe(groupID string) (group.Description, error) {
	if err := c.check(groupID); err != nil {
		return group.Description{}, err
	}
	if s := c.resident(groupID); s != nil {
		s.mu.Lock()
		if !s.gone && s.member != nil && (!s.member.empty() || s.member.generation() > 0) {
			d := s.member.core.Describe()
			s.mu.Unlock()
			return d, nil
		}
		s.mu.Unlock()
	}
	ok, err := c.store.Exists(groupID)
	if err != nil {
		return group.Description{}, storeErr(groupID, err)
	}
	if !ok {
		return group.Description{}, ErrGroupNotFound
	}
	return group.Description{State: "Empty"}, nil
}
