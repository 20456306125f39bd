package offsets

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

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

// Evict forgets the group's in-memory state (the group moved away). It does
// not wait: a write in flight (which a volume may hold for seconds) finishes
// first, and the group is forgotten after it, on another goroutine;
// requests still queued are resubmitted on a fresh handle, which reloads
// from disk.
func (s *Store) Evict(group string) {
	s.mu.Lock()
	g := s.groups[group]
	s.mu.Unlock()
	if g == nil {
		return
	}
	if g.mu.TryLock() {
		s.evict(g)
		return
	}
	go func() {
		g.mu.Lock()
		s.evict(g)
	}()
}

// evict is Evict with g.mu held; it unlocks it.
func (s *Store) evict(g *groupState) {
	group := g.id
	// Mark first, then unlink: no fresh handle can load the file while this one
	// still has a write in flight.
	g.evicted = true
	g.st = state{}
	s.mu.Lock()
	if s.groups[group] == g {
		delete(s.groups, group)
	}
	s.mu.Unlock()
	g.mu.Unlock()
}

// Resident returns the ids of the groups loaded in memory, in no order. It
// does not wait for a write in flight: a group being written counts as
// resident.
func (s *Store) Resident() []string {
	s.mu.Lock()
	gs := make([]*groupState, 0, len(s.groups))
	for _, g := range s.groups {
		gs = append(gs, g)
	}
	s.mu.Unlock()
	out := make([]string, 0, len(gs))
	for _, g := range gs {
		if !g.mu.TryLock() {
			out = append(out, g.id)
			continue
		}
		if g.loaded && !g.evicted {
			out = append(out, g.id)
		}
		g.mu.Unlock()
	}
	return out
}

// DeleteTopic removes every offset of topic from every group file in the
// directory that this broker coordinates. owner returns the stamp to write
// a group with; ok=false skips the group (this broker does not coordinate
// it), before its file is read. Groups that were not resident are evicted
// again afterwards. It reads the directory, and the file of each group it
// coordinates that is not resident (and of each hashed long name, whose id
// is in the file); it returns the first error after trying every group.
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
		group, ok := GroupFromFileName(name)
		if !ok { // hashed name: the id is in the file
			d, err := s.readDecoded(filepath.Join(s.dir, name))
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
			if d.st.topics[topic] == nil {
				continue
			}
			group = d.group
		}
		own, mine := owner(group)
		if !mine {
			continue
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
		// Not resident: the request loads the file (one read) and writes
		// only if the topic had offsets there.
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
		return decoded{}, fmt.Errorf("offsets: decode %s: %w: %w", filepath.Base(path), ErrCorrupt, err)
	}
	return d, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
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

// SetMembership records the group's durable membership (nil removes the
// section). Like CommitAsync it queues at once, in call order, and the
// returned wait reports the outcome after the durable write: the write is
// fenced like every other (a broker that lost the group writes nothing).
func (s *Store) SetMembership(group string, own Owner, m *Membership) (wait func(context.Context) error, err error) {
	if err := validGroup(group); err != nil {
		return nil, err
	}
	return s.enqueue(group, &request{kind: opSetMembership, own: own, membership: cloneMembership(m)})
}

// WriteMembership is SetMembership waited for: it returns once the write is
// durable (or failed). When no write of the group is under way the caller's
// goroutine writes it (see submit), so an answer that waits for it costs no
// hand-off to another goroutine. m is kept as the group's membership: the
// caller must not change it afterwards.
func (s *Store) WriteMembership(ctx context.Context, group string, own Owner, m *Membership) error {
	if err := validGroup(group); err != nil {
		return err
	}
	return s.submit(ctx, group, &request{kind: opSetMembership, own: own, membership: m})
}

// GroupState returns the group's stored membership (nil: none, or a
// damaged section, which is ignored) and Retention, as they are on disk now
// (see Load).
func (s *Store) GroupState(group string, own Owner) (*Membership, Retention, error) {
	var (
		m    *Membership
		info Retention
	)
	err := s.withCurrent(group, own, func(g *groupState) { m, info = cloneMembership(g.members), g.info })
	return m, info, err
}
