package broker

// InitProducerId: versions 0-5, for idempotent producers (no transactional
// id): a fresh producer id, unique across every broker on the volume, with
// epoch 0. A transactional id is refused until transactions are served.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func (b *Broker) handleInitProducerID(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.InitProducerIDRequest)
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		c.log.Info("InitProducerId refused: transactions are not served by this broker yet", "transactional_id", *r.TransactionalID)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return now(resp)
	}
	id, err := b.pids.next()
	if err != nil {
		b.log.Error("allocating a producer id failed", "err", err)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return now(resp)
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return now(resp)
}
