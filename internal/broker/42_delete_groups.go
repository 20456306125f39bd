package broker

// DeleteGroups. NON_EMPTY_GROUP unless the group is Empty;
// GROUP_ID_NOT_FOUND when neither members nor an offsets file exist.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.DeleteGroups, 0, 2, (*Broker).handleDeleteGroups) }

func (b *Broker) handleDeleteGroups(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.DeleteGroupsRequest)
	return func() kmsg.Response {
		resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
		for _, g := range r.Groups {
			dg := kmsg.NewDeleteGroupsResponseGroup()
			dg.Group = g
			if err := b.coord.DeleteGroup(ctx, g); err != nil {
				dg.ErrorCode = coordError(err).Code
			}
			resp.Groups = append(resp.Groups, dg)
		}
		return resp
	}
}
