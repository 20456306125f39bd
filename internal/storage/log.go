package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	defaultSegmentBytes    = 128 << 20
	defaultMaxMessageBytes = 1048588
	defaultIndexInterval   = 4096
)

// Options configure a Log. Zero values mean the defaults noted.
type Options struct {
	SegmentBytes    int64            // roll a new segment past this size; 0 = 128 MiB
	RetentionMs     int64            // -1 = keep forever (0 = delete every closed segment)
	RetentionBytes  int64            // -1 = unlimited (per partition)
	MaxMessageBytes int32            // max size of one batch; 0 = 1048588
	LeaderEpoch     int32            // the epoch the opener leads with; Open performs the takeover
	Logger          *slog.Logger     // nil = discard
	Now             func() time.Time // nil = time.Now
	// Files holds the descriptors of closed segments; nil = the process-wide
	// pool of DefaultMaxOpenFiles shared by every Log (see FilePool).
	Files *FilePool

	indexInterval int64 // bytes between index entries; 0 = 4 KiB (tests shrink it)
}

func (o Options) withDefaults() Options {
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = defaultSegmentBytes
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = defaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Files == nil {
		o.Files = defaultFilePool
	}
	if o.indexInterval <= 0 {
		o.indexInterval = defaultIndexInterval
	}
	return o
}

// AppendOptions are per-append settings taken from the topic config.
type AppendOptions struct {
	LogAppendTime bool // stamp batches with the broker's time (message.timestamp.type=LogAppendTime)
}

// AppendResult reports where an Append landed.
type AppendResult struct {
	BaseOffset     int64 // offset of the first record appended (or of the original, for a duplicate)
	LastOffset     int64
	LogAppendTime  int64 // ms, or -1 when the topic uses CreateTime
	LogStartOffset int64
	Duplicate      bool // idempotent duplicate: nothing written, offsets are the original ones
}

// Log is one partition's log in its directory. All methods are safe for
// concurrent use.
//
// Lock order: mu, then syncMu, then fenceMu; Sync never holds syncMu while
// taking mu. The FilePool's lock comes after all of them.
type Log struct {
	dir    string
	epoch  int32
	logger *slog.Logger
	now    func() time.Time

	// mu guards opts, segs (and the segment contents: readers hold RLock,
	// Append holds Lock), producers, history, closed and broken.
	mu        sync.RWMutex
	opts      Options
	segs      []*segment // ascending base; the last one is active
	producers map[int64]*producerState
	aborted   []AbortedTxn // ascending LastOffset
	history   []epochEntry
	closed    bool
	broken    error // a write failed and could not be undone; the log refuses appends

	leo    atomic.Int64 // next offset; written under mu
	lso    atomic.Int64 // log start offset; written under mu
	hw     atomic.Int64 // durable prefix end; written under syncMu
	fenced atomic.Bool  // sticky once a newer epoch is seen

	// syncMu guards round and hwCh.
	syncMu sync.Mutex
	round  *syncRound // the fsync in flight, nil if none
	hwCh   chan struct{}

	// fenceMu guards fenceInfo, the identity of the epoch file last read.
	fenceMu   sync.Mutex
	fenceInfo os.FileInfo

	fsyncs   atomic.Int64 // data fsyncs performed by Sync (tests, metrics)
	syncWait atomic.Int64 // callers parked on another caller's fsync (tests)
	syncHook func()       // tests: runs before each Sync fsync
}

// syncRound is one group-commit fsync; done closes when covered/err are set.
type syncRound struct {
	done    chan struct{}
	covered int64
	err     error
}

// Open opens (creating if needed) the partition log in dir and takes it over
// with opts.LeaderEpoch (see Fence in docs/storage.md): it publishes the epoch,
// recovers the files, seals the previous leader's last segment and starts a
// new active segment. It fails with ErrFenced if dir belongs to a newer epoch.
// Reopening with the epoch already on disk (a restart of the same leader)
// recovers and continues in the last segment.
func Open(dir string, opts Options) (*Log, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", dir, err)
	}
	l := &Log{
		dir:       dir,
		epoch:     opts.LeaderEpoch,
		logger:    opts.Logger.With("dir", dir, "epoch", opts.LeaderEpoch),
		now:       opts.Now,
		opts:      opts,
		producers: map[int64]*producerState{},
		hwCh:      make(chan struct{}),
	}
	if err := l.open(); err != nil {
		l.closeFiles()
		return nil, err
	}
	return l, nil
}

func (l *Log) open() error {
	removeStaleTemps(l.dir, time.Now())
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

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

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
	s := &segment{base: base, log: l.opts.Files.file(filepath.Join(l.dir, segmentName(base, logSuffix))), maxTs: math.MinInt64}
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
		return fmt.Errorf("storage: fsync %s: %w", seg.log.path, err)
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
	l.segs = append(l.segs, &segment{base: base, end: base, maxTs: math.MinInt64, log: l.opts.Files.pinned(path, f)})
	return nil
}

// strayFile moves a file that is not part of the log aside (never deletes it).
func (l *Log) strayFile(name, why string) {
	to := fmt.Sprintf("%s%s%d", name, strayMarker, time.Now().UnixNano())
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

// segmentFor returns the segment that holds offset (the last with base <= offset).
func (l *Log) segmentFor(offset int64) *segment {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset }) - 1
	return l.segs[max(i, 0)]
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
	if p := l.fenceInfo; p != nil && os.SameFile(p, fi) && p.Size() == fi.Size() && p.ModTime().Equal(fi.ModTime()) {
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
	l.fenceInfo = fi
	return nil
}

// Append validates and appends the records field of one partition of a
// Produce request (one or more v2 batches), all or nothing. It writes to the
// file (page cache) before returning; durability comes from Sync.
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
	case len(records) == 0:
		return AppendResult{}, fmt.Errorf("storage: append to %s: %w: no batches", l.dir, ErrInvalidRecord)
	}

	// Validate everything and decide producers before writing anything.
	var (
		headers []batchHeader
		staged  = map[int64]*producerState{}
		dups    []*producerBatch
		next    = l.leo.Load()
	)
	for rest := records; len(rest) > 0; {
		h, err := validateBatch(rest, l.opts.MaxMessageBytes)
		if err != nil {
			return AppendResult{}, fmt.Errorf("storage: append to %s at batch %d: %w", l.dir, len(headers), err)
		}
		rest = rest[h.size():]
		if h.ProducerID >= 0 {
			st, ok := staged[h.ProducerID]
			if !ok {
				st = l.producers[h.ProducerID]
			}
			dup, err := checkProducer(st, &h)
			if err != nil {
				return AppendResult{}, fmt.Errorf("storage: append to %s: %w", l.dir, err)
			}
			if dup != nil {
				dups = append(dups, dup)
				headers = append(headers, h)
				continue
			}
			h.BaseOffset = next
			staged[h.ProducerID] = applyProducer(st.clone(), &h)
		}
		h.BaseOffset = next
		next = h.lastOffset() + 1
		headers = append(headers, h)
	}
	lso := l.lso.Load()
	if len(dups) > 0 {
		if len(dups) != len(headers) {
			return AppendResult{}, fmt.Errorf("storage: append to %s: %w: request mixes duplicate and new batches", l.dir, ErrOutOfOrderSequence)
		}
		return AppendResult{BaseOffset: dups[0].firstOffset, LastOffset: dups[len(dups)-1].lastOffset,
			LogAppendTime: -1, LogStartOffset: lso, Duplicate: true}, nil
	}

	// Stamp a copy: the caller's buffer is not ours to modify.
	buf := append([]byte(nil), records...)
	appendTime := int64(-1)
	if o.LogAppendTime {
		appendTime = l.now().UnixMilli()
	}
	be := binary.BigEndian
	for i, pos := 0, int64(0); i < len(headers); i++ {
		h := &headers[i]
		b := buf[pos : pos+h.size()]
		be.PutUint64(b[offBaseOffset:], uint64(h.BaseOffset))
		be.PutUint32(b[offLeaderEpoch:], uint32(l.epoch))
		h.LeaderEpoch = l.epoch
		if o.LogAppendTime {
			h.Attributes |= attrLogAppendTime
			h.MaxTimestamp = appendTime
			be.PutUint16(b[offAttributes:], uint16(h.Attributes))
			be.PutUint64(b[offMaxTimestamp:], uint64(appendTime))
			h.CRC = batchCRC(b)
			be.PutUint32(b[offCRC:], h.CRC)
		}
		pos += h.size()
	}

	seg := l.active()
	if seg.size > 0 && seg.size+int64(len(buf)) > l.opts.SegmentBytes {
		if err := l.roll(); err != nil {
			return AppendResult{}, err
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
		return AppendResult{}, err
	}
	pos := seg.size
	for i := range headers {
		h := &headers[i]
		if n := len(seg.mem); n == 0 || pos-seg.mem[n-1].pos >= l.opts.indexInterval {
			seg.mem = append(seg.mem, indexEntry{offset: h.BaseOffset, pos: pos, maxTsBefore: seg.maxTs})
		}
		seg.maxTs = max(seg.maxTs, h.MaxTimestamp)
		pos += h.size()
	}
	seg.size, seg.end = pos, next
	for pid, st := range staged {
		l.producers[pid] = st
	}
	l.leo.Store(next)
	return AppendResult{BaseOffset: headers[0].BaseOffset, LastOffset: next - 1,
		LogAppendTime: appendTime, LogStartOffset: lso}, nil
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

		covered, err := l.fsyncActive()
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
	file, covered := l.active().log, l.leo.Load()
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
		return 0, fmt.Errorf("storage: fsync %s: %w", file.path, err)
	}
	return covered, nil
}

// EndOffset is the next offset to be assigned (the log end offset).
func (l *Log) EndOffset() int64 { return l.leo.Load() }

// HighWatermark is the end of the durable (synced) prefix: what consumers may read.
func (l *Log) HighWatermark() int64 { return l.hw.Load() }

// LogStartOffset is the first offset still in the log.
func (l *Log) LogStartOffset() int64 { return l.lso.Load() }

// LeaderEpoch is the epoch this Log was opened with.
func (l *Log) LeaderEpoch() int32 { return l.epoch }

// Fenced reports whether a newer leader has taken over (every Append and
// Sync then fails with ErrFenced).
func (l *Log) Fenced() bool { return l.fenced.Load() }

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

// SetOptions applies changed topic config: segment size, retention and max
// message size. LeaderEpoch, Logger and Now are fixed at Open and ignored.
func (l *Log) SetOptions(o Options) {
	o = o.withDefaults()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opts.SegmentBytes = o.SegmentBytes
	l.opts.RetentionMs = o.RetentionMs
	l.opts.RetentionBytes = o.RetentionBytes
	l.opts.MaxMessageBytes = o.MaxMessageBytes
}

// EnforceRetention deletes whole segments, oldest first, that are past
// retention time (by the segment's max timestamp) or size. It never deletes
// the active segment or one holding data above the high watermark. It
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

// Close syncs, writes the active index and the producer snapshot (unless a
// newer leader took over, in which case it writes nothing), and closes the
// files. Wait channels fire.
func (l *Log) Close() error {
	serr := l.Sync()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	// Wait for an fsync still in flight (its caller had the files).
	l.syncMu.Lock()
	r := l.round
	l.syncMu.Unlock()
	if r != nil {
		<-r.done
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if serr != nil && !errors.Is(serr, ErrFenced) {
		err = serr
	}
	if serr == nil && l.checkFence() == nil {
		if werr := l.writeSnapshot(); werr != nil {
			err = werr
		}
	}
	l.closeFiles()
	l.syncMu.Lock()
	close(l.hwCh)
	l.syncMu.Unlock()
	return err
}

// writeSnapshot writes the active index and the producer snapshot. Runs under mu.
func (l *Log) writeSnapshot() error {
	seg := l.active()
	if seg.size > 0 {
		if err := writeFileAtomic(l.dir, segmentName(seg.base, indexSuffix), encodeIndex(seg.mem)); err != nil {
			return err
		}
	}
	snap := producerSnapshot{coverEnd: l.leo.Load(), lastBase: -1, producers: l.producers, aborted: l.aborted}
	if snap.coverEnd > l.lso.Load() {
		s := l.segmentFor(snap.coverEnd - 1)
		_, h, err := s.findOffset(snap.coverEnd - 1)
		if err != nil {
			return err
		}
		snap.lastBase, snap.lastCRC = h.BaseOffset, h.CRC
	}
	return writeFileAtomic(l.dir, snapshotFileName, encodeSnapshot(snap))
}

func (l *Log) closeFiles() {
	for _, s := range l.segs {
		s.retire()
	}
}

// Remove deletes a partition's directory and files (topic deletion). The Log
// must be closed first.
func Remove(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("storage: remove %s: %w", dir, err)
	}
	return syncDir(filepath.Dir(dir))
}
