package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaas-dev/kaas/internal/fsutil"
)

const (
	defaultSegmentBytes    = 128 << 20
	defaultMaxMessageBytes = 1048588
	defaultIndexInterval   = 4096
)

// Options configure a Log. Zero values mean the defaults noted.
type Options struct {
	SegmentBytes int64 // roll a new segment past this size; 0 = 128 MiB
	// SegmentMs (segment.ms) rolls a new segment when a batch's max
	// timestamp is this far past the first batch of the active segment,
	// as Kafka does; 0 or less = by size only.
	SegmentMs       int64
	RetentionMs     int64            // -1 = keep forever (0 = delete every closed segment)
	RetentionBytes  int64            // -1 = unlimited (per partition)
	MaxMessageBytes int32            // max size of one batch; 0 = 1048588
	LeaderEpoch     int32            // the epoch the opener leads with; Open performs the takeover
	Logger          *slog.Logger     // nil = discard
	Now             func() time.Time // nil = time.Now
	// Files holds the descriptors of closed segments; nil = the process-wide
	// pool of DefaultMaxOpenFiles shared by every Log (see FilePool).
	Files *FilePool
	// Owner names the incarnation the log belongs to (the broker passes the
	// topic id). A directory owned by another one (a deleted topic's log
	// that a crash left behind) is refused with ErrOtherOwner; a directory
	// without an owner file is taken and stamped. "" = no check.
	Owner string

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
	// cutPending: a failed fsync left an unsynced tail that could not yet be
	// cut off (dropUnsyncedLocked); guarded by mu.
	cutPending error
	// cuts counts the unsynced tails cut off (Cuts).
	cuts    atomic.Uint64
	history []epochEntry
	closed  bool
	broken  error // a write failed and could not be undone; the log refuses appends

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
	fenceInfo fsutil.Version

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
	if err := claimOwner(dir, opts.Owner); err != nil {
		return nil, err
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

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

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

// EpochEnd answers OffsetForLeaderEpoch (KIP-101, KIP-320) from the log's
// leader-epoch history: for the requested epoch, the largest epoch in the
// history not above it and the offset where that epoch's records end (the
// start of the next epoch, or the log end offset for the latest epoch).
// An epoch older than the whole history ends where the history's first
// epoch starts; an epoch newer than the latest, or -1, is unknown: (-1, -1).
func (l *Log) EpochEnd(requested int32) (epoch int32, end int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	h := l.history
	if requested < 0 || len(h) == 0 {
		return -1, -1
	}
	if last := h[len(h)-1]; requested == last.Epoch {
		return requested, l.leo.Load()
	}
	next := -1 // the first entry above the requested epoch
	for i, e := range h {
		if e.Epoch > requested {
			next = i
			break
		}
	}
	switch {
	case next < 0: // newer than anything this log was led at
		return -1, -1
	case next == 0:
		return requested, h[0].StartOffset
	}
	return h[next-1].Epoch, h[next].StartOffset
}
