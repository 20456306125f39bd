package broker

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kaas-dev/kaas/internal/txn"
)

// txnError maps transaction coordinator errors to Kafka codes. fencedCode
// is what this API version says for a fenced producer: PRODUCER_FENCED
// where the version knows it (KIP-588), INVALID_PRODUCER_EPOCH before.
func txnError(err error, fencedKnown bool) *kerr.Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, txn.ErrNotCoordinator):
		return kerr.NotCoordinator
	case errors.Is(err, txn.ErrNotAvailable):
		return kerr.CoordinatorNotAvailable
	case errors.Is(err, txn.ErrConcurrent):
		return kerr.ConcurrentTransactions
	case errors.Is(err, txn.ErrProducerFenced):
		if fencedKnown {
			return kerr.ProducerFenced
		}
		return kerr.InvalidProducerEpoch
	case errors.Is(err, txn.ErrInvalidMapping):
		return kerr.InvalidProducerIDMapping
	case errors.Is(err, txn.ErrInvalidState):
		return kerr.InvalidTxnState
	case errors.Is(err, txn.ErrInvalidTimeout):
		return kerr.InvalidTransactionTimeout
	case errors.Is(err, txn.ErrUnknownTransactionalID):
		return kerr.TransactionalIDNotFound
	}
	return kerr.UnknownServerError
}
