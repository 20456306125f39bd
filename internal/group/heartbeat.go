package group

import "time"

// Heartbeat handles a Heartbeat (v0–4); it is always answered at once.
func (g *Group) Heartbeat(now time.Time, in HeartbeatInput) Output {
	g.begin(now)
	g.out.Heartbeats = append(g.out.Heartbeats, HeartbeatResult{Ref: in.Ref, Err: g.heartbeat(in)})
	return g.end()
}

func (g *Group) heartbeat(in HeartbeatInput) Code {
	if g.state == Dead {
		return ErrNotCoordinator
	}
	if code := g.validateMember(in.MemberID, in.InstanceID); code != ErrNone {
		return code
	}
	if in.Generation != g.generation {
		return ErrIllegalGeneration
	}
	m := g.members[in.MemberID]
	switch g.state {
	case PreparingRebalance:
		g.armSession(m)
		return ErrRebalanceInProgress
	case CompletingRebalance, Stable:
		g.armSession(m)
		return ErrNone
	}
	return ErrUnknownMemberID
}
