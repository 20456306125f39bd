package broker

// FindCoordinator. Key type 0 (group) uses the two-tier
// ownership function, key type 1 (transaction) the routing hash; batched
// keys at v4+. No disk I/O: the answer comes from the applied assignment.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/wire"
)

func (b *Broker) findCoordinator(keyType int8, key string) (coord.Broker, *kerr.Error) {
	var (
		cb  coord.Broker
		err error
	)
	switch keyType {
	case 0:
		cb, err = b.coord.FindGroup(key)
	case 1:
		cb, err = b.coord.FindTxn(key)
	default:
		return coord.Broker{}, kerr.InvalidRequest
	}
	if err != nil {
		return coord.Broker{}, coordError(err)
	}
	if cb.NodeID == b.cfg.ID { // this broker: its own listener is the truth
		self := b.self()
		cb.Host, cb.Port = self.Host, self.Port
	}
	return cb, nil
}

func init() { register(kmsg.FindCoordinator, 0, 5, (*Broker).handleFindCoordinator) }

func (b *Broker) handleFindCoordinator(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.FindCoordinatorRequest)
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	if r.Version <= 3 {
		cb, e := b.findCoordinator(r.CoordinatorType, r.CoordinatorKey)
		if e != nil {
			resp.ErrorCode, resp.NodeID, resp.Port = e.Code, -1, -1
			msg := e.Message
			resp.ErrorMessage = &msg
			return now(resp)
		}
		resp.NodeID, resp.Host, resp.Port = cb.NodeID, cb.Host, cb.Port
		return now(resp)
	}
	for _, key := range r.CoordinatorKeys {
		rc := kmsg.NewFindCoordinatorResponseCoordinator()
		rc.Key = key
		cb, e := b.findCoordinator(r.CoordinatorType, key)
		if e != nil {
			rc.ErrorCode, rc.NodeID, rc.Port = e.Code, -1, -1
			msg := e.Message
			rc.ErrorMessage = &msg
		} else {
			rc.NodeID, rc.Host, rc.Port = cb.NodeID, cb.Host, cb.Port
		}
		resp.Coordinators = append(resp.Coordinators, rc)
	}
	return now(resp)
}
