package group

import "time"

// Leave handles a LeaveGroup (v0–5); it is always answered at once. A
// member may be named by member id, or (v3+, admin removal) by instance id
// with an empty member id.
func (g *Group) Leave(now time.Time, in LeaveInput) Output {
	g.begin(now)
	res := LeaveResult{Ref: in.Ref}
	if g.state == Dead {
		res.Err = ErrNotCoordinator
	} else {
		for _, lm := range in.Members {
			res.Members = append(res.Members, LeaveMemberResult{MemberID: lm.MemberID, InstanceID: lm.InstanceID, Err: g.leave(lm)})
		}
		if in.Version <= 2 && len(res.Members) > 0 {
			res.Err = res.Members[0].Err
		}
	}
	g.out.Leaves = append(g.out.Leaves, res)
	return g.end()
}

func (g *Group) leave(lm LeaveMember) Code {
	reason := withReason("LeaveGroup", lm.Reason)
	if lm.MemberID == "" {
		if lm.InstanceID == nil {
			return ErrUnknownMemberID
		}
		id, ok := g.static[*lm.InstanceID]
		if !ok {
			return ErrUnknownMemberID
		}
		g.removeMemberAndUpdate(g.members[id], reason)
		return ErrNone
	}
	if g.pending[lm.MemberID] {
		g.removePending(lm.MemberID, reason)
		return ErrNone
	}
	if code := g.validateMember(lm.MemberID, lm.InstanceID); code != ErrNone {
		return code
	}
	g.removeMemberAndUpdate(g.members[lm.MemberID], reason)
	return ErrNone
}
