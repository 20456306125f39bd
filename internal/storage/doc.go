// Package storage owns the files of one partition's log: the directory
// <data>/<topic>/<partition>/ and nothing outside it. It stores Kafka record
// batches (magic v2) exactly as producers sent them, apart from the fields the
// log assigns (base offset, partition leader epoch, and, for LogAppendTime
// topics, the max timestamp), and serves them back for Fetch.
//
// It imports the standard library and internal/fsutil only. Kafka error
// codes are not known here: callers map the sentinel errors (ErrCorrupt,
// ErrFenced, ...) at the protocol edge. Source files: log.go (the Log, Open,
// Close), recovery.go (opening segments, torn-tail recovery, producer
// state), append.go (Append in its three phases, roll, Sync and the fence),
// read.go (Read, timestamps), retention.go, segment.go, filepool.go (the
// bounded pool of segment files), batch.go, producer.go, txn.go, files.go
// (the metadata file formats).
//
// # Files in a partition directory
//
// All integers are big-endian. Every small metadata file is written with the
// durable pattern: unique temp file, fsync, rename into place, fsync the
// directory. Each of them is framed as
//
//	magic [4]byte | body | crc32c(magic|body) uint32
//
// and a file whose frame does not check is reported as ErrCorrupt.
//
//   - <base>.log (base = 20-digit zero-padded first offset): record batches
//     back to back, each exactly as on the wire (61-byte v2 header + records).
//     Offsets are contiguous: each batch's base offset is the previous batch's
//     last offset + 1, and the first batch's is <base>.
//   - <base>.index: the sparse offset index of a closed segment, 24-byte
//     entries with no header: offset int64 (base offset of a batch),
//     position int64 (byte position of that batch in the .log), maxTsBefore
//     int64 (largest batch maxTimestamp of all batches before it in the
//     segment, math.MinInt64 for none). The first batch is always indexed
//     (entry {base, 0, MinInt64}); after it, a batch is indexed when it starts
//     at least IndexInterval bytes (4 KiB) after the previous entry. Offsets
//     and positions strictly increase and maxTsBefore never decreases, which
//     makes both offset and timestamp lookups a binary search. The active
//     segment's index lives in memory and is written on roll, seal and Close;
//     recovery rebuilds any index that is missing or inconsistent.
//   - <base>.seal, magic "KSL1": length int64, endOffset int64, epoch int32.
//     Written by a new leader at takeover: readers and recovery use only the
//     first length bytes of <base>.log (whose batches end at endOffset).
//   - leader-epoch, magic "KLE1": epoch int32, n uint32, then n entries
//     {epoch int32, startOffset int64}: the newest leader epoch and the epoch
//     history (the first offset each leader wrote). A batch at offset o must
//     carry a partitionLeaderEpoch >= the epoch of the last history entry
//     with startOffset <= o; recovery treats a batch that does not as a
//     deposed leader's write and drops it.
//   - log-start-offset, magic "KLS1": offset int64.
//   - producer-state, magic "KPS2": a snapshot of the idempotent producer
//     table written at Close: coverEnd int64 (log end offset it covers),
//     lastBase int64 and lastCRC uint32 (the last batch below coverEnd, to
//     detect a log that was rewritten since), n uint32, then per producer:
//     producerId int64, epoch int16, count uint8, count x {firstSeq int32,
//     lastSeq int32, firstOffset int64, lastOffset int64}, open uint8 (1: an
//     open transaction follows as firstOffset int64); then m uint32 and m x
//     {producerId, firstOffset, lastOffset int64}, the aborted transactions
//     still in the log. Open trusts it only if that last batch is still in
//     the log; batches after coverEnd are replayed from their headers
//     (control batches by reading their one record's key).
//   - owner: the incarnation the directory belongs to (Options.Owner, the
//     topic id) and a newline, plain text, written durably at the first Open.
//     A directory owned by another incarnation (a deleted topic's log that a
//     crash left behind) is refused with ErrOtherOwner.
//   - Transaction markers are control batches (attributes transactional |
//     control) with one record: key = version int16 (0) + type int16 (0
//     abort, 1 commit), value = version int16 (0) + coordinator epoch int32,
//     as Kafka writes them.
//
// # Open files
//
// A Log holds one descriptor of its own: its active segment's .log, open for
// writing while the segment is active. Every closed segment's .log and
// .index are opened read-only on demand through a FilePool (Options.Files;
// by default one pool of DefaultMaxOpenFiles shared by every Log of the
// process) that keeps the most recently used ones open and closes the least
// recently used beyond its bound; a read that finds its file closed reopens
// it. A file evicted while a read is using it is closed when that read ends.
// So the descriptors of a process are bounded by the pool size plus one per
// open Log, whatever the number of segments. A file reopened must be the one
// the Log first opened (same inode): one replaced or removed meanwhile (by a
// newer leader's retention, or the topic deleted and created again) fails
// the read with ErrFenced.
//
// docs/storage.md explains the takeover ordering that makes the fence safe.
package storage
