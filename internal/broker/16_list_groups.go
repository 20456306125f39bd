package broker

// ListGroups. Lists only the groups this broker coordinates
// (admin clients union the answers of every broker). v4 filters by state,
// v5 by type ("classic", or "consumer" for a KIP-848 group).

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.ListGroups, 0, 5, (*Broker).handleListGroups) }

func (b *Broker) handleListGroups(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.ListGroupsRequest)
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	groups, err := b.coord.List()
	if err != nil {
		resp.ErrorCode = coordError(err).Code
		return now(resp)
	}
	match := func(filter []string, v string) bool {
		if len(filter) == 0 {
			return true
		}
		for _, f := range filter {
			if strings.EqualFold(f, v) {
				return true
			}
		}
		return false
	}
	for _, g := range groups {
		if r.Version >= 4 && !match(r.StatesFilter, g.State) {
			continue
		}
		typ := g.Type
		if typ == "" {
			typ = "classic"
		}
		if r.Version >= 5 && !match(r.TypesFilter, typ) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = g.Group, g.ProtocolType, g.State, typ
		resp.Groups = append(resp.Groups, lg)
	}
	return now(resp)
}
