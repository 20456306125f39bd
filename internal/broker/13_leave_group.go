package broker

// LeaveGroup: (v3+ batches members, and may name static
// members by instance id: an admin removal; v5 carries reasons).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.LeaveGroup, 0, 5, (*Broker).handleLeaveGroup) }

func (b *Broker) handleLeaveGroup(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.LeaveGroupRequest)
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	in := group.LeaveInput{Version: r.Version}
	if r.Version <= 2 {
		in.Members = []group.LeaveMember{{MemberID: r.MemberID}}
	} else {
		for _, m := range r.Members {
			lm := group.LeaveMember{MemberID: m.MemberID, InstanceID: m.InstanceID}
			if m.Reason != nil {
				lm.Reason = *m.Reason
			}
			in.Members = append(in.Members, lm)
		}
	}
	res, err := b.coord.Leave(r.Group, in)
	if err != nil {
		resp.ErrorCode = coordError(err).Code
		return now(resp)
	}
	resp.ErrorCode = int16(res.Err)
	if r.Version >= 3 {
		for _, m := range res.Members {
			resp.Members = append(resp.Members, kmsg.LeaveGroupResponseMember{MemberID: m.MemberID, InstanceID: m.InstanceID, ErrorCode: int16(m.Err)})
		}
	}
	return now(resp)
}
