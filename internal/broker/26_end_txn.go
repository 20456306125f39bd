package broker

// EndTxn. Answered once the markers are in every partition
// and every group of the transaction (the decision is durable before the
// first marker). kaas does not advertise transaction.version 2, so v5
// returns the producer id and epoch unchanged.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.EndTxn, 0, 5, (*Broker).handleEndTxn) }

func (b *Broker) handleEndTxn(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.EndTxnRequest)
	return func() kmsg.Response {
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ProducerID, resp.ProducerEpoch = r.ProducerID, r.ProducerEpoch
		if err := b.txn.EndTxn(ctx, r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Commit); err != nil {
			e := txnError(err, r.Version >= 2)
			resp.ErrorCode = e.Code
			c.log.Info("EndTxn refused", "transactional_id", r.TransactionalID, "commit", r.Commit, "error", e.Message, "err", err)
		}
		return resp
	}
}
