package broker

// ListTransactions: (v1 filters by duration), for the ids this
// broker coordinates; admin clients union the brokers' answers.

import (
	"context"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.ListTransactions, 0, 1, (*Broker).handleListTransactions) }

func (b *Broker) handleListTransactions(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.ListTransactionsRequest)
	resp := r.ResponseKind().(*kmsg.ListTransactionsResponse)
	nowMs := b.now().UnixMilli()
	for _, rec := range b.txn.List() {
		if len(r.StateFilters) > 0 && !slices.ContainsFunc(r.StateFilters, func(s string) bool { return strings.EqualFold(s, string(rec.State)) }) {
			continue
		}
		if len(r.ProducerIDFilters) > 0 && !slices.Contains(r.ProducerIDFilters, rec.ProducerID) {
			continue
		}
		if r.Version >= 1 && r.DurationFilterMillis >= 0 && !(rec.State == "Ongoing" && nowMs-rec.StartedAt.UnixMilli() >= r.DurationFilterMillis) {
			continue
		}
		st := kmsg.NewListTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.TransactionState = rec.TransactionalID, rec.ProducerID, string(rec.State)
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return now(resp)
}
