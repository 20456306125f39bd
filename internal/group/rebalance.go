package group

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// maybePrepareRebalance starts a join phase unless one is running (Kafka's
// canRebalance: from Empty, CompletingRebalance or Stable).
func (g *Group) maybePrepareRebalance(reason string) {
	switch g.state {
	case Empty, CompletingRebalance, Stable:
		g.prepareRebalance(reason)
	}
}

// prepareRebalance starts a join phase. Parked SyncGroups are answered
// REBALANCE_IN_PROGRESS and the pending-sync timer stops. From Empty the
// phase waits InitialRebalanceDelay (extended while new members arrive,
// capped by the rebalance timeout); otherwise it ends as soon as every
// member rejoined, or at the rebalance timeout.
func (g *Group) prepareRebalance(reason string) {
	if g.state == CompletingRebalance {
		g.resetAssignments(ErrRebalanceInProgress)
	}
	g.cancel(TimerKey{Kind: TimerSyncTimeout})
	clear(g.pendingSync)
	wasEmpty := g.state == Empty
	if g.transition(PreparingRebalance) != nil {
		return
	}
	g.event(Event{Kind: EventRebalance, Reason: reason})
	rt := g.rebalanceTimeout()
	if wasEmpty {
		d := g.cfg.InitialRebalanceDelay
		if d <= 0 {
			// Kafka's InitialDelayedJoin with a zero delay expires at once.
			g.initialDelay = false
			g.completeNow = true
			return
		}
		g.initialDelay = true
		g.newMemberAdded = false
		g.delayRemaining = max(rt-d, 0)
		g.arm(TimerKey{Kind: TimerRebalanceDelay}, d)
		return
	}
	g.initialDelay = false
	g.arm(TimerKey{Kind: TimerRebalanceTimeout}, rt)
}

// resetAssignments clears every assignment and answers parked SyncGroups
// with code (Kafka's resetAndPropagateAssignmentError).
func (g *Group) resetAssignments(code Code) {
	for _, id := range g.order {
		m := g.members[id]
		m.assignment = nil
		if m.awaitingSync() {
			g.failSyncs(m, code)
			g.armSession(m)
		}
	}
}

// allJoined is Kafka's hasAllMembersJoined: every member has a parked
// JoinGroup and no KIP-394 pending member id is outstanding.
func (g *Group) allJoined() bool {
	if len(g.pending) > 0 {
		return false
	}
	for _, m := range g.members {
		if !m.awaitingJoin() {
			return false
		}
	}
	return true
}

func (g *Group) maybeCompleteJoin() {
	if g.state != PreparingRebalance {
		g.completeNow = false
		return
	}
	if g.completeNow || (!g.initialDelay && g.allJoined()) {
		g.completeJoin()
	}
}

// completeJoin ends the join phase (Kafka's onCompleteJoin): dynamic members
// that did not rejoin are removed (static ones stay until their session
// expires), a leader is elected among the members that rejoined, the
// generation grows, and every parked JoinGroup is answered.
func (g *Group) completeJoin() {
	g.completeNow = false
	g.initialDelay = false
	g.newMemberAdded = false
	g.cancel(TimerKey{Kind: TimerRebalanceDelay})
	g.cancel(TimerKey{Kind: TimerRebalanceTimeout})

	for _, id := range slices.Clone(g.order) {
		m := g.members[id]
		if !m.awaitingJoin() && !m.static() {
			g.removeMember(m, "did not rejoin before the rebalance timeout")
		}
	}
	if len(g.members) > 0 && !g.electJoinedLeader() {
		// No member rejoined (only static members that did not rejoin are
		// left): wait another rebalance timeout for their sessions to expire.
		g.event(Event{Kind: EventRebalance, Reason: "no member rejoined; waiting another rebalance timeout"})
		g.arm(TimerKey{Kind: TimerRebalanceTimeout}, g.rebalanceTimeout())
		return
	}

	g.generation++
	if len(g.members) == 0 {
		g.protocol, g.hasProtocol = "", false
		g.subscribed, g.subKnown = nil, false
		g.transition(Empty)
		g.persist = true
		return
	}
	p, ok := g.selectProtocol()
	if !ok {
		g.bug("no protocol supported by every member")
		p = g.members[g.order[0]].protocols[0].Name
	}
	g.protocol, g.hasProtocol = p, true
	g.computeSubscribed()
	if g.transition(CompletingRebalance) != nil {
		return
	}
	g.event(Event{Kind: EventGeneration, Member: g.leader, Reason: "protocol " + p})
	for _, id := range g.order {
		m := g.members[id]
		for _, ref := range m.joins {
			g.out.Joins = append(g.out.Joins, g.joinOK(ref, id, g.leader, id == g.leader, false))
		}
		m.joins = nil
		m.isNew = false
		g.armSession(m)
		g.pendingSync[id] = true
	}
	g.arm(TimerKey{Kind: TimerSyncTimeout}, g.rebalanceTimeout())
}

// electJoinedLeader keeps the leader if it rejoined, else picks the earliest
// member that did; false if none did.
func (g *Group) electJoinedLeader() bool {
	if m, ok := g.members[g.leader]; ok && m.awaitingJoin() {
		return true
	}
	for _, id := range g.order {
		if g.members[id].awaitingJoin() {
			g.leader = id
			return true
		}
	}
	return false
}

// computeSubscribed records the topics the generation's consumer members
// subscribe to (Kafka's computeSubscribedTopics): known only for protocol
// type "consumer" when every member's metadata decodes.
func (g *Group) computeSubscribed() {
	g.subscribed, g.subKnown = nil, false
	if g.protocolType != "consumer" || !g.hasProtocol || len(g.members) == 0 {
		return
	}
	set := map[string]bool{}
	for _, id := range g.order {
		var md kmsg.ConsumerMemberMetadata
		if err := md.ReadFrom(g.members[id].metadataFor(g.protocol)); err != nil {
			return
		}
		for _, t := range md.Topics {
			set[t] = true
		}
	}
	for t := range set {
		g.subscribed = append(g.subscribed, t)
	}
	slices.Sort(g.subscribed)
	g.subKnown = true
}
