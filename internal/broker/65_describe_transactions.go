package broker

// DescribeTransactions: (answered for the ids this broker
// coordinates; NOT_COORDINATOR for others).

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.DescribeTransactions, 0, 0, (*Broker).handleDescribeTransactions) }

func (b *Broker) handleDescribeTransactions(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.DescribeTransactionsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	recs, errs := b.txn.Describe(r.TransactionalIDs)
	for _, id := range r.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		st.ProducerID, st.ProducerEpoch, st.StartTimestamp = -1, -1, -1
		if err := errs[id]; err != nil {
			st.ErrorCode = txnError(err, true).Code
		} else if rec := recs[id]; rec != nil {
			st.State, st.TimeoutMillis = string(rec.State), rec.TimeoutMs
			st.ProducerID, st.ProducerEpoch = rec.ProducerID, rec.ProducerEpoch
			if rec.State == "Ongoing" {
				st.StartTimestamp = rec.StartedAt.UnixMilli()
			}
			for _, tp := range rec.Partitions {
				if n := len(st.Topics); n == 0 || st.Topics[n-1].Topic != tp.Topic {
					t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
					t.Topic = tp.Topic
					st.Topics = append(st.Topics, t)
				}
				t := &st.Topics[len(st.Topics)-1]
				t.Partitions = append(t.Partitions, tp.Partition)
			}
			// Each group whose offsets it added, as the __consumer_offsets
			// partition Kafka would keep them in.
			var offs []int32
			for _, g := range rec.Groups {
				offs = append(offs, offsetsPartition(g))
			}
			if len(offs) > 0 {
				slices.Sort(offs)
				t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				t.Topic, t.Partitions = internalNames[0], slices.Compact(offs)
				st.Topics = append(st.Topics, t)
			}
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return now(resp)
}
