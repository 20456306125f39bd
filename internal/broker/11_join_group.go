package broker

// JoinGroup, a long poll parked until the join phase ends.
// The group's state machine (internal/group) decides everything; this file
// translates and waits.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.JoinGroup, 0, 9, (*Broker).handleJoinGroup) }

func (b *Broker) handleJoinGroup(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.JoinGroupRequest)
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = -1
	resp.MemberID = r.MemberID
	in := group.JoinInput{
		Version: r.Version, MemberID: r.MemberID, InstanceID: r.InstanceID,
		ProtocolType:     r.ProtocolType,
		SessionTimeout:   time.Duration(r.SessionTimeoutMillis) * time.Millisecond,
		RebalanceTimeout: time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond,
		ClientID:         req.ClientID, ClientHost: c.clientHost(),
	}
	if r.Version == 0 {
		in.RebalanceTimeout = 0
	}
	if r.Reason != nil {
		in.Reason = *r.Reason
	}
	for _, p := range r.Protocols {
		in.Protocols = append(in.Protocols, group.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	ch, err := b.coord.Join(r.Group, in)
	if err != nil {
		resp.ErrorCode = coordError(err).Code
		return now(resp)
	}
	return func() kmsg.Response {
		select {
		case res := <-ch:
			resp.ErrorCode, resp.Generation, resp.MemberID = int16(res.Err), res.Generation, res.MemberID
			resp.ProtocolType, resp.Protocol, resp.LeaderID = res.ProtocolType, res.Protocol, res.Leader
			resp.SkipAssignment = res.SkipAssignment
			if r.Version < 7 && resp.Protocol == nil {
				empty := ""
				resp.Protocol = &empty // v0-v6 carry a non-null protocol name
			}
			for _, m := range res.Members {
				resp.Members = append(resp.Members, kmsg.JoinGroupResponseMember{
					MemberID: m.MemberID, InstanceID: m.InstanceID, ProtocolMetadata: m.Metadata})
			}
			return resp
		case <-ctx.Done():
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
			return resp
		}
	}
}
