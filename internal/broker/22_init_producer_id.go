package broker

// InitProducerId. Without a transactional id (idempotent
// producers): a fresh producer id, unique across every broker on the volume,
// with epoch 0. With one: answered only by the id's transaction coordinator
// (the routing hash), which aborts what a previous session left open and
// bumps the epoch, fencing that session.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.InitProducerID, 0, 5, (*Broker).handleInitProducerID) }

func (b *Broker) handleInitProducerID(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.InitProducerIDRequest)
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		id := *r.TransactionalID
		timeout := time.Duration(r.TransactionTimeoutMillis) * time.Millisecond
		pid, epoch := int64(-1), int16(-1)
		if r.Version >= 3 {
			pid, epoch = r.ProducerID, r.ProducerEpoch
		}
		return func() kmsg.Response {
			res, err := b.txn.InitProducerID(ctx, id, timeout, pid, epoch)
			if err != nil {
				resp.ErrorCode = txnError(err, r.Version >= 4).Code
				return resp
			}
			resp.ProducerID, resp.ProducerEpoch = res.ProducerID, res.ProducerEpoch
			return resp
		}
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
