package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func (l *Log) open() error {
	removeStaleTemps(l.dir, l.now())
	ef, exists, err := readEpochFile(l.dir)
	if err != nil {
		return err
	}
	if exists && ef.Epoch > l.epoch {
		return fmt.Errorf("storage: open %s with epoch %d: %w (epoch %d on disk)", l.dir, l.epoch, ErrFenced, ef.Epoch)
	}
	l.history = ef.History
	n := len(ef.History)
	takeover := !exists || ef.Epoch < l.epoch || n == 0 || ef.History[n-1].Epoch != l.epoch
	if takeover {
		// Publish the epoch before looking at the segments: see the ordering
		// argument in docs/storage.md.
		if err := writeFileAtomic(l.dir, epochFileName, encodeEpochFile(epochFile{Epoch: l.epoch, History: ef.History})); err != nil {
			return err
		}
	}
	if err := l.checkFence(); err != nil {
		return err
	}

	lso, err := readLSO(l.dir)
	if err != nil {
		return err
	}
	if err := l.loadSegments(lso, takeover); err != nil {
		return err
	}
	active := l.active()
	lso = max(lso, l.segs[0].base)
	l.lso.Store(min(lso, active.end))
	l.leo.Store(active.end)

	if err := l.loadProducers(); err != nil {
		return err
	}
	// Whatever the recovery kept is made durable before it is readable.
	if err := active.log.w().Sync(); err != nil {
		return fmt.Errorf("storage: fsync %s: %w", active.log.path, err)
	}
	active.syncedSize, active.syncedEnd = active.size, active.end
	l.hw.Store(active.end)

	if takeover {
		h := append(append([]epochEntry(nil), l.history...), epochEntry{Epoch: l.epoch, StartOffset: active.base})
		if err := writeFileAtomic(l.dir, epochFileName, encodeEpochFile(epochFile{Epoch: l.epoch, History: h})); err != nil {
			return err
		}
		l.history = h
		if err := l.checkFence(); err != nil {
			return err
		}
	}
	return nil
}

// minEpoch is the lowest partitionLeaderEpoch a batch at offset may carry.
func (l *Log) minEpoch(offset int64) int32 {
	e := int32(math.MinInt32)
	for _, h := range l.history {
		if h.StartOffset <= offset {
			e = h.Epoch
		}
	}
	return e
}

// loadSegments recovers the segment files into l.segs and leaves an active
// segment at the end.
func (l *Log) loadSegments(lso int64, takeover bool) error {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("storage: list %s: %w", l.dir, err)
	}
	var bases []int64
	for _, e := range entries {
		if b, ok := parseSegmentName(e.Name(), logSuffix); ok {
			bases = append(bases, b)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	// Segments wholly below the log start offset are left from a retention
	// pass that crashed before deleting them.
	for len(bases) > 1 && bases[1] <= lso {
		l.removeSegmentFiles(bases[0])
		bases = bases[1:]
	}

	var fullyScanned *segment
	for _, base := range bases {
		if len(l.segs) > 0 && base != l.active().end {
			l.strayFile(segmentName(base, logSuffix), fmt.Sprintf("does not continue the log at offset %d", l.active().end))
			continue
		}
		seg, scanned, err := l.openSegment(base)
		if err != nil {
			return err
		}
		l.segs = append(l.segs, seg)
		if scanned {
			fullyScanned = seg
		}
	}

	if len(l.segs) == 0 {
		return l.newActive(lso)
	}

	// The last segment may have a torn tail (crash) or be the active segment
	// of a live, deposed leader: scan all of it. Unless sealed, it is opened
	// for writing: it stays active, or this leader fsyncs it before sealing.
	last := l.active()
	if !last.sealed {
		if err := l.pin(last); err != nil {
			return err
		}
	}
	if takeover && !last.sealed {
		if err := last.log.w().Sync(); err != nil {
			return fmt.Errorf("storage: fsync %s: %w", last.log.path, err)
		}
	}
	if last != fullyScanned || takeover {
		if err := l.rescan(last); err != nil {
			return err
		}
	}
	fileSize, err := last.fileSize()
	if err != nil {
		return err
	}

	switch {
	case last.sealed:
		if err := l.closeSegment(last); err != nil {
			return err
		}
		return l.newActive(last.end)
	case takeover:
		if fileSize > last.size {
			l.logger.Warn("storage: sealing the previous leader's segment before a torn or foreign tail",
				"segment", last.base, "offset", last.end, "bytes", fileSize-last.size)
		}
		if last.size == 0 {
			// A seal of length 0 would collide with the new segment's name.
			last.retire()
			l.segs = l.segs[:len(l.segs)-1]
			l.strayFile(segmentName(last.base, logSuffix), "empty segment of a previous leader")
			return l.newActive(last.base)
		}
		seal := sealRecord{Length: last.size, EndOffset: last.end, Epoch: l.epoch}
		if err := writeFileAtomic(l.dir, segmentName(last.base, sealSuffix), encodeSeal(seal)); err != nil {
			return err
		}
		last.sealed = true
		if err := l.closeSegment(last); err != nil {
			return err
		}
		return l.newActive(last.end)
	default:
		if fileSize > last.size {
			l.logger.Warn("storage: truncating torn tail", "segment", last.base, "offset", last.end, "bytes", fileSize-last.size)
			if err := last.log.w().Truncate(last.size); err != nil {
				return fmt.Errorf("storage: truncate %s: %w", last.log.path, err)
			}
		}
		// It stays active: its index lives in memory; drop a stale file.
		os.Remove(filepath.Join(l.dir, segmentName(last.base, indexSuffix)))
		return nil
	}
}

// openSegment opens <base>.log as a closed segment (its file in the pool),
// applies its seal and recovers its summary, from the index when it checks
// out, else by a full scan (scanned=true).
func (l *Log) openSegment(base int64) (seg *segment, scanned bool, err error) {
	s := &segment{base: base, log: l.opts.Files.file(filepath.Join(l.dir, segmentName(base, logSuffix))), maxTs: math.MinInt64, firstTs: math.MinInt64}
	defer func() {
		if err != nil {
			s.retire()
		}
	}()
	f, err := s.log.acquire()
	if err != nil {
		return nil, false, err
	}
	defer s.log.release()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("storage: stat %s: %w", s.log.path, err)
	}
	s.size = fi.Size()
	seal, ok, err := readSeal(l.dir, base)
	if err != nil {
		return nil, false, err
	}
	if ok {
		s.sealed = true
		if seal.Length > s.size {
			l.logger.Error("storage: sealed segment is shorter than its seal", "segment", base, "seal", seal.Length, "bytes", s.size)
		}
		s.size = min(s.size, seal.Length)
	}
	entries, ierr := readIndexFile(filepath.Join(l.dir, segmentName(base, indexSuffix)))
	if ierr == nil {
		if end, maxTs, ok := walkIndexed(f, base, s.size, entries, l.minEpoch); ok {
			s.end, s.maxTs, s.mem = end, maxTs, entries
			return s, false, nil
		}
	}
	if err := l.rescan(s); err != nil {
		return nil, false, err
	}
	return s, true, nil
}

// pin reopens a segment's .log for writing and holds it open: the segment
// becomes (or may become) the active one.
func (l *Log) pin(seg *segment) error {
	if seg.log.isPinned() {
		return nil
	}
	path := seg.log.path
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("storage: open %s: %w", path, err)
	}
	seg.log.retire()
	seg.log = l.opts.Files.pinned(path, f)
	return nil
}

// fileSize is the current size of the segment's .log on disk.
func (s *segment) fileSize() (int64, error) {
	f, err := s.log.acquire()
	if err != nil {
		return 0, err
	}
	defer s.log.release()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("storage: stat %s: %w", s.log.path, err)
	}
	return fi.Size(), nil
}

// rescan fully scans seg up to its size (or file size if larger and not
// sealed), setting size, end, maxTs and the in-memory index.
func (l *Log) rescan(seg *segment) error {
	f, err := seg.log.acquire()
	if err != nil {
		return err
	}
	defer seg.log.release()
	limit := seg.size
	if !seg.sealed {
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("storage: stat %s: %w", seg.log.path, err)
		}
		limit = fi.Size()
	}
	res, err := scanSegment(f, seg.base, limit, l.opts.indexInterval, l.minEpoch)
	if err != nil {
		return err
	}
	if res.stop != "" {
		l.logger.Warn("storage: dropping invalid tail", "segment", seg.base, "offset", res.end,
			"bytes", limit-res.valid, "reason", res.stop)
	}
	seg.size, seg.end, seg.maxTs, seg.mem = res.valid, res.end, res.maxTs, res.entries
	if seg.idx != nil {
		seg.idx.retire()
	}
	seg.idx, seg.nIdx = nil, 0
	return nil
}

// strayFile moves a file that is not part of the log aside (never deletes it).
func (l *Log) strayFile(name, why string) {
	to := fmt.Sprintf("%s%s%d", name, strayMarker, l.now().UnixNano())
	l.logger.Warn("storage: moving stray file aside", "file", name, "to", to, "reason", why)
	if err := os.Rename(filepath.Join(l.dir, name), filepath.Join(l.dir, to)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.logger.Error("storage: move stray file", "file", name, "err", err)
	}
	if strings.HasSuffix(name, logSuffix) {
		base, _ := parseSegmentName(name, logSuffix)
		os.Remove(filepath.Join(l.dir, segmentName(base, indexSuffix)))
		os.Remove(filepath.Join(l.dir, segmentName(base, sealSuffix)))
	}
}

func (l *Log) removeSegmentFiles(base int64) {
	for _, suf := range []string{logSuffix, indexSuffix, sealSuffix} {
		if err := os.Remove(filepath.Join(l.dir, segmentName(base, suf))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.logger.Error("storage: remove segment file", "segment", base, "err", err)
		}
	}
}

// loadProducers rebuilds the idempotent producer table: from the snapshot
// when it matches the log, then from the batch headers after it.
func (l *Log) loadProducers() error {
	from := l.lso.Load()
	leo := l.leo.Load()
	raw, err := os.ReadFile(filepath.Join(l.dir, snapshotFileName))
	if err == nil {
		snap, derr := decodeSnapshot(raw)
		switch {
		case derr != nil:
			l.logger.Warn("storage: ignoring producer snapshot", "err", derr)
		case snap.coverEnd > leo || snap.coverEnd < from:
			l.logger.Info("storage: producer snapshot does not match the log", "covers", snap.coverEnd, "offset", leo)
		case snap.lastBase >= 0 && !l.batchMatches(snap.lastBase, snap.coverEnd, snap.lastCRC):
			l.logger.Info("storage: producer snapshot is for a different log history", "covers", snap.coverEnd)
		default:
			l.producers, l.aborted, from = snap.producers, snap.aborted, snap.coverEnd
		}
	}
	return l.eachHeader(from, func(seg *segment, pos int64, h *batchHeader) error {
		if h.ProducerID < 0 {
			return nil
		}
		if h.Attributes&attrControl != 0 {
			commit, err := seg.controlType(pos, h)
			if err != nil {
				return err
			}
			l.applyMarker(h.ProducerID, h.ProducerEpoch, commit, h.BaseOffset)
			return nil
		}
		l.producers[h.ProducerID] = applyProducer(l.producers[h.ProducerID], h)
		return nil
	})
}

// batchMatches reports whether the log holds a batch at base ending at end-1 with crc.
func (l *Log) batchMatches(base, end int64, crc uint32) bool {
	if base < l.lso.Load() || end > l.leo.Load() {
		return false
	}
	seg := l.segmentFor(base)
	_, h, err := seg.findOffset(base)
	return err == nil && h.BaseOffset == base && h.lastOffset() == end-1 && h.CRC == crc
}

// eachHeader calls fn for every batch header from the batch holding from to
// the end, with the segment and position of the batch.
func (l *Log) eachHeader(from int64, fn func(*segment, int64, *batchHeader) error) error {
	if from >= l.leo.Load() {
		return nil
	}
	for i := max(sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > from })-1, 0); i < len(l.segs); i++ {
		seg := l.segs[i]
		if seg.end <= from {
			continue
		}
		pos := int64(0)
		if from > seg.base {
			p, _, err := seg.findOffset(from)
			if err != nil {
				return err
			}
			pos = p
		}
		for pos < seg.size {
			h, err := seg.readHeader(pos)
			if err != nil {
				return err
			}
			if h.lastOffset() >= from {
				if err := fn(seg, pos, &h); err != nil {
					return err
				}
			}
			pos += h.size()
		}
	}
	return nil
}
