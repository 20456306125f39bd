package group

import "time"

// CheckCommit is the group gate of an OffsetCommit or TxnOffsetCommit. It
// returns ErrNone if the commit may proceed. A commit by a member in Stable
// or PreparingRebalance also counts as a heartbeat: the Output then re-arms
// its session timer.
//
// A group that does not exist at all is the shell's case: Kafka allows a
// simple commit (generation < 0) and answers ILLEGAL_GENERATION otherwise.
func (g *Group) CheckCommit(now time.Time, in CommitCheck) (Code, Output) {
	g.begin(now)
	code := g.checkCommit(in)
	return code, g.end()
}

func (g *Group) checkCommit(in CommitCheck) Code {
	if g.state == Dead {
		return ErrNotCoordinator
	}
	if in.Generation < 0 && in.MemberID == "" && in.InstanceID == nil {
		// A simple commit: only while Empty (transactional: always).
		if !in.Transactional && g.state != Empty {
			return ErrUnknownMemberID
		}
		return ErrNone
	}
	if code := g.validateMember(in.MemberID, in.InstanceID); code != ErrNone {
		return code
	}
	if in.Generation != g.generation {
		return ErrIllegalGeneration
	}
	if in.Transactional {
		return ErrNone
	}
	switch g.state {
	case Stable, PreparingRebalance:
		g.armSession(g.members[in.MemberID])
		return ErrNone
	case CompletingRebalance:
		return ErrRebalanceInProgress
	}
	return ErrUnknownMemberID
}
