package storage

import "errors"

// Sentinel errors. Functions wrap them with context (fmt.Errorf("...: %w", ErrX));
// test with errors.Is.
var (
	// ErrCorrupt: a batch has a bad length or CRC (CORRUPT_MESSAGE), or a
	// metadata file does not check.
	ErrCorrupt = errors.New("storage: corrupt data")
	// ErrInvalidRecord: a batch is well framed but its content is not
	// acceptable (INVALID_RECORD).
	ErrInvalidRecord = errors.New("storage: invalid record")
	// ErrTooLarge: a batch is larger than MaxMessageBytes (MESSAGE_TOO_LARGE).
	ErrTooLarge = errors.New("storage: batch too large")
	// ErrOffsetOutOfRange: a read outside [LogStartOffset, HighWatermark].
	ErrOffsetOutOfRange = errors.New("storage: offset out of range")
	// ErrFenced: a newer leader took over the partition directory
	// (NOT_LEADER_OR_FOLLOWER). Appends covered by a Sync that fails with it
	// must not be acknowledged.
	ErrFenced = errors.New("storage: fenced by a newer leader epoch")
	// ErrOutOfOrderSequence: an idempotent producer skipped or repeated
	// sequence numbers (OUT_OF_ORDER_SEQUENCE_NUMBER).
	ErrOutOfOrderSequence = errors.New("storage: out of order sequence number")
	// ErrInvalidProducerEpoch: an idempotent producer used an epoch older than
	// the one the log knows (INVALID_PRODUCER_EPOCH).
	ErrInvalidProducerEpoch = errors.New("storage: invalid producer epoch")
	// ErrUnsupportedMagic: a batch is not magic v2 (UNSUPPORTED_FOR_MESSAGE_FORMAT).
	ErrUnsupportedMagic = errors.New("storage: unsupported message format")
	// ErrClosed: the Log was closed.
	ErrClosed = errors.New("storage: log closed")
	// ErrOtherOwner: the directory holds the log of another incarnation
	// (Options.Owner): the caller moves it aside and opens afresh.
	ErrOtherOwner = errors.New("storage: directory belongs to another incarnation")
	// ErrCut: records appended were cut off after a failed fsync (Cuts
	// changed): they are not durable and must not be acknowledged.
	ErrCut = errors.New("storage: records cut off after a failed fsync")
)
