package group

import (
	"slices"
	"time"
)

// Timer handles the firing of a timer the shell armed from a TimerArm. A
// firing whose seq is not the slot's current one (the slot was re-armed or
// cancelled after the shell's timer fired but before this call) is stale
// and ignored with an empty Output.
func (g *Group) Timer(now time.Time, key TimerKey, seq uint64) Output {
	g.begin(now)
	if s, ok := g.timers[key]; ok && s.seq == seq {
		// The slot is consumed: it fired, the shell holds nothing for it.
		delete(g.timers, key)
		g.fire(key)
	}
	return g.end()
}

func (g *Group) fire(key TimerKey) {
	switch key.Kind {
	case TimerSession:
		m, ok := g.members[key.Member]
		if !ok {
			return
		}
		// Members parked in a rebalance count as alive (Kafka's
		// hasSatisfiedHeartbeat), except a brand-new member whose first
		// JoinGroup waited NewMemberJoinTimeout.
		if !m.isNew && (m.awaitingJoin() || m.awaitingSync()) {
			return
		}
		reason := "session timeout"
		if m.isNew {
			reason = "new member join timeout"
		}
		g.removeMemberAndUpdate(m, reason)
	case TimerPendingMember:
		if g.pending[key.Member] {
			g.removePending(key.Member, "pending member did not rejoin within its session timeout")
		}
	case TimerRebalanceDelay:
		if g.state != PreparingRebalance || !g.initialDelay {
			g.bug("initial delay fired in state %s", g.state)
			return
		}
		if g.newMemberAdded && g.delayRemaining > 0 {
			// New members keep arriving: the window extends to one delay
			// after the last of them, capped by the rebalance timeout. A
			// group whose members all joined at once so forms one delay
			// after they joined, not two.
			g.newMemberAdded = false
			d := min(g.cfg.InitialRebalanceDelay-g.now.Sub(g.lastNewMember), g.delayRemaining)
			if d > 0 {
				g.delayRemaining -= d
				g.arm(TimerKey{Kind: TimerRebalanceDelay}, d)
				return
			}
		}
		g.completeJoin()
	case TimerRebalanceTimeout:
		if g.state != PreparingRebalance || g.initialDelay {
			g.bug("rebalance timeout fired in state %s", g.state)
			return
		}
		g.completeJoin()
	case TimerSyncTimeout:
		if g.state != CompletingRebalance && g.state != Stable {
			g.bug("sync timeout fired in state %s", g.state)
			return
		}
		if len(g.pendingSync) == 0 {
			return
		}
		var gone []string
		for _, id := range slices.Clone(g.order) {
			if g.pendingSync[id] {
				gone = append(gone, id)
				g.removeMember(g.members[id], "no SyncGroup within the rebalance timeout")
			}
		}
		g.prepareRebalance("members did not send SyncGroup in time: " + joinIDs(gone))
	default:
		g.bug("unknown timer %s", key)
	}
}

func joinIDs(ids []string) string {
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += ","
		}
		s += id
	}
	return s
}
