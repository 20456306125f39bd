package storage

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// AbortedTxn is the offset range of one aborted transaction of a producer
// in this partition: FirstOffset is its first batch, LastOffset its abort
// marker. read_committed consumers drop that producer's records in between.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
	LastOffset  int64
}

// lastStableLocked is the last stable offset: the first offset of the
// oldest open transaction, or the high watermark. Runs under mu (read).
func (l *Log) lastStableLocked() int64 {
	lso := l.hw.Load()
	for _, st := range l.producers {
		if st.txn != nil && st.txn.firstOffset < lso {
			lso = st.txn.firstOffset
		}
	}
	return lso
}

// LastStableOffset is the offset up to which every transaction is decided.
func (l *Log) LastStableOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.lastStableLocked()
}

// AbortedTxns lists the aborted transactions that overlap [from, to).
func (l *Log) AbortedTxns(from, to int64) []AbortedTxn {
	l.mu.RLock()
	defer l.mu.RUnlock()
	i := sort.Search(len(l.aborted), func(i int) bool { return l.aborted[i].LastOffset >= from })
	var out []AbortedTxn
	for ; i < len(l.aborted); i++ {
		if a := l.aborted[i]; a.FirstOffset < to {
			out = append(out, a)
		}
	}
	return out
}

// applyMarker ends producer pid's open transaction at a marker stored at
// offset. Runs under mu.
func (l *Log) applyMarker(pid int64, epoch int16, commit bool, offset int64) {
	st := l.producers[pid]
	if st == nil {
		st = &producerState{epoch: epoch}
		l.producers[pid] = st
	}
	if epoch > st.epoch {
		st.epoch, st.batches = epoch, nil
	}
	if st.txn != nil {
		if !commit {
			l.aborted = append(l.aborted, AbortedTxn{ProducerID: pid, FirstOffset: st.txn.firstOffset, LastOffset: offset})
		}
		st.txn = nil
	}
}

// AppendMarker writes a transaction marker (a control batch) for producer
// pid at producer epoch epoch, ending its open transaction in this
// partition: commit makes its records visible to read_committed consumers,
// abort hides them. A marker from an epoch older than the producer's is
// refused (ErrInvalidProducerEpoch): its coordinator was fenced. A marker
// for a producer with no open transaction is still written (Kafka does the
// same; it is harmless). Durability comes from Sync, as for Append.
func (l *Log) AppendMarker(pid int64, epoch int16, commit bool, coordinatorEpoch int32) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return 0, ErrClosed
	case l.fenced.Load():
		return 0, fmt.Errorf("storage: marker to %s: %w", l.dir, ErrFenced)
	case l.broken != nil:
		return 0, l.broken
	}
	if st := l.producers[pid]; st != nil && epoch < st.epoch {
		return 0, fmt.Errorf("storage: marker to %s: %w: producer %d epoch %d, log has %d", l.dir, ErrInvalidProducerEpoch, pid, epoch, st.epoch)
	}
	offset := l.leo.Load()
	now := l.now().UnixMilli()
	b := controlBatch(offset, l.epoch, pid, epoch, commit, coordinatorEpoch, now)
	seg := l.active()
	if seg.size > 0 && seg.size+int64(len(b)) > l.opts.SegmentBytes {
		if err := l.roll(); err != nil {
			return 0, err
		}
		seg = l.active()
	}
	if n, err := seg.log.w().WriteAt(b, seg.size); err != nil {
		if n > 0 {
			if terr := seg.log.w().Truncate(seg.size); terr != nil {
				l.broken = fmt.Errorf("storage: %s unusable after a failed write: %w", l.dir, terr)
			}
		}
		return 0, fmt.Errorf("storage: write %s: %w", seg.log.path, err)
	}
	if n := len(seg.mem); n == 0 || seg.size-seg.mem[n-1].pos >= l.opts.indexInterval {
		seg.mem = append(seg.mem, indexEntry{offset: offset, pos: seg.size, maxTsBefore: seg.maxTs})
	}
	seg.maxTs = max(seg.maxTs, now)
	seg.size += int64(len(b))
	seg.end = offset + 1
	l.applyMarker(pid, epoch, commit, offset)
	l.leo.Store(offset + 1)
	return offset, nil
}

// controlBatch encodes a v2 control batch with one marker record.
func controlBatch(offset int64, leaderEpoch int32, pid int64, epoch int16, commit bool, coordinatorEpoch int32, now int64) []byte {
	be := binary.BigEndian
	typ := int16(0)
	if commit {
		typ = 1
	}
	key := be.AppendUint16(be.AppendUint16(nil, 0), uint16(typ))
	val := be.AppendUint32(be.AppendUint16(nil, 0), uint32(coordinatorEpoch))
	var rec []byte
	rec = append(rec, 0)              // attributes
	rec = binary.AppendVarint(rec, 0) // timestamp delta
	rec = binary.AppendVarint(rec, 0) // offset delta
	rec = binary.AppendVarint(rec, int64(len(key)))
	rec = append(rec, key...)
	rec = binary.AppendVarint(rec, int64(len(val)))
	rec = append(rec, val...)
	rec = binary.AppendVarint(rec, 0) // headers
	records := binary.AppendVarint(nil, int64(len(rec)))
	records = append(records, rec...)

	b := make([]byte, batchHeaderSize, batchHeaderSize+len(records))
	be.PutUint64(b[offBaseOffset:], uint64(offset))
	be.PutUint32(b[offBatchLength:], uint32(batchHeaderSize-logOverhead+len(records)))
	be.PutUint32(b[offLeaderEpoch:], uint32(leaderEpoch))
	b[offMagic] = 2
	be.PutUint16(b[offAttributes:], uint16(attrTransactional|attrControl))
	be.PutUint32(b[offLastOffsetDelta:], 0)
	be.PutUint64(b[offBaseTimestamp:], uint64(now))
	be.PutUint64(b[offMaxTimestamp:], uint64(now))
	be.PutUint64(b[offProducerID:], uint64(pid))
	be.PutUint16(b[offProducerEpoch:], uint16(epoch))
	be.PutUint32(b[offBaseSequence:], 0xffffffff) // -1: markers carry no sequence
	be.PutUint32(b[offRecordCount:], 1)
	b = append(b, records...)
	be.PutUint32(b[offCRC:], batchCRC(b))
	return b
}

// controlType reads the marker type of the control batch at pos.
func (s *segment) controlType(pos int64, h *batchHeader) (commit bool, err error) {
	b := make([]byte, h.size())
	if err := s.readAt(b, pos); err != nil {
		return false, fmt.Errorf("storage: read marker at %d: %w", h.BaseOffset, err)
	}
	key, ok := firstRecordKey(b[batchHeaderSize:])
	if !ok || len(key) < 4 {
		return false, fmt.Errorf("%w: control batch at %d has no marker key", ErrCorrupt, h.BaseOffset)
	}
	return binary.BigEndian.Uint16(key[2:]) == 1, nil
}

// firstRecordKey returns the key of the first record of an uncompressed batch body.
func firstRecordKey(b []byte) ([]byte, bool) {
	_, n := binary.Varint(b) // record length
	if n <= 0 || len(b) < n+1 {
		return nil, false
	}
	b = b[n+1:]   // and the attributes byte
	for range 2 { // timestamp delta, offset delta
		_, n = binary.Varint(b)
		if n <= 0 {
			return nil, false
		}
		b = b[n:]
	}
	kl, n := binary.Varint(b)
	if n <= 0 || kl < 0 || int64(len(b)-n) < kl {
		return nil, false
	}
	return b[n : n+int(kl)], true
}
