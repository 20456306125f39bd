// Package offsets is the per-group committed-offset store on the shared volume
// (spec coordination.md §6): one JSON file per group under
// <data>/__cluster/__consumer_offsets/, written durably (unique temp file, fsync,
// rename, fsync dir), fenced by the writer's assignment stamp, with concurrent
// commits to one group coalesced into one write.
//
// It owns the group files and the in-memory copy of the groups resident on this
// broker; it does not decide ownership (the caller passes a Fence and calls Evict
// when a group moves away). It imports the standard library only and must not
// import other kaas packages. The format and rules are in docs/offsets.md.
package offsets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
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
)

// Options configures a Store.
type Options struct {
	Dir    string       // the offsets directory, <data>/__cluster/__consumer_offsets
	Logger *slog.Logger // nil: discard
	NoSync bool         // skip fsync (benchmarks and tests on tmpfs-like paths only)
	// Now is the clock of commit timestamps given by the store; nil: time.Now.
	Now func() time.Time

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

	drains sync.WaitGroup // drain goroutines started by submit

	mu     sync.Mutex             // guards groups and closed; taken before any group lock
	groups map[string]*groupState // resident and in-flight groups
	closed bool
}

// groupState is one group's handle.
//
// Lock order: group.mu, then Store.mu, then group.qmu (Evict takes group.mu then
// Store.mu; nothing takes group.mu while holding Store.mu or group.qmu).
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
	info    Retention   // what retention needs to know of the group's membership
	onDisk  bool        // the file existed at the last read or write
	fi      fileVersion // identity of the file as last read or written; unset: absent
	// unstamped: offsets loaded without a commit timestamp were given the
	// load time, not yet written back (the next write or retention pass does).
	unstamped bool
}

type opKind uint8

const (
	opCommit opKind = iota
	opDelete
	opDeleteTopic
	opDeleteGroup
	opExpire
	opStage
	opEndTxn
	opSetRetention
)

// request is one queued operation and, once done is closed, its result.
type request struct {
	kind      opKind
	own       Owner // granted under the group's lock; nil grants the zero fence
	fence     Fence // the stamp granted in the current attempt
	offs      map[TP]Offset
	tps       []TP
	topic     string
	now       int64
	retention int64
	pid       int64
	staged    Staged
	commit    bool
	info      Retention
	members   bool // expire: the group has members on this broker

	done    chan struct{}
	err     error
	retry   bool // the handle was evicted while queued; resubmit on a fresh one
	removed int
	existed bool
}

// Open prepares a store on o.Dir, creating it if needed. It does not read the
// existing group files; each group loads on first touch.
func Open(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, errors.New("offsets: Options.Dir is empty")
	}
	s := &Store{dir: o.Dir, log: o.Logger, noSync: o.NoSync, fs: o.fs, clock: o.Now, groups: map[string]*groupState{}}
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
	s.drains.Wait()
	return s.dirf.Close()
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

// Load returns a copy of the group's committed offsets as they are on disk
// now: the group is loaded on first touch, and a resident copy is checked
// against the file (and re-read when another broker changed it) before it
// answers. own is granted first, under the group's lock; a refusal returns
// its error and leaves no resident copy behind.
func (s *Store) Load(group string, own Owner) (map[TP]Offset, error) {
	var out map[TP]Offset
	err := s.withCurrent(group, own, func(g *groupState) { out = g.st.snapshot() })
	return out, err
}

// withCurrent runs fn with the group's state granted, equal to the file, and
// its lock held.
func (s *Store) withCurrent(group string, own Owner, fn func(*groupState)) error {
	if err := validGroup(group); err != nil {
		return err
	}
	for {
		g, err := s.handle(group)
		if err != nil {
			return err
		}
		g.mu.Lock()
		if g.evicted {
			g.mu.Unlock()
			continue
		}
		if _, err := grant(own); err != nil {
			s.forget(g, false)
			g.mu.Unlock()
			return err
		}
		if err := s.refresh(g); err != nil {
			g.mu.Unlock()
			return err
		}
		fn(g)
		g.mu.Unlock()
		return nil
	}
}

// forget drops a handle that holds nothing (never loaded, nothing queued),
// so that a refused request leaves no trace. Called with g.mu held, by the
// handle's batch writer (writer) or by a reader.
func (s *Store) forget(g *groupState, writer bool) {
	if g.loaded {
		return
	}
	g.qmu.Lock()
	idle := (writer || !g.writing) && len(g.pending) == 0
	g.qmu.Unlock()
	if !idle {
		return
	}
	g.evicted = true
	s.mu.Lock()
	if s.groups[g.id] == g {
		delete(s.groups, g.id)
	}
	s.mu.Unlock()
}

// Commit merges offs into the group's full state and returns after a durable
// write that contains them. See the package documentation and docs/offsets.md.
func (s *Store) Commit(ctx context.Context, group string, own Owner, offs map[TP]Offset) error {
	r, err := commitRequest(group, own, offs)
	if err != nil {
		return err
	}
	return s.submit(ctx, group, r)
}

func commitRequest(group string, own Owner, offs map[TP]Offset) (*request, error) {
	if err := validGroup(group); err != nil {
		return nil, err
	}
	clean := make(map[TP]Offset, len(offs))
	for tp, o := range offs {
		if tp.Topic == "" || tp.Partition < 0 || !utf8.ValidString(tp.Topic) {
			return nil, fmt.Errorf("%w: %q/%d", ErrInvalidTopic, tp.Topic, tp.Partition)
		}
		o.Metadata = validUTF8(o.Metadata)
		clean[tp] = o
	}
	return &request{kind: opCommit, own: own, offs: clean}, nil
}

// CommitAsync queues a commit behind those already queued for the group and
// returns at once; the returned wait reports its outcome after the fsync
// that covers it. Commits queued in order are applied in order, so a caller
// that must keep the order of its requests (one client connection) queues
// them one after another and waits later: pipelined commits then share
// durable writes.
func (s *Store) CommitAsync(group string, own Owner, offs map[TP]Offset) (wait func(context.Context) error, err error) {
	r, err := commitRequest(group, own, offs)
	if err != nil {
		return nil, err
	}
	return s.enqueue(group, r)
}

// enqueue queues r behind the group's queued requests and returns its wait.
func (s *Store) enqueue(group string, r *request) (wait func(context.Context) error, err error) {
	g, err := s.handle(group)
	if err != nil {
		return nil, err
	}
	r.done = make(chan struct{})
	g.qmu.Lock()
	g.pending = append(g.pending, r)
	if !g.writing {
		g.writing = true
		s.drains.Add(1)
		go s.drain(g)
	}
	g.qmu.Unlock()
	return func(ctx context.Context) error {
		select {
		case <-r.done:
		case <-ctx.Done():
			if g.withdraw(r) {
				return ctx.Err()
			}
			<-r.done // already being written: its outcome is the answer
		}
		if r.retry { // the handle was evicted while queued: write it on a fresh one
			return s.submit(ctx, group, r)
		}
		return r.err
	}, nil
}

// Delete removes tps from the group (OffsetDelete) durably.
func (s *Store) Delete(ctx context.Context, group string, own Owner, tps []TP) error {
	if err := validGroup(group); err != nil {
		return err
	}
	return s.submit(ctx, group, &request{kind: opDelete, own: own, tps: tps})
}

// DeleteGroup removes the group's file durably and forgets its offsets. existed
// reports whether the group had a file or offsets.
func (s *Store) DeleteGroup(ctx context.Context, group string, own Owner) (existed bool, err error) {
	if err := validGroup(group); err != nil {
		return false, err
	}
	r := &request{kind: opDeleteGroup, own: own}
	err = s.submit(ctx, group, r)
	return r.existed, err
}

// Expire applies offsets retention (KIP-211) at now (ms) with the group's
// stored Retention (docs/offsets.md, "Retention"); members reports whether
// the group has members on the calling broker. It returns how many offsets
// it removed.
func (s *Store) Expire(ctx context.Context, group string, own Owner, now int64, retentionMs int64, members bool) (removed int, err error) {
	if err := validGroup(group); err != nil {
		return 0, err
	}
	r := &request{kind: opExpire, own: own, now: now, retention: retentionMs, members: members}
	err = s.submit(ctx, group, r)
	return r.removed, err
}

// Exists reports whether the group has a file on disk now.
func (s *Store) Exists(group string) (bool, error) {
	if err := validGroup(group); err != nil {
		return false, err
	}
	_, err := s.fs.Stat(filepath.Join(s.dir, FileName(group)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("offsets: stat %q: %w", group, err)
	}
	return true, nil
}

// Evict forgets the group's in-memory state (the group moved away). A write in
// flight finishes first; requests still queued are resubmitted on a fresh handle,
// which reloads from disk.
func (s *Store) Evict(group string) {
	s.mu.Lock()
	g := s.groups[group]
	s.mu.Unlock()
	if g == nil {
		return
	}
	// Mark first, then unlink: no fresh handle can load the file while this one
	// still has a write in flight.
	g.mu.Lock()
	g.evicted = true
	g.st = state{}
	s.mu.Lock()
	if s.groups[group] == g {
		delete(s.groups, group)
	}
	s.mu.Unlock()
	g.mu.Unlock()
}

// Resident returns the ids of the groups loaded in memory, in no order.
func (s *Store) Resident() []string {
	s.mu.Lock()
	gs := make([]*groupState, 0, len(s.groups))
	for _, g := range s.groups {
		gs = append(gs, g)
	}
	s.mu.Unlock()
	out := make([]string, 0, len(gs))
	for _, g := range gs {
		g.mu.Lock()
		if g.loaded && !g.evicted {
			out = append(out, g.id)
		}
		g.mu.Unlock()
	}
	return out
}

// DeleteTopic removes every offset of topic from every group file in the
// directory. fence returns the stamp to write a group with; ok=false skips the
// group (this broker does not coordinate it). Groups that were not resident are
// evicted again afterwards. It reads the directory and the files that are not
// resident; it returns the first error after trying every group.
func (s *Store) DeleteTopic(ctx context.Context, topic string, owner func(group string) (Owner, bool)) error {
	entries, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("offsets: read %s: %w", s.dir, err)
	}
	var first error
	for _, de := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := de.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, fileSuffix) {
			continue
		}
		path := filepath.Join(s.dir, name)
		group, ok := GroupFromFileName(name)
		var disk *decoded // the file's content when already read
		if !ok {          // hashed name: the id is in the file
			d, err := s.readDecoded(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				first = cmpErr(first, err)
				continue
			}
			if !d.hasGroup || FileName(d.group) != name {
				continue // not a group file of this store
			}
			group, disk = d.group, &d
		}
		s.mu.Lock()
		g := s.groups[group]
		s.mu.Unlock()
		resident := false
		if g != nil {
			g.mu.Lock()
			resident = g.loaded && !g.evicted
			has := resident && g.st.topics[topic] != nil
			g.mu.Unlock()
			if resident && !has {
				continue
			}
		}
		if !resident {
			if disk == nil {
				d, err := s.readDecoded(path)
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					first = cmpErr(first, err)
					continue
				}
				disk = &d
			}
			if disk.st.topics[topic] == nil {
				continue
			}
		}
		own, mine := owner(group)
		if !mine {
			continue
		}
		err := s.submit(ctx, group, &request{kind: opDeleteTopic, own: own, topic: topic})
		if err != nil {
			first = cmpErr(first, err)
		}
		if !resident {
			s.Evict(group)
		}
	}
	return first
}

// Groups lists every group that has an offsets file in the directory
// (hashed long names are resolved by reading the id stored in the file).
// It scans the directory: for listings and retention, not request paths.
func (s *Store) Groups() ([]string, error) {
	entries, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("offsets: read %s: %w", s.dir, err)
	}
	out := make([]string, 0, len(entries))
	for _, de := range entries {
		name := de.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, fileSuffix) {
			continue
		}
		group, ok := GroupFromFileName(name)
		if !ok {
			d, err := s.readDecoded(filepath.Join(s.dir, name))
			if err != nil || !d.hasGroup || FileName(d.group) != name {
				continue
			}
			group = d.group
		}
		out = append(out, group)
	}
	sort.Strings(out)
	return out, nil
}

func (s *Store) readDecoded(path string) (decoded, error) {
	data, _, err := s.fs.ReadFile(path)
	if err != nil {
		return decoded{}, err
	}
	d, err := decodeFile(data)
	if err != nil {
		return decoded{}, fmt.Errorf("offsets: decode %s: %w", filepath.Base(path), err)
	}
	return d, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// submit queues r on the group and waits for its result. The first caller of an
// idle group writes its batch on its own goroutine; requests arriving meanwhile
// queue, and one drain goroutine writes them all in the next batch.
func (s *Store) submit(ctx context.Context, groupID string, r *request) error {
	for {
		g, err := s.handle(groupID)
		if err != nil {
			return err
		}
		r.done = make(chan struct{})
		r.retry = false
		g.qmu.Lock()
		if !g.writing {
			g.writing = true
			g.qmu.Unlock()
			s.writeBatch(g, []*request{r})
			s.afterBatch(g)
		} else {
			g.pending = append(g.pending, r)
			g.qmu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				if g.withdraw(r) {
					return ctx.Err()
				}
				<-r.done // already being written: its outcome is the answer
			}
		}
		if r.retry {
			continue
		}
		return r.err
	}
}

// withdraw removes r from the queue if no batch took it yet.
func (g *groupState) withdraw(r *request) bool {
	g.qmu.Lock()
	defer g.qmu.Unlock()
	for i, q := range g.pending {
		if q == r {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			return true
		}
	}
	return false
}

// afterBatch hands the queue to a drain goroutine, or marks the group idle.
func (s *Store) afterBatch(g *groupState) {
	g.qmu.Lock()
	defer g.qmu.Unlock()
	if len(g.pending) == 0 {
		g.writing = false
		return
	}
	s.drains.Add(1)
	go s.drain(g)
}

// drain writes queued batches until the queue is empty. Owned by the Store:
// Close waits for it; it ends when the queue is empty.
func (s *Store) drain(g *groupState) {
	defer s.drains.Done()
	for {
		g.qmu.Lock()
		batch := g.pending
		g.pending = nil
		if len(batch) == 0 {
			g.writing = false
			g.qmu.Unlock()
			return
		}
		g.qmu.Unlock()
		s.writeBatch(g, batch)
	}
}

// refresh makes the in-memory state equal to the file: it loads the group on
// first touch, and otherwise re-reads the file only when its identity (inode,
// size, mtime) differs from the one last read or written.
func (s *Store) refresh(g *groupState) error {
	if !g.loaded {
		return s.load(g)
	}
	fi, err := s.fs.Stat(g.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !g.fi.set {
			return nil
		}
		s.log.Info("offsets: group file removed by another writer", "group", g.id)
		g.st, g.fence, g.onDisk, g.fi, g.txns, g.info, g.unstamped = state{}, Fence{}, false, fileVersion{}, nil, Retention{}, false
		return nil
	case err != nil:
		return fmt.Errorf("offsets: stat %q: %w", g.id, err)
	case sameFile(g.fi, fi):
		return nil
	}
	s.log.Info("offsets: group file changed by another writer, reloading", "group", g.id)
	return s.load(g)
}

// load reads the group's file into memory (an absent file is an empty group).
func (s *Store) load(g *groupState) error {
	data, fi, err := s.fs.ReadFile(g.path)
	if errors.Is(err, fs.ErrNotExist) {
		g.st, g.fence, g.onDisk, g.fi, g.loaded, g.txns, g.info, g.unstamped = state{}, Fence{}, false, fileVersion{}, true, nil, Retention{}, false
		return nil
	}
	if err != nil {
		return fmt.Errorf("offsets: read %q: %w", g.id, err)
	}
	d, err := decodeFile(data)
	if err != nil {
		return fmt.Errorf("offsets: decode %q: %w", g.id, err)
	}
	g.st, g.fence, g.onDisk, g.fi, g.loaded, g.txns, g.info = d.st, d.fence, true, versionOf(fi), true, d.txns, d.info
	g.unstamped = stampMissing(&g.st, g.txns, s.now().UnixMilli())
	return nil
}

var bufPool = sync.Pool{New: func() any { return new([]byte) }}

// writeFile writes the group's state with the durable pattern: a temp file with
// a name unique to this Store and write, fsync, rename over the group file,
// fsync the directory. renamed reports whether the rename happened.
func (s *Store) writeFile(g *groupState, recheck func() error) (renamed bool, err error) {
	bp := bufPool.Get().(*[]byte)
	data := encodeFile((*bp)[:0], g.id, &g.st, g.fence, g.info, g.txns)
	defer func() {
		*bp = data
		bufPool.Put(bp)
	}()
	tmp := filepath.Join(s.dir, s.tmpBase+fmt.Sprint(s.tmpSeq.Add(1)))
	f, err := s.fs.CreateExcl(tmp)
	if err != nil {
		return false, fmt.Errorf("offsets: write %q: %w", g.id, err)
	}
	fi, err := writeSync(f, data, s.noSync)
	if err != nil {
		s.fs.Remove(tmp)
		return false, fmt.Errorf("offsets: write %q: %w", g.id, err)
	}
	if err := recheck(); err != nil {
		s.fs.Remove(tmp)
		return false, err
	}
	if err := s.fs.Rename(tmp, g.path); err != nil {
		s.fs.Remove(tmp)
		return false, fmt.Errorf("offsets: write %q: rename: %w", g.id, err)
	}
	if !s.noSync {
		if err := s.dirf.Sync(); err != nil {
			return true, fmt.Errorf("offsets: write %q: sync dir: %w", g.id, err)
		}
	}
	g.fi, g.onDisk = versionOf(fi), true
	return true, nil
}

func writeSync(f writeFile, data []byte, noSync bool) (fs.FileInfo, error) {
	_, err := f.Write(data)
	if err == nil && !noSync {
		err = f.Sync()
	}
	var fi fs.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return fi, err
}

// removeFile removes the group's file durably.
func (s *Store) removeFile(g *groupState) (removed bool, err error) {
	err = s.fs.Remove(g.path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	} else if err != nil {
		return false, fmt.Errorf("offsets: delete %q: %w", g.id, err)
	}
	if !s.noSync {
		if err := s.dirf.Sync(); err != nil {
			return true, fmt.Errorf("offsets: delete %q: sync dir: %w", g.id, err)
		}
	}
	g.fi, g.onDisk = fileVersion{}, false
	return true, nil
}

// CleanTemp removes temp files (names starting with ".tmp-") older than age,
// left behind by crashed writers of any broker. It reads the directory; run it in
// the background, not at startup. It returns how many it removed.
func (s *Store) CleanTemp(ctx context.Context, age time.Duration) (int, error) {
	entries, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return 0, fmt.Errorf("offsets: read %s: %w", s.dir, err)
	}
	n := 0
	cutoff := time.Now().Add(-age)
	for _, de := range entries {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if !strings.HasPrefix(de.Name(), tempPrefix) {
			continue
		}
		fi, err := de.Info()
		if err != nil || fi.ModTime().After(cutoff) {
			continue
		}
		if s.fs.Remove(filepath.Join(s.dir, de.Name())) == nil {
			n++
		}
	}
	return n, nil
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

// Stage durably records transactional offsets of producer pid (a
// TxnOffsetCommit). A later epoch of the producer replaces what an earlier
// one staged.
func (s *Store) Stage(ctx context.Context, group string, own Owner, pid int64, st Staged) error {
	if err := validGroup(group); err != nil {
		return err
	}
	for tp := range st.Offsets {
		if tp.Topic == "" || !utf8.ValidString(tp.Topic) || tp.Partition < 0 {
			return fmt.Errorf("%w: %q/%d", ErrInvalidTopic, tp.Topic, tp.Partition)
		}
	}
	return s.submit(ctx, group, &request{kind: opStage, own: own, pid: pid, staged: st})
}

// EndTxn ends producer pid's staged offsets: commit makes them committed
// offsets in the same durable write, abort drops them. found reports whether
// anything was staged.
func (s *Store) EndTxn(ctx context.Context, group string, own Owner, pid int64, commit bool) (found bool, err error) {
	if err := validGroup(group); err != nil {
		return false, err
	}
	r := &request{kind: opEndTxn, own: own, pid: pid, commit: commit}
	err = s.submit(ctx, group, r)
	return r.existed, err
}

// StagedTxns returns the staged transactional offsets of a group by
// producer id, as they are on disk now (see Load).
func (s *Store) StagedTxns(group string, own Owner) (map[int64]Staged, error) {
	var out map[int64]Staged
	err := s.withCurrent(group, own, func(g *groupState) { out = cloneTxns(g.txns) })
	return out, err
}

// SetRetention records what retention needs to know of the group's
// membership (a write only when it differs from the stored one). Like
// CommitAsync it queues at once, in call order, and the returned wait
// reports the outcome after the durable write.
func (s *Store) SetRetention(group string, own Owner, info Retention) (wait func(context.Context) error, err error) {
	if err := validGroup(group); err != nil {
		return nil, err
	}
	info.Subscribed = slices.Clone(info.Subscribed)
	slices.Sort(info.Subscribed)
	return s.enqueue(group, &request{kind: opSetRetention, own: own, info: info})
}

// GroupRetention returns the group's stored Retention (see Load).
func (s *Store) GroupRetention(group string, own Owner) (Retention, error) {
	var out Retention
	err := s.withCurrent(group, own, func(g *groupState) { out = g.info })
	return out, err
}
