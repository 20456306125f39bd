package broker

// AddOffsetsToTxn. Adds the group to the transaction; the
// client then sends TxnOffsetCommit to the group's coordinator.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.AddOffsetsToTxn, 0, 4, (*Broker).handleAddOffsetsToTxn) }

func (b *Broker) handleAddOffsetsToTxn(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.AddOffsetsToTxnRequest)
	return func() kmsg.Response {
		resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		if r.Group == "" {
			resp.ErrorCode = kerr.InvalidGroupID.Code
			return resp
		}
		if err := b.txn.AddOffsets(ctx, r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Group); err != nil {
			resp.ErrorCode = txnError(err, r.Version >= 2).Code
		}
		return resp
	}
}
