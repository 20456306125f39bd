package broker

// SyncGroup. Followers wait for the leader's assignment.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.SyncGroup, 0, 5, (*Broker).handleSyncGroup) }

func (b *Broker) handleSyncGroup(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.SyncGroupRequest)
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	if r.Version >= 5 && (r.ProtocolType == nil || r.Protocol == nil) {
		// From v5 both are mandatory: Kafka refuses the request before it
		// looks at the group (KIP-559).
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		resp.MemberAssignment = []byte{}
		return now(resp)
	}
	in := group.SyncInput{MemberID: r.MemberID, InstanceID: r.InstanceID, Generation: r.Generation}
	if r.Version >= 5 {
		in.ProtocolType, in.Protocol = r.ProtocolType, r.Protocol
	}
	for _, a := range r.GroupAssignment {
		in.Assignments = append(in.Assignments, group.Assignment{MemberID: a.MemberID, Assignment: a.MemberAssignment})
	}
	ch, err := b.coord.Sync(r.Group, in)
	if err != nil {
		resp.ErrorCode = coordError(err).Code
		resp.MemberAssignment = []byte{}
		return now(resp)
	}
	return func() kmsg.Response {
		select {
		case res := <-ch:
			resp.ErrorCode, resp.ProtocolType, resp.Protocol = int16(res.Err), res.ProtocolType, res.Protocol
			resp.MemberAssignment = res.Assignment
			if resp.MemberAssignment == nil {
				resp.MemberAssignment = []byte{}
			}
			return resp
		case <-ctx.Done():
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
			resp.MemberAssignment = []byte{}
			return resp
		}
	}
}
