package broker

import (
	"errors"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/storage"
	"github.com/kaas-dev/kaas/internal/txn"
)

// errorCodes is the one table from internal errors to Kafka error codes,
// checked in order with errors.Is. Internal packages return their sentinel
// errors (with context wrapped around them); only the broker speaks Kafka
// codes.
var errorCodes = []struct {
	err  error
	code *kerr.Error
}{
	// Partitions and logs.
	{errUnknownTopic, kerr.UnknownTopicOrPartition},
	{errNotLeader, kerr.NotLeaderForPartition},
	{storage.ErrFenced, kerr.NotLeaderForPartition},
	{storage.ErrClosed, kerr.NotLeaderForPartition},
	{errNoLeader, kerr.LeaderNotAvailable},
	{storage.ErrCorrupt, kerr.CorruptMessage},
	{storage.ErrInvalidRecord, kerr.InvalidRecord},
	{storage.ErrTooLarge, kerr.MessageTooLarge},
	{storage.ErrOutOfOrderSequence, kerr.OutOfOrderSequenceNumber},
	{storage.ErrInvalidProducerEpoch, kerr.InvalidProducerEpoch},
	{storage.ErrUnsupportedMagic, kerr.UnsupportedForMessageFormat},
	{storage.ErrOffsetOutOfRange, kerr.OffsetOutOfRange},

	// Groups and committed offsets.
	{coord.ErrNotCoordinator, kerr.NotCoordinator},
	{coord.ErrNotAvailable, kerr.CoordinatorNotAvailable},
	{coord.ErrLoadInProgress, kerr.CoordinatorLoadInProgress},
	{coord.ErrInvalidGroupID, kerr.InvalidGroupID},
	{coord.ErrGroupNotFound, kerr.GroupIDNotFound},
	{coord.ErrNotConsumerGroup, kerr.GroupIDNotFound},
	{coord.ErrNotClassicGroup, kerr.GroupIDNotFound},
	{coord.ErrNonEmptyGroup, kerr.NonEmptyGroup},
	{coord.ErrIllegalGeneration, kerr.IllegalGeneration},
	{coord.ErrSubscribedToTopic, kerr.GroupSubscribedToTopic},
	// The offsets file could not be read or written: retriable for the
	// client, and never reported as success.
	{coord.ErrCoordinatorLoadError, kerr.CoordinatorNotAvailable},

	// Transactions.
	{txn.ErrNotCoordinator, kerr.NotCoordinator},
	{txn.ErrNotAvailable, kerr.CoordinatorNotAvailable},
	{txn.ErrConcurrent, kerr.ConcurrentTransactions},
	{txn.ErrProducerFenced, kerr.ProducerFenced},
	{txn.ErrInvalidMapping, kerr.InvalidProducerIDMapping},
	{txn.ErrInvalidState, kerr.InvalidTxnState},
	{txn.ErrInvalidTimeout, kerr.InvalidTransactionTimeout},
	{txn.ErrUnknownTransactionalID, kerr.TransactionalIDNotFound},
}

// kafkaError maps err to its Kafka error through the one table; a group
// state machine's code is used as it is; otherwise is the answer for an
// error the table does not know.
func kafkaError(err error, otherwise *kerr.Error) *kerr.Error {
	if err == nil {
		return nil
	}
	var code coord.CodeError
	if errors.As(err, &code) {
		return kerr.ErrorForCode(int16(code)).(*kerr.Error)
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return otherwise
}

// storageError is kafkaError for produce, fetch and log paths: an unknown
// storage failure is KAFKA_STORAGE_ERROR.
func storageError(err error) *kerr.Error { return kafkaError(err, kerr.KafkaStorageError) }

// coordError is kafkaError for group paths.
func coordError(err error) *kerr.Error { return kafkaError(err, kerr.UnknownServerError) }

// txnError is kafkaError for transaction paths. fencedKnown: the API version
// knows PRODUCER_FENCED (KIP-588); before it a fenced producer is told
// INVALID_PRODUCER_EPOCH.
func txnError(err error, fencedKnown bool) *kerr.Error {
	e := kafkaError(err, kerr.UnknownServerError)
	if e == kerr.ProducerFenced && !fencedKnown {
		return kerr.InvalidProducerEpoch
	}
	return e
}

// clientMessage is the error message a client is sent with e: the internal
// error's text when it explains a refusal (a record too large, a bad
// sequence), but only Kafka's own description for a failure of the broker
// (storage, unknown), whose text would show the client file paths and other
// details of the volume. The full error goes to the broker's log.
func clientMessage(e *kerr.Error, err error) string {
	if err == nil || e == kerr.KafkaStorageError || e == kerr.UnknownServerError || e == kerr.CoordinatorNotAvailable {
		return e.Description
	}
	return err.Error()
}

// volumeFailure reports whether err is the volume refusing a write: full
// (ENOSPC, EDQUOT), read-only (EROFS) or failing (EIO).
func volumeFailure(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EIO)
}
