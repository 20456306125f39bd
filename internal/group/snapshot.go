package group

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Snapshot is the durable part of a group's membership: what a coordinator
// that gains the group (a move, a restart, an idle group loaded again) needs
// to continue the same generation (docs/group.md, "Durable state"). It holds
// no timers, no parked requests and no KIP-394 pending ids.
type Snapshot struct {
	ProtocolType string
	// Protocol is the protocol of Generation; meaningful only when
	// HasProtocol (a protocol name may be empty).
	Protocol    string
	HasProtocol bool
	Generation  int32
	Leader      string
	// Rebalancing: the group was between generations (PreparingRebalance
	// or CompletingRebalance) when the snapshot was taken.
	Rebalancing bool
	// Members in join order.
	Members []MemberSnapshot
}

// MemberSnapshot is one member of a Snapshot.
type MemberSnapshot struct {
	MemberID         string
	InstanceID       string // "" for a dynamic member
	ClientID         string
	ClientHost       string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	Protocols        []Protocol
	Assignment       []byte
}

// Snapshot returns the group's durable state as of now. The shell writes it
// when an Output has Persist set. Slices are copies.
func (g *Group) Snapshot() Snapshot {
	s := Snapshot{ProtocolType: g.protocolType, Generation: g.generation, Leader: g.leader,
		Rebalancing: g.state == PreparingRebalance || g.state == CompletingRebalance}
	if g.hasProtocol {
		s.Protocol, s.HasProtocol = g.protocol, true
	}
	for _, id := range g.order {
		m := g.members[id]
		ps := make([]Protocol, len(m.protocols))
		for i, p := range m.protocols {
			ps[i] = Protocol{Name: p.Name, Metadata: slices.Clone(p.Metadata)}
		}
		s.Members = append(s.Members, MemberSnapshot{MemberID: id, InstanceID: m.instanceID, ClientID: m.clientID,
			ClientHost: m.clientHost, SessionTimeout: m.sessionTimeout, RebalanceTimeout: m.rebalanceTimeout,
			Protocols: ps, Assignment: slices.Clone(m.assignment)})
	}
	return s
}

// ErrRestore is returned by Restore for a snapshot it cannot take.
var ErrRestore = errors.New("group: cannot restore snapshot")

// validate checks what Restore relies on.
func (s *Snapshot) validate() error {
	if s.Generation < 0 {
		return fmt.Errorf("generation %d", s.Generation)
	}
	if len(s.Members) == 0 {
		return nil
	}
	if s.ProtocolType == "" {
		return errors.New("members without a protocol type")
	}
	ids := map[string]bool{}
	instances := map[string]bool{}
	for _, m := range s.Members {
		switch {
		case m.MemberID == "":
			return errors.New("a member without an id")
		case ids[m.MemberID]:
			return fmt.Errorf("member %q twice", m.MemberID)
		case m.InstanceID != "" && instances[m.InstanceID]:
			return fmt.Errorf("instance %q twice", m.InstanceID)
		case m.SessionTimeout <= 0 || m.RebalanceTimeout <= 0:
			return fmt.Errorf("member %q: timeouts %v/%v", m.MemberID, m.SessionTimeout, m.RebalanceTimeout)
		case len(m.Protocols) == 0:
			return fmt.Errorf("member %q without protocols", m.MemberID)
		case s.HasProtocol && !s.Rebalancing && !hasProtocol(m.Protocols, s.Protocol):
			// Only a settled generation: mid-rebalance a member may have
			// rejoined without the last generation's protocol.
			return fmt.Errorf("member %q does not support protocol %q", m.MemberID, s.Protocol)
		}
		ids[m.MemberID] = true
		if m.InstanceID != "" {
			instances[m.InstanceID] = true
		}
	}
	if !ids[s.Leader] {
		return fmt.Errorf("leader %q is not a member", s.Leader)
	}
	if !s.Rebalancing && !s.HasProtocol {
		return errors.New("a settled generation without a protocol")
	}
	return nil
}

// Restore loads a snapshot into a group created by New that has had no
// input yet. The group continues the snapshot's generation: members keep
// their ids, instance ids and assignments, and each member's session starts
// afresh at now. A settled snapshot (not Rebalancing) with members is
// Stable; one taken between generations starts a join phase (the members
// rejoin with their ids; the rebalance timeout is armed) with the
// assignments cleared; one without members is Empty with its generation and
// protocol type. On error the group is left as it was.
func (g *Group) Restore(now time.Time, s Snapshot) (Output, error) {
	if g.state != Empty || g.generation != 0 || len(g.members) > 0 || len(g.pending) > 0 || len(g.timers) > 0 {
		return Output{}, fmt.Errorf("%w: group %s is in use", ErrRestore, g.id)
	}
	if err := s.validate(); err != nil {
		return Output{}, fmt.Errorf("%w: group %s: %w", ErrRestore, g.id, err)
	}
	g.begin(now)
	g.generation = s.Generation
	g.protocolType = s.ProtocolType
	if len(s.Members) == 0 {
		g.event(Event{Kind: EventRestored, To: Empty})
		return g.end(), nil
	}
	g.protocol, g.hasProtocol = s.Protocol, s.HasProtocol
	g.leader = s.Leader
	for _, ms := range s.Members {
		m := &member{id: ms.MemberID, instanceID: ms.InstanceID, clientID: ms.ClientID, clientHost: ms.ClientHost,
			sessionTimeout: ms.SessionTimeout, rebalanceTimeout: ms.RebalanceTimeout, protocolType: s.ProtocolType,
			assignment: slices.Clone(ms.Assignment)}
		for _, p := range ms.Protocols {
			m.protocols = append(m.protocols, Protocol{Name: p.Name, Metadata: slices.Clone(p.Metadata)})
		}
		g.members[m.id] = m
		g.order = append(g.order, m.id)
		if m.static() {
			g.static[m.instanceID] = m.id
		}
		g.armSession(m)
	}
	g.computeSubscribed()
	// Loading is not a transition of the table: the group takes the state
	// it was written in (Kafka's coordinator loads groups the same way).
	if s.Rebalancing {
		for _, m := range g.members {
			m.assignment = nil
		}
		g.state = PreparingRebalance
		g.event(Event{Kind: EventRestored, To: PreparingRebalance})
		g.event(Event{Kind: EventRebalance, Reason: "loaded while a rebalance was in progress"})
		g.arm(TimerKey{Kind: TimerRebalanceTimeout}, g.rebalanceTimeout())
		return g.end(), nil
	}
	g.state = Stable
	g.event(Event{Kind: EventRestored, To: Stable})
	return g.end(), nil
}

// Rebalance starts a join phase unless one is running or the group has no
// members. The shell calls it when the write of a completed generation
// failed: the members were answered with an error and must form a new
// generation (Kafka's resetAndPropagateAssignmentError followed by
// maybePrepareRebalance).
func (g *Group) Rebalance(now time.Time, reason string) Output {
	g.begin(now)
	if g.state == Stable || g.state == CompletingRebalance {
		g.maybePrepareRebalance(reason)
	}
	return g.end()
}
