package broker

// Heartbeat.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.Heartbeat, 0, 4, (*Broker).handleHeartbeat) }

func (b *Broker) handleHeartbeat(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.HeartbeatRequest)
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	res, err := b.coord.Heartbeat(r.Group, group.HeartbeatInput{MemberID: r.MemberID, InstanceID: r.InstanceID, Generation: r.Generation})
	if err != nil {
		resp.ErrorCode = coordError(err).Code
	} else {
		resp.ErrorCode = int16(res.Err)
	}
	return now(resp)
}
