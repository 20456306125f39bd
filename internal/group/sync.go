package group

import "time"

// Sync handles a SyncGroup (v0–5). A follower's SyncGroup during
// CompletingRebalance is parked until the leader's arrives.
func (g *Group) Sync(now time.Time, in SyncInput) Output {
	g.begin(now)
	g.sync(in)
	return g.end()
}

func (g *Group) sync(in SyncInput) {
	if g.state == Dead {
		g.syncErr(in.Ref, ErrNotCoordinator)
		return
	}
	if code := g.validateMember(in.MemberID, in.InstanceID); code != ErrNone {
		g.syncErr(in.Ref, code)
		return
	}
	switch {
	case in.Generation != g.generation:
		g.syncErr(in.Ref, ErrIllegalGeneration)
		return
	case in.ProtocolType != nil && *in.ProtocolType != g.protocolType,
		in.Protocol != nil && (!g.hasProtocol || *in.Protocol != g.protocol):
		g.syncErr(in.Ref, ErrInconsistentGroupProtocol)
		return
	}
	m := g.members[in.MemberID]
	switch g.state {
	case PreparingRebalance:
		g.syncErr(in.Ref, ErrRebalanceInProgress)
	case CompletingRebalance:
		m.syncs = append(m.syncs, in.Ref)
		g.dropPendingSync(m.id)
		if m.id == g.leader {
			g.storeAssignment(in.Assignments)
		}
	case Stable:
		g.dropPendingSync(m.id)
		pt, pn := g.protocolPtrs()
		g.out.Syncs = append(g.out.Syncs, SyncResult{Ref: in.Ref, ProtocolType: pt, Protocol: pn, Assignment: m.assignment})
		g.armSession(m)
	default:
		g.syncErr(in.Ref, ErrUnknownMemberID)
	}
}

// storeAssignment takes the leader's assignment (members it omitted get an
// empty one; entries for unknown members are ignored; a repeated member id
// keeps the last), answers every parked SyncGroup and makes the group Stable.
func (g *Group) storeAssignment(as []Assignment) {
	byID := make(map[string][]byte, len(as))
	for _, a := range as {
		byID[a.MemberID] = a.Assignment
	}
	missing := 0
	for _, id := range g.order {
		a, ok := byID[id]
		if !ok {
			missing++
		}
		g.members[id].assignment = a
	}
	if g.transition(Stable) != nil {
		return
	}
	g.persist = true
	reason := ""
	if missing > 0 {
		reason = "leader omitted some members; they get an empty assignment"
	}
	g.event(Event{Kind: EventAssignment, Member: g.leader, Reason: reason})
	pt, pn := g.protocolPtrs()
	for _, id := range g.order {
		m := g.members[id]
		if !m.awaitingSync() {
			continue
		}
		for _, ref := range m.syncs {
			g.out.Syncs = append(g.out.Syncs, SyncResult{Ref: ref, ProtocolType: pt, Protocol: pn, Assignment: m.assignment})
		}
		m.syncs = nil
		g.armSession(m)
	}
}
