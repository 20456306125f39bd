// Package offsets is the per-group committed-offset store on the shared volume
// (spec coordination.md §6): one JSON file per group under
// <data>/__cluster/__consumer_offsets/, written durably (unique temp file, fsync,
// rename, fsync dir), fenced by the writer's assignment stamp, with concurrent
// commits to one group coalesced into one write.
//
// It owns the group files and the in-memory copy of the groups resident on this
// broker; it does not decide ownership (the caller passes an Owner with every
// operation and calls Evict when a group moves away). It imports the standard
// library and internal/fsutil only. The format and rules are in
// docs/offsets.md. Files: offsets.go (types, Open, Close), store.go (the
// operations), queue.go (serialising and coalescing writes), apply.go (one
// batch: grant, apply, write), file.go (reading and writing group files),
// codec.go and fastjson.go (the format), state.go (offsets in memory).
package offsets

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/kaas-dev/kaas/internal/fsutil"
)

// TP names one partition of a topic.
type TP struct {
	Topic     string
	Partition int32
}

// Offset is one committed offset.
type Offset struct {
	Offset          int64
	LeaderEpoch     int32 // -1: none
	Metadata        string
	CommitTimestamp int64 // ms since the epoch; 0 in a Commit means "now"
	ExpireTimestamp int64 // ms since the epoch; -1: none (KIP-211 explicit retention)
}

// Fence is a writer's assignment stamp, compared lexicographically. The zero
// Fence is older than every other.
type Fence struct {
	ControllerEpoch   int64
	AssignmentVersion int64
}

func (f Fence) stamp() fsutil.Stamp {
	return fsutil.Stamp{Epoch: f.ControllerEpoch, Version: f.AssignmentVersion}
}

// Less reports whether f is older than g.
func (f Fence) Less(g Fence) bool {
	if f.ControllerEpoch != g.ControllerEpoch {
		return f.ControllerEpoch < g.ControllerEpoch
	}
	return f.AssignmentVersion < g.AssignmentVersion
}

var (
	// ErrFenced: the group file carries a newer fence than the caller's; the caller
	// has lost the group (NOT_COORDINATOR at the edge). Nothing was written.
	ErrFenced = errors.New("offsets: fenced by a newer assignment")
	// ErrInvalidGroup: the group id is not valid UTF-8 or longer than 32767 bytes.
	ErrInvalidGroup = errors.New("offsets: invalid group id")
	// ErrInvalidTopic: a topic name is empty or not valid UTF-8, or a partition is
	// negative.
	ErrInvalidTopic = errors.New("offsets: invalid topic or partition")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("offsets: store closed")
	// ErrCorrupt: the group's file cannot be decoded (torn or damaged). The
	// group answers nothing until DeleteGroups moves the file aside
	// (SetAside, docs/operations.md).
	ErrCorrupt = errors.New("offsets: group file cannot be decoded")
	// ErrNotFresh: an Owner refuses because this broker's view of the
	// cluster is too old to act on (it may have been declared dead and
	// its groups taken over); wrapped in the Owner's own error.
	ErrNotFresh = errors.New("offsets: this broker's view of the cluster is stale")
)

// Options configures a Store.
type Options struct {
	Dir    string       // the offsets directory, <data>/__cluster/__consumer_offsets
	Logger *slog.Logger // nil: discard
	NoSync bool         // skip fsync (benchmarks and tests on tmpfs-like paths only)
	// Now is the clock of commit timestamps given by the store; nil: time.Now.
	Now func() time.Time
	// Writes counts the group file writes in flight by the assignment
	// they were granted under (the liveness reports carry the oldest);
	// nil: not counted.
	Writes *fsutil.Writes
	// OnCorrupt is called once per damaged group file (per version of
	// it) that a read could not decode; nil: nothing.
	OnCorrupt func(group string)

	fs fileSystem // nil: the real file system; tests inject a failing twin
}

// Store is the offsets store of one broker. All methods are safe for concurrent
// use.
type Store struct {
	dir    string
	log    *slog.Logger
	noSync bool
	fs     fileSystem
	dirf   syncer // the open directory, for fsync after rename and remove
	clock  func() time.Time

	tmpBase string        // ".tmp-<random>-": unique to this Store
	tmpSeq  atomic.Uint64 // suffix of the next temp file

	// writes counts the batch writes in flight (drain goroutines and callers
	// writing their own batch); Close waits for them. Added to only under mu
	// while the store is open (track).
	writes sync.WaitGroup

	onCorrupt func(group string)
	flights   *fsutil.Writes

	mu      sync.Mutex                // guards groups, corrupt and closed
	groups  map[string]*groupState    // resident and in-flight groups
	corrupt map[string]fsutil.Version // damaged files reported, by group
	closed  bool
}

// groupState is one group's handle.
//
// Lock order: groupState.mu, then groupState.qmu, then Store.mu. (The batch
// writer holds mu and may take qmu and Store.mu; afterBatch holds qmu and
// takes Store.mu; nothing takes mu or qmu while holding Store.mu.)
type groupState struct {
	id   string
	path string

	qmu     sync.Mutex // guards pending and writing
	pending []*request
	writing bool // a batch is being written; its writer will drain pending

	// mu guards everything below. The batch writer holds it for the whole write,
	// so readers never see offsets that are not yet durable.
	mu      sync.Mutex
	loaded  bool
	evicted bool
	st      state
	txns    map[int64]Staged // transactional offsets staged per producer id
	fence   Fence
	info    Retention      // what retention needs to know of the group's membership
	members *Membership    // the group's durable membership; nil: none
	onDisk  bool           // the file existed at the last read or write
	fi      fsutil.Version // identity of the file as last read or written; unset: absent
	// unstamped: offsets loaded without a commit timestamp were given the
	// load time, not yet written back (the next write or retention pass does).
	unstamped bool
}

// Open prepares a store on o.Dir, creating it if needed. It does not read the
// existing group files; each group loads on first touch.
func Open(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, errors.New("offsets: Options.Dir is empty")
	}
	s := &Store{dir: o.Dir, log: o.Logger, noSync: o.NoSync, fs: o.fs, clock: o.Now, groups: map[string]*groupState{},
		onCorrupt: o.OnCorrupt, corrupt: map[string]fsutil.Version{}, flights: o.Writes}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.fs == nil {
		s.fs = osFS{}
	}
	if err := s.fs.MkdirAll(o.Dir); err != nil {
		return nil, fmt.Errorf("offsets: create %s: %w", o.Dir, err)
	}
	d, err := s.fs.OpenDir(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("offsets: open %s: %w", o.Dir, err)
	}
	s.dirf = d
	var rnd [8]byte
	rand.Read(rnd[:])
	s.tmpBase = tempPrefix + hex.EncodeToString(rnd[:]) + "-"
	return s, nil
}

// Close waits for writes in flight and releases the directory handle. Later calls
// fail with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.writes.Wait()
	return s.dirf.Close()
}

// track counts a batch write about to start so that Close waits for it; it
// reports false once the store is closed. Taken under mu, where Close sets
// closed, so no write starts after Close began to wait.
func (s *Store) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.writes.Add(1)
	return true
}

func validGroup(group string) error {
	if len(group) > maxGroupLen || !utf8.ValidString(group) {
		return fmt.Errorf("%w: %.40q", ErrInvalidGroup, group)
	}
	return nil
}

// handle returns the group's handle, creating an unloaded one.
func (s *Store) handle(group string) (*groupState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	g := s.groups[group]
	if g == nil {
		g = &groupState{id: group, path: filepath.Join(s.dir, FileName(group))}
		s.groups[group] = g
	}
	return g, nil
}

// Staged is one producer's transactional offsets for a group, invisible to
// Load until its transaction commits (EndTxn).
type Staged struct {
	ProducerEpoch   int16
	TransactionalID string
	Offsets         map[TP]Offset
}

func cloneTxns(m map[int64]Staged) map[int64]Staged {
	if m == nil {
		return nil
	}
	return maps.Clone(m)
}
