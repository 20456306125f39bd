package broker

// DescribeGroups. A group owned elsewhere answers
// NOT_COORDINATOR; an unknown group is Dead (v0-v5) or GROUP_ID_NOT_FOUND (v6).

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.DescribeGroups, 0, 6, (*Broker).handleDescribeGroups) }

func (b *Broker) handleDescribeGroups(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.DescribeGroupsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, g := range r.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group = g
		dg.AuthorizedOperations = -2147483648 // not requested / not computed
		d, err := b.coord.Describe(g)
		switch {
		case errors.Is(err, coord.ErrNotClassicGroup):
			dg.State = "Dead"
			dg.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "Group " + g + " is not a classic group."
			dg.ErrorMessage = &msg
		case errors.Is(err, coord.ErrGroupNotFound), errors.Is(err, coord.ErrInvalidGroupID):
			// Kafka 4.4 describes the empty group id as a group it does
			// not know, not as INVALID_GROUP_ID.
			dg.State = "Dead"
			if r.Version >= 6 {
				dg.ErrorCode = kerr.GroupIDNotFound.Code
				msg := "group " + g + " not found"
				dg.ErrorMessage = &msg
			}
		case err != nil:
			dg.ErrorCode = coordError(err).Code
			dg.State = "Dead"
		default:
			dg.State, dg.ProtocolType, dg.Protocol = d.State, d.ProtocolType, d.Protocol
			for _, m := range d.Members {
				dg.Members = append(dg.Members, kmsg.DescribeGroupsResponseGroupMember{
					MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID, ClientHost: m.ClientHost,
					ProtocolMetadata: nonNil(m.Metadata), MemberAssignment: nonNil(m.Assignment)})
			}
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return now(resp)
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
