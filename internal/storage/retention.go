package storage

import (
	"math"
	"sort"
)

// SetOptions applies changed topic config: segment size, retention and max
// message size. LeaderEpoch, Logger and Now are fixed at Open and ignored.
func (l *Log) SetOptions(o Options) {
	o = o.withDefaults()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opts.SegmentBytes = o.SegmentBytes
	l.opts.SegmentMs = o.SegmentMs
	l.opts.RetentionMs = o.RetentionMs
	l.opts.RetentionBytes = o.RetentionBytes
	l.opts.MaxMessageBytes = o.MaxMessageBytes
}

// EnforceRetention deletes whole segments, oldest first, that are past
// retention time (by the segment's max timestamp) or size. It never deletes
// one holding data above the high watermark. When every segment is past
// retention time, the active one included (a quiet topic, which never fills
// a segment), it rolls a new empty active segment first and deletes them
// all, as Kafka does: the log start offset becomes the end offset. It
// persists the new LogStartOffset before deleting anything.
func (l *Log) EnforceRetention() (deleted int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if err := l.checkFence(); err != nil {
		return 0, err
	}
	nowMs := l.now().UnixMilli()
	hw := l.hw.Load()
	var total int64
	for _, s := range l.segs {
		total += s.size
	}
	n := 0
	for ; n < len(l.segs)-1; n++ {
		s := l.segs[n]
		if s.end > hw {
			break
		}
		byTime := l.opts.RetentionMs >= 0 && (s.maxTs == math.MinInt64 || nowMs-s.maxTs > l.opts.RetentionMs)
		bySize := l.opts.RetentionBytes >= 0 && total-s.size >= l.opts.RetentionBytes
		if !byTime && !bySize {
			break
		}
		total -= s.size
	}
	if n == len(l.segs)-1 && l.opts.RetentionMs >= 0 {
		if a := l.active(); a.size > 0 && a.end <= hw && a.maxTs != math.MinInt64 && nowMs-a.maxTs > l.opts.RetentionMs {
			if err := l.roll(); err != nil {
				return 0, err
			}
			n = len(l.segs) - 1
		}
	}
	if n == 0 {
		return 0, nil
	}
	newStart := l.segs[n].base
	if err := writeLSO(l.dir, newStart); err != nil {
		return 0, err
	}
	l.lso.Store(newStart)
	k := sort.Search(len(l.aborted), func(i int) bool { return l.aborted[i].LastOffset >= newStart })
	l.aborted = append([]AbortedTxn(nil), l.aborted[k:]...)
	for _, s := range l.segs[:n] {
		s.retire()
		l.removeSegmentFiles(s.base)
		l.logger.Info("storage: retention deleted segment", "segment", s.base, "end", s.end, "bytes", s.size)
	}
	l.segs = append([]*segment(nil), l.segs[n:]...)
	if err := syncDir(l.dir); err != nil {
		return n, err
	}
	return n, nil
}
