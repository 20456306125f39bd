package storage

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
)

// segmentFor returns the segment that holds offset (the last with base <= offset).
func (l *Log) segmentFor(offset int64) *segment {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset }) - 1
	return l.segs[max(i, 0)]
}

// Wait returns a channel that is closed the next time HighWatermark advances
// (or the log closes).
func (l *Log) Wait() <-chan struct{} {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.hwCh
}

// Read returns whole stored batches starting with the batch that contains
// offset, up to maxBytes and never past the high watermark. If the first
// batch alone exceeds maxBytes it is returned whole when minOne is true.
// Offsets outside [LogStartOffset, HighWatermark] fail with
// ErrOffsetOutOfRange; offset == HighWatermark returns nothing.
func (l *Log) Read(offset int64, maxBytes int, minOne bool) ([]byte, error) {
	return l.read(offset, maxBytes, minOne, false)
}

// ReadCommitted is Read for read_committed consumers: it stops at the last
// stable offset (the first offset of the oldest open transaction).
func (l *Log) ReadCommitted(offset int64, maxBytes int, minOne bool) ([]byte, error) {
	return l.read(offset, maxBytes, minOne, true)
}

func (l *Log) read(offset int64, maxBytes int, minOne, committed bool) ([]byte, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	hw, lso := l.hw.Load(), l.lso.Load()
	if offset < lso || offset > hw {
		return nil, fmt.Errorf("storage: read %s at %d: %w [%d, %d]", l.dir, offset, ErrOffsetOutOfRange, lso, hw)
	}
	if committed {
		hw = l.lastStableLocked()
	}
	if offset >= hw {
		return nil, nil
	}
	seg := l.segmentFor(offset)
	pos, first, err := seg.findOffset(offset)
	if err != nil {
		return nil, err
	}
	n := min(int64(max(maxBytes, 0)), seg.size-pos)
	if n < first.size() {
		if !minOne {
			return nil, nil
		}
		n = first.size()
	}
	buf := make([]byte, n)
	if err := seg.readAt(buf, pos); err != nil {
		return nil, fmt.Errorf("storage: read %s: %w", seg.log.path, err)
	}
	cut := int64(0)
	for cut+logOverhead <= n {
		base := int64(binary.BigEndian.Uint64(buf[cut:]))
		size := logOverhead + int64(int32(binary.BigEndian.Uint32(buf[cut+offBatchLength:])))
		if base >= hw || cut+size > n {
			break
		}
		cut += size
	}
	return buf[:cut], nil
}

// OffsetForTimestamp finds the first record, below the high watermark, whose
// timestamp is >= ts: its offset, timestamp and the leader epoch of its
// batch. Uncompressed CreateTime batches are searched record by record;
// otherwise the answer is the first batch whose maxTimestamp >= ts (its base
// offset and maxTimestamp).
func (l *Log) OffsetForTimestamp(ts int64) (offset int64, timestamp int64, leaderEpoch int32, found bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, 0, 0, false
	}
	hw := l.hw.Load()
	for _, seg := range l.segs {
		if seg.base >= hw {
			break
		}
		if seg.maxTs < ts {
			continue
		}
		pos, h, ok, err := seg.findTime(ts, hw)
		if err != nil {
			l.logger.Error("storage: timestamp lookup", "segment", seg.base, "err", err)
			return 0, 0, 0, false
		}
		if !ok {
			return 0, 0, 0, false
		}
		off, t := l.refine(seg, pos, &h, func(t int64) bool { return t >= ts })
		return off, t, h.LeaderEpoch, true
	}
	return 0, 0, 0, false
}

// refine finds the first record of the batch at pos whose timestamp matches
// want; compressed and LogAppendTime batches answer at batch level.
func (l *Log) refine(seg *segment, pos int64, h *batchHeader, want func(int64) bool) (int64, int64) {
	if h.codec() != 0 || h.logAppendTime() {
		return h.BaseOffset, h.MaxTimestamp
	}
	b := make([]byte, h.size())
	if seg.readAt(b, pos) != nil {
		return h.BaseOffset, h.MaxTimestamp
	}
	off, t := h.BaseOffset, h.MaxTimestamp
	eachRecord(b[batchHeaderSize:], h.RecordCount, func(tsDelta, offDelta int64) bool {
		if rt := h.BaseTimestamp + tsDelta; want(rt) {
			off, t = h.BaseOffset+offDelta, rt
			return false
		}
		return true
	})
	return off, t
}

// MaxTimestamp returns the offset and timestamp of the first record with the
// largest timestamp below the high watermark (ListOffsets -3).
func (l *Log) MaxTimestamp() (offset int64, timestamp int64, found bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return 0, 0, false
	}
	hw := l.hw.Load()
	best, bestTs := (*segment)(nil), int64(math.MinInt64)
	for _, seg := range l.segs {
		if seg.base >= hw || seg.end == seg.base {
			continue
		}
		segMax := seg.maxTs
		if seg.end > hw {
			// Holds appends that are not durable yet: walk its durable part.
			segMax = math.MinInt64
			for pos := int64(0); pos < seg.size; {
				h, err := seg.readHeader(pos)
				if err != nil || h.BaseOffset >= hw {
					break
				}
				segMax = max(segMax, h.MaxTimestamp)
				pos += h.size()
			}
		}
		if best == nil || segMax > bestTs {
			best, bestTs = seg, segMax
		}
	}
	if best == nil {
		return 0, 0, false
	}
	pos, h, ok, err := best.findTime(bestTs, hw)
	if err != nil || !ok {
		return 0, 0, false
	}
	off, t := l.refine(best, pos, &h, func(t int64) bool { return t == bestTs })
	return off, t, true
}
