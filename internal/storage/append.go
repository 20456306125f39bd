package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/kaas-dev/kaas/internal/fsutil"
)

// closeSegment turns seg into a closed segment: its log is fsynced and its
// index written durably (if it was in memory); from then on both files are
// the pool's, opened on demand.
func (l *Log) closeSegment(seg *segment) error {
	if seg.idx != nil {
		return nil
	}
	f, err := seg.log.acquire()
	if err != nil {
		return err
	}
	err = f.Sync()
	seg.log.release()
	if err != nil {
		err = fmt.Errorf("storage: fsync %s: %w", seg.log.path, err)
		l.dropUnsyncedLocked(err)
		return err
	}
	name := segmentName(seg.base, indexSuffix)
	if err := writeFileAtomic(l.dir, name, encodeIndex(seg.mem)); err != nil {
		return err
	}
	seg.idx, seg.nIdx, seg.mem = l.opts.Files.file(filepath.Join(l.dir, name)), len(seg.mem), nil
	seg.log.unpin()
	return nil
}

// newActive creates an empty active segment at base. A file already there
// was created after this leader listed the directory, so by a deposed leader:
// it is moved aside.
func (l *Log) newActive(base int64) error {
	path := filepath.Join(l.dir, segmentName(base, logSuffix))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		if ferr := l.checkFence(); ferr != nil {
			return ferr
		}
		l.strayFile(segmentName(base, logSuffix), "segment created by a deposed leader")
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	}
	if err != nil {
		return fmt.Errorf("storage: create %s: %w", path, err)
	}
	os.Remove(filepath.Join(l.dir, segmentName(base, indexSuffix)))
	os.Remove(filepath.Join(l.dir, segmentName(base, sealSuffix)))
	if err := syncDir(l.dir); err != nil {
		f.Close()
		return err
	}
	l.segs = append(l.segs, &segment{base: base, end: base, syncedEnd: base, maxTs: math.MinInt64, firstTs: math.MinInt64, log: l.opts.Files.pinned(path, f)})
	return nil
}

// checkFence reads the epoch file if it changed since the last look and
// fails with ErrFenced (stickily) when it holds a newer epoch. It opens the
// file rather than stat-ing the path so that NFS revalidates (close-to-open).
func (l *Log) checkFence() error {
	if l.fenced.Load() {
		return ErrFenced
	}
	l.fenceMu.Lock()
	defer l.fenceMu.Unlock()
	f, err := os.Open(filepath.Join(l.dir, epochFileName))
	if err != nil {
		return fmt.Errorf("storage: fence check %s: %w", l.dir, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("storage: fence check %s: %w", l.dir, err)
	}
	if l.fenceInfo.Same(fi) {
		return nil
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("storage: fence check %s: %w", l.dir, err)
	}
	ef, err := decodeEpochFile(raw)
	if err != nil {
		return fmt.Errorf("storage: fence check %s: %w", l.dir, err)
	}
	if ef.Epoch > l.epoch {
		l.fenced.Store(true)
		l.logger.Warn("storage: fenced by a newer leader", "newEpoch", ef.Epoch)
		return fmt.Errorf("storage: %s: %w (epoch %d, ours %d)", l.dir, ErrFenced, ef.Epoch, l.epoch)
	}
	l.fenceInfo = fsutil.VersionOf(fi)
	return nil
}

// Append validates and appends the records field of one partition of a
// Produce request (one or more v2 batches), all or nothing. It writes to the
// file (page cache) before returning; durability comes from Sync. Three
// phases under mu: validate (every batch, and the producers' sequences,
// before anything is written), stamp (offsets, leader epoch, append time on
// a copy), write (the segment, its in-memory index, then the new state).
func (l *Log) Append(records []byte, o AppendOptions) (AppendResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return AppendResult{}, ErrClosed
	case l.fenced.Load():
		return AppendResult{}, fmt.Errorf("storage: append to %s: %w", l.dir, ErrFenced)
	case l.broken != nil:
		return AppendResult{}, l.broken
	case l.cutPending != nil:
		if l.dropUnsyncedLocked(l.cutPending); l.cutPending != nil {
			return AppendResult{}, l.cutPending
		}
	}
	switch {
	case len(records) == 0:
		return AppendResult{}, fmt.Errorf("storage: append to %s: %w: no batches", l.dir, ErrInvalidRecord)
	}
	v, err := l.validate(records)
	if err != nil {
		return AppendResult{}, err
	}
	lso := l.lso.Load()
	if len(v.dups) > 0 {
		return AppendResult{BaseOffset: v.dups[0].firstOffset, LastOffset: v.dups[len(v.dups)-1].lastOffset,
			LogAppendTime: -1, LogStartOffset: lso, Duplicate: true}, nil
	}
	appendTime := int64(-1)
	if o.LogAppendTime {
		appendTime = l.now().UnixMilli()
	}
	buf := l.stamp(records, v.headers, appendTime)
	if err := l.write(buf, v); err != nil {
		return AppendResult{}, err
	}
	return AppendResult{BaseOffset: v.headers[0].BaseOffset, LastOffset: v.next - 1,
		LogAppendTime: appendTime, LogStartOffset: lso}, nil
}

// validated is what the validate phase of Append decided.
type validated struct {
	headers []batchHeader
	staged  map[int64]*producerState // producers' state after the append
	dups    []*producerBatch         // the batches, when all are retried duplicates
	next    int64                    // the log end offset after the append
}

// validate checks every batch of an append and decides offsets and
// producers, writing nothing. A request is either all new batches or all
// duplicates of acknowledged ones. Runs under mu.
func (l *Log) validate(records []byte) (validated, error) {
	v := validated{staged: map[int64]*producerState{}, next: l.leo.Load()}
	for rest := records; len(rest) > 0; {
		h, err := validateBatch(rest, l.opts.MaxMessageBytes)
		if err != nil {
			return v, fmt.Errorf("storage: append to %s at batch %d: %w", l.dir, len(v.headers), err)
		}
		rest = rest[h.size():]
		if h.ProducerID >= 0 {
			st, ok := v.staged[h.ProducerID]
			if !ok {
				st = l.producers[h.ProducerID]
			}
			dup, err := checkProducer(st, &h)
			if err != nil {
				return v, fmt.Errorf("storage: append to %s: %w", l.dir, err)
			}
			if dup != nil {
				v.dups = append(v.dups, dup)
				v.headers = append(v.headers, h)
				continue
			}
			h.BaseOffset = v.next
			v.staged[h.ProducerID] = applyProducer(st.clone(), &h)
		}
		h.BaseOffset = v.next
		v.next = h.lastOffset() + 1
		v.headers = append(v.headers, h)
	}
	if len(v.dups) > 0 && len(v.dups) != len(v.headers) {
		return v, fmt.Errorf("storage: append to %s: %w: request mixes duplicate and new batches", l.dir, ErrOutOfOrderSequence)
	}
	return v, nil
}

// stamp returns a copy of records with each batch's base offset and leader
// epoch set, and with the append time when appendTime >= 0 (the CRC then
// recomputed): the caller's buffer is not ours to modify. Runs under mu.
func (l *Log) stamp(records []byte, headers []batchHeader, appendTime int64) []byte {
	buf := append([]byte(nil), records...)
	be := binary.BigEndian
	for i, pos := 0, int64(0); i < len(headers); i++ {
		h := &headers[i]
		b := buf[pos : pos+h.size()]
		be.PutUint64(b[offBaseOffset:], uint64(h.BaseOffset))
		be.PutUint32(b[offLeaderEpoch:], uint32(l.epoch))
		h.LeaderEpoch = l.epoch
		if appendTime >= 0 {
			h.Attributes |= attrLogAppendTime
			h.MaxTimestamp = appendTime
			be.PutUint16(b[offAttributes:], uint16(h.Attributes))
			be.PutUint64(b[offMaxTimestamp:], uint64(appendTime))
			h.CRC = batchCRC(b)
			be.PutUint32(b[offCRC:], h.CRC)
		}
		pos += h.size()
	}
	return buf
}

// write appends buf to the active segment (rolling first when it would
// pass segment.bytes), extends the in-memory index and installs the
// producers' new state and the log end offset. A failed write is truncated
// away; if even that fails the log refuses further appends. Runs under mu.
func (l *Log) write(buf []byte, v validated) error {
	seg := l.active()
	if seg.size > 0 && (seg.size+int64(len(buf)) > l.opts.SegmentBytes || l.rollDue(seg, v)) {
		if err := l.roll(); err != nil {
			return err
		}
		seg = l.active()
	}
	if n, err := seg.log.w().WriteAt(buf, seg.size); err != nil {
		err = fmt.Errorf("storage: write %s: %w", seg.log.path, err)
		if n > 0 {
			if terr := seg.log.w().Truncate(seg.size); terr != nil {
				l.broken = fmt.Errorf("storage: %s unusable after a failed write: %w", l.dir, terr)
			}
		}
		return err
	}
	pos := seg.size
	if pos == 0 && len(v.headers) > 0 {
		seg.firstTs = v.headers[0].MaxTimestamp
	}
	for i := range v.headers {
		h := &v.headers[i]
		if n := len(seg.mem); n == 0 || pos-seg.mem[n-1].pos >= l.opts.indexInterval {
			seg.mem = append(seg.mem, indexEntry{offset: h.BaseOffset, pos: pos, maxTsBefore: seg.maxTs})
		}
		seg.maxTs = max(seg.maxTs, h.MaxTimestamp)
		pos += h.size()
	}
	seg.size, seg.end = pos, v.next
	for pid, st := range v.staged {
		l.producers[pid] = st
	}
	l.leo.Store(v.next)
	return nil
}

// rollDue reports whether the batches of v are segment.ms or more past the
// first batch of seg (Kafka compares the incoming batch's max timestamp
// with the segment's first).
func (l *Log) rollDue(seg *segment, v validated) bool {
	if l.opts.SegmentMs <= 0 || seg.firstTs == math.MinInt64 || len(v.headers) == 0 {
		return false
	}
	return v.headers[len(v.headers)-1].MaxTimestamp-seg.firstTs >= l.opts.SegmentMs
}

// roll closes the active segment (fsync, index written) and starts a new
// one. Runs under mu.
func (l *Log) roll() error {
	if err := l.checkFence(); err != nil {
		return err
	}
	old := l.active()
	if err := l.closeSegment(old); err != nil {
		return err
	}
	return l.newActive(old.end)
}

// Sync makes everything appended so far durable (fsync). Concurrent callers
// are coalesced: one fsync covers every append that happened before it
// started. After the fsync it checks the fence; if a newer leader took over
// it returns ErrFenced and the appends it covered must not be acknowledged.
func (l *Log) Sync() error {
	for {
		target := l.leo.Load()
		l.syncMu.Lock()
		if l.fenced.Load() {
			l.syncMu.Unlock()
			return fmt.Errorf("storage: sync %s: %w", l.dir, ErrFenced)
		}
		if l.hw.Load() >= target {
			l.syncMu.Unlock()
			return nil
		}
		if r := l.round; r != nil {
			l.syncMu.Unlock()
			l.syncWait.Add(1)
			<-r.done
			l.syncWait.Add(-1)
			if r.err != nil {
				return r.err
			}
			if r.covered >= target {
				return nil
			}
			continue
		}
		r := &syncRound{done: make(chan struct{})}
		l.round = r
		l.syncMu.Unlock()

		covered, err := int64(0), l.retryCut() // never fsync over a tail still to cut
		if err == nil {
			covered, err = l.fsyncActive()
		}
		if errors.Is(err, errFsync) {
			l.dropUnsynced(err)
		}
		if err == nil {
			err = l.checkFence()
		}

		l.syncMu.Lock()
		l.round = nil
		if err == nil && covered > l.hw.Load() {
			l.hw.Store(covered)
			close(l.hwCh)
			l.hwCh = make(chan struct{})
		}
		r.covered, r.err = covered, err
		close(r.done)
		l.syncMu.Unlock()
		return err
	}
}

// fsyncActive fsyncs the active segment and returns the log end offset that
// fsync covers. Earlier segments were fsynced when they were rolled.
func (l *Log) fsyncActive() (int64, error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return 0, ErrClosed
	}
	// Held until the fsync ends: a roll or Close meanwhile leaves it open.
	seg := l.active()
	file, covered, size := seg.log, l.leo.Load(), seg.size
	f, err := file.acquire()
	l.mu.RUnlock()
	if err != nil {
		return 0, err
	}
	defer file.release()
	if l.syncHook != nil {
		l.syncHook()
	}
	l.fsyncs.Add(1)
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("storage: %w %s: %w", errFsync, file.path, err)
	}
	l.mu.Lock()
	if size > seg.syncedSize && seg.end >= covered { // not cut back meanwhile
		seg.syncedSize, seg.syncedEnd = size, covered
	}
	l.mu.Unlock()
	return covered, nil
}

// Cuts counts the unsynced tails cut off after failed fsyncs. A caller that
// appends and then syncs reads it before the append and again after Sync:
// a change means what it appended may be gone (ErrCut), whatever Sync says.
func (l *Log) Cuts() uint64 { return l.cuts.Load() }

// retryCut runs a pending cut (see dropUnsyncedLocked) and reports it if it
// is still pending: no fsync covers the log until it is done.
func (l *Log) retryCut() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cutPending != nil {
		l.dropUnsyncedLocked(l.cutPending)
	}
	return l.cutPending
}

// errFsync marks a failed fsync of the active segment.
var errFsync = errors.New("fsync")

// dropUnsynced is dropUnsyncedLocked for a caller that does not hold mu.
func (l *Log) dropUnsynced(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropUnsyncedLocked(cause)
}

// dropUnsyncedLocked cuts the log back to where the last successful fsync
// left it, after a failed one. On Linux a failed fsync may already have
// dropped the dirty pages it could not write (they are marked clean) while
// they stay readable in the page cache, so a later fsync "succeeds" over
// bytes that are not on disk. Everything appended since the last successful
// fsync was answered with an error, never acknowledged (acks=1 aside); it is
// truncated away, the truncation fsynced, and the producers' state rebuilt
// from what is left, so a producer's retry is written again rather than
// taken for a duplicate of bytes that are gone. When the cut itself fails
// (the disk is still failing) it stays pending: appends and syncs try it
// again first and fail until it succeeds. Runs under mu.
func (l *Log) dropUnsyncedLocked(cause error) {
	l.cutPending = nil
	seg := l.active()
	// Earlier segments were fsynced when rolled; in the active one, what
	// the last successful fsync covered (known without reading the pages
	// the failure may have lost).
	durable, pos := seg.syncedEnd, seg.syncedSize
	leo := l.leo.Load()
	if durable >= leo || l.closed {
		return
	}
	pending := func(what string, err error) {
		l.cutPending = fmt.Errorf("storage: %s: cutting the unsynced tail after a failed fsync (%s: %w): %w", l.dir, what, err, cause)
	}
	f := seg.log.w()
	if err := f.Truncate(pos); err != nil {
		pending("truncate", err)
		return
	}
	if err := f.Sync(); err != nil {
		pending("fsync of the truncation", err)
		return
	}
	seg.size, seg.end = pos, durable
	for len(seg.mem) > 0 && seg.mem[len(seg.mem)-1].pos >= pos {
		seg.mem = seg.mem[:len(seg.mem)-1]
	}
	if len(seg.mem) > 0 {
		seg.maxTs = seg.mem[len(seg.mem)-1].maxTsBefore
	} else {
		seg.maxTs = math.MinInt64
	}
	l.leo.Store(durable)
	l.producers, l.aborted = map[int64]*producerState{}, nil
	if err := l.loadProducers(); err != nil {
		pending("producer state", err)
		return
	}
	if err := l.eachHeader(seg.base, func(s *segment, _ int64, h *batchHeader) error {
		if s == seg {
			seg.maxTs = max(seg.maxTs, h.MaxTimestamp)
		}
		return nil
	}); err != nil {
		pending("rescan", err)
		return
	}
	l.cuts.Add(1)
	l.logger.Warn("storage: fsync failed; the unsynced tail was cut off and not acknowledged",
		"from_offset", durable, "to_offset", leo, "err", cause)
}
