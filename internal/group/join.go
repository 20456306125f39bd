package group

import (
	"fmt"
	"slices"
	"time"
)

// Join handles a JoinGroup (v0–9). The answer is in the Output now
// (errors, KIP-394 MEMBER_ID_REQUIRED, a follower or static member rejoining
// a settled group) or later, when the join phase ends (the request is
// parked).
func (g *Group) Join(now time.Time, in JoinInput) Output {
	g.begin(now)
	g.join(in)
	return g.end()
}

func (g *Group) join(in JoinInput) {
	switch {
	case g.state == Dead:
		g.joinErr(in.Ref, in.MemberID, ErrNotCoordinator)
		return
	case g.id == "":
		g.joinErr(in.Ref, in.MemberID, ErrInvalidGroupID)
		return
	}
	if code := g.cfg.CheckTimeouts(&in); code != ErrNone {
		g.joinErr(in.Ref, in.MemberID, code)
		return
	}
	if in.InstanceID != nil && *in.InstanceID == "" {
		in.InstanceID = nil
	}
	if !g.acceptJoining(in.MemberID) {
		if m, ok := g.members[in.MemberID]; ok {
			g.removeMember(m, "group max size reached")
		}
		if g.pending[in.MemberID] {
			g.removePending(in.MemberID, "group max size reached")
		}
		g.joinErr(in.Ref, "", ErrGroupMaxSizeReached)
		return
	}
	if in.MemberID == "" {
		g.joinNew(in)
	} else {
		g.joinCurrent(in)
	}
}

// acceptJoining is Kafka's acceptJoiningMember: while preparing, members
// already rejoined plus up to MaxSize awaiting; otherwise existing members
// plus up to MaxSize.
func (g *Group) acceptJoining(memberID string) bool {
	if g.cfg.MaxSize <= 0 {
		return true
	}
	switch g.state {
	case PreparingRebalance:
		if m, ok := g.members[memberID]; ok && m.awaitingJoin() {
			return true
		}
		n := 0
		for _, m := range g.members {
			if m.awaitingJoin() {
				n++
			}
		}
		return n < g.cfg.MaxSize
	case CompletingRebalance, Stable:
		_, ok := g.members[memberID]
		return ok || len(g.members) < g.cfg.MaxSize
	}
	return true
}

func (g *Group) newID(prefix string) string {
	for i := 0; ; i++ {
		id := g.cfg.NewMemberID(prefix)
		if i >= 8 {
			g.seq++
			id = fmt.Sprintf("%s-%d", id, g.seq)
		}
		if _, used := g.members[id]; !used && !g.pending[id] && id != "" {
			return id
		}
		g.bug("member id generator returned %q, already in use", id)
	}
}

func (g *Group) joinNew(in JoinInput) {
	if !g.supportsProtocols(in.ProtocolType, in.Protocols) {
		g.joinErr(in.Ref, "", ErrInconsistentGroupProtocol)
		return
	}
	if in.InstanceID != nil {
		id := g.newID(*in.InstanceID)
		if old, ok := g.static[*in.InstanceID]; ok {
			g.replaceStatic(in, g.members[old], id)
			return
		}
		g.addAndRebalance(in, id)
		return
	}
	id := g.newID(in.ClientID)
	if in.Version >= 4 {
		g.pending[id] = true
		g.arm(TimerKey{Kind: TimerPendingMember, Member: id}, in.SessionTimeout)
		g.event(Event{Kind: EventPendingAdded, Member: id})
		g.joinErr(in.Ref, id, ErrMemberIDRequired)
		return
	}
	g.addAndRebalance(in, id)
}

func (g *Group) joinCurrent(in JoinInput) {
	if !g.supportsProtocols(in.ProtocolType, in.Protocols) {
		g.joinErr(in.Ref, in.MemberID, ErrInconsistentGroupProtocol)
		return
	}
	if g.pending[in.MemberID] {
		if in.InstanceID != nil {
			// Kafka treats this as impossible (pending ids are dynamic).
			if _, taken := g.static[*in.InstanceID]; taken {
				g.joinErr(in.Ref, in.MemberID, ErrFencedInstanceID)
				return
			}
		}
		g.removePending(in.MemberID, "rejoined with its member id")
		g.addAndRebalance(in, in.MemberID)
		return
	}
	if code := g.validateMember(in.MemberID, in.InstanceID); code != ErrNone {
		g.joinErr(in.Ref, in.MemberID, code)
		return
	}
	m := g.members[in.MemberID]
	switch g.state {
	case PreparingRebalance:
		g.updateAndRebalance(m, in, "member "+m.id+" joining during PreparingRebalance")
	case CompletingRebalance:
		if m.matches(in.Protocols) {
			// It lost its JoinGroup answer: repeat it.
			g.out.Joins = append(g.out.Joins, g.joinOK(in.Ref, m.id, g.leader, m.id == g.leader, false))
			return
		}
		g.updateAndRebalance(m, in, "member "+m.id+" changed metadata during CompletingRebalance")
	case Stable:
		switch {
		case m.id == g.leader:
			// The leader rejoining forces a rebalance (it may have seen
			// topic metadata change).
			g.updateAndRebalance(m, in, "leader "+m.id+" rejoining during Stable")
		case !m.matches(in.Protocols):
			g.updateAndRebalance(m, in, "member "+m.id+" changed metadata during Stable")
		default:
			g.out.Joins = append(g.out.Joins, g.joinOK(in.Ref, m.id, g.leader, false, false))
		}
	default:
		g.joinErr(in.Ref, in.MemberID, ErrUnknownMemberID)
	}
}

func withReason(base, client string) string {
	if client == "" {
		return base
	}
	return base + "; client reason: " + client
}

func (g *Group) updateMember(m *member, in JoinInput) {
	m.protocols = slices.Clone(in.Protocols)
	m.protocolType = in.ProtocolType
	m.sessionTimeout = in.SessionTimeout
	m.rebalanceTimeout = in.RebalanceTimeout
}

func (g *Group) updateAndRebalance(m *member, in JoinInput, reason string) {
	g.updateMember(m, in)
	m.joins = append(m.joins, in.Ref)
	g.maybePrepareRebalance(withReason(reason, in.Reason))
}

func (g *Group) addAndRebalance(in JoinInput, id string) {
	m := &member{
		id:         id,
		clientID:   in.ClientID,
		clientHost: in.ClientHost,
		isNew:      true,
		joins:      []any{in.Ref},
	}
	if in.InstanceID != nil {
		m.instanceID = *in.InstanceID
	}
	g.updateMember(m, in)
	if g.state == PreparingRebalance && g.initialDelay {
		g.newMemberAdded = true
		g.lastNewMember = g.now
	}
	g.addMember(m)
	g.armSession(m)
	g.maybePrepareRebalance(withReason("adding new member "+id, in.Reason))
}

// replaceStatic is KIP-345's rejoin of a known static member with an empty
// member id: the old member id is fenced (its parked requests answered
// FENCED_INSTANCE_ID) and newID takes its place, keeping its assignment.
// In Stable with an unchanged chosen protocol there is no rebalance.
func (g *Group) replaceStatic(in JoinInput, m *member, newID string) {
	oldID := m.id
	prevLeader := g.leader
	g.failJoins(m, oldID, ErrFencedInstanceID)
	g.failSyncs(m, ErrFencedInstanceID)
	g.cancel(TimerKey{Kind: TimerSession, Member: oldID})
	delete(g.members, oldID)
	m.id = newID
	g.members[newID] = m
	g.order[slices.Index(g.order, oldID)] = newID
	g.static[m.instanceID] = newID
	if g.leader == oldID {
		g.leader = newID
	}
	if g.pendingSync[oldID] {
		delete(g.pendingSync, oldID)
		g.pendingSync[newID] = true
	}
	m.clientID, m.clientHost = in.ClientID, in.ClientHost
	g.updateMember(m, in)
	g.persist = true
	g.event(Event{Kind: EventMemberReplaced, Member: newID, OldMember: oldID, Instance: m.instanceID, Reason: in.Reason})
	g.armSession(m)

	switch g.state {
	case Stable:
		if p, ok := g.selectProtocol(); ok && g.hasProtocol && p == g.protocol {
			// KIP-814: a v9+ leader gets the member list and SkipAssignment;
			// an older one is told the previous leader id, so it acts as a
			// follower and syncs to fetch its stored assignment.
			if newID == g.leader && in.Version >= 9 {
				g.out.Joins = append(g.out.Joins, g.joinOK(in.Ref, newID, newID, true, true))
			} else {
				g.out.Joins = append(g.out.Joins, g.joinOK(in.Ref, newID, prevLeader, false, false))
			}
			return
		}
		m.joins = append(m.joins, in.Ref)
		g.prepareRebalance(withReason("static member "+newID+" (instance "+m.instanceID+") rejoined with a change of the selected protocol", in.Reason))
	case CompletingRebalance:
		// The leader may already be assigning to the old member id.
		m.joins = append(m.joins, in.Ref)
		g.prepareRebalance(withReason("static member "+newID+" (instance "+m.instanceID+") rejoined during CompletingRebalance", in.Reason))
	case PreparingRebalance:
		m.joins = append(m.joins, in.Ref)
	default:
		g.bug("static member %s in state %s", oldID, g.state)
		g.joinErr(in.Ref, newID, ErrUnknownMemberID)
	}
}
