package offsets

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"time"
)

// Owner grants one operation on a group. The store calls Grant under the
// group's lock, immediately before it reads or changes the group, and again
// just before a new file is renamed into place: ownership and the stamp a
// write carries therefore come from one assignment, current at the moment of
// the write. A grant error fails the operation with that error and changes
// nothing.
type Owner interface {
	Grant() (Fence, error)
}

// Grant implements Owner: a fixed stamp, always granted (tests, tools and
// single-broker use).
func (f Fence) Grant() (Fence, error) { return f, nil }

// OwnerFunc adapts a function to Owner.
type OwnerFunc func() (Fence, error)

// Grant implements Owner.
func (f OwnerFunc) Grant() (Fence, error) { return f() }

// grant evaluates own; a nil Owner grants the zero fence.
func grant(own Owner) (Fence, error) {
	if own == nil {
		return Fence{}, nil
	}
	return own.Grant()
}

// Retention is what offsets retention (KIP-211) needs to know about a
// group's membership, kept in the group's file so that every broker that
// coordinates the group applies the same rule (docs/offsets.md,
// "Retention"). The zero value is a group used for commits only.
type Retention struct {
	// ProtocolType is the group's protocol type ("consumer", "connect", …);
	// "" for a group that never had members (simple commits).
	ProtocolType string
	// EmptySince is when the group last became Empty (ms since the epoch);
	// 0 while it has members.
	EmptySince int64
	// Subscribed lists the topics a consumer group with members subscribes
	// to, sorted; nil when unknown.
	Subscribed []string
}

func (r Retention) equal(o Retention) bool {
	return r.ProtocolType == o.ProtocolType && r.EmptySince == o.EmptySince && slices.Equal(r.Subscribed, o.Subscribed)
}

// maxAttempts bounds how often one batch is applied again because another
// writer replaced the file between the check and the rename.
const maxAttempts = 4

// errRaced: the file changed between the staleness check and the rename.
var errRaced = errors.New("offsets: group file replaced by another writer during the write")

// writeBatch applies batch in order to the group's state and writes the result
// durably, then answers every request. Each request is granted by its Owner
// under the group's lock; a refused request fails alone. On a failed write
// every request in the batch gets the error and the state is rolled back (or
// reloaded on next touch when the rename may have happened). When another
// writer replaced the file while this one was writing, the batch is rolled
// back and applied again on the new content.
func (s *Store) writeBatch(g *groupState, batch []*request) {
	g.mu.Lock()
	defer func() {
		g.mu.Unlock()
		for _, r := range batch {
			close(r.done)
		}
	}()
	if g.evicted {
		for _, r := range batch {
			r.retry = true
		}
		return
	}
	for attempt := 1; ; attempt++ {
		err := s.attempt(g, batch)
		if !errors.Is(err, errRaced) {
			return
		}
		if attempt == maxAttempts {
			for _, r := range batch {
				if r.err == nil {
					r.err = fmt.Errorf("%w: %w", ErrFenced, err)
				}
			}
			return
		}
		s.log.Info("offsets: group file replaced during a write, applying the batch again", "group", g.id)
	}
}

// attempt is one try of writeBatch. It returns errRaced when the batch must
// be applied again; every other outcome is in the requests.
func (s *Store) attempt(g *groupState, batch []*request) error {
	for _, r := range batch {
		r.err, r.removed, r.existed, r.fence = nil, 0, false, Fence{}
	}
	fail := func(err error) {
		for _, r := range batch {
			if r.err == nil {
				r.err = err
			}
		}
	}
	// Grant first: a request refused here never loads the group, so a
	// broker that lost it keeps no resident copy.
	granted := 0
	for _, r := range batch {
		if r.fence, r.err = grant(r.own); r.err == nil {
			granted++
		}
	}
	if granted == 0 {
		s.forget(g, true)
		return nil
	}
	if err := s.refresh(g); err != nil {
		fail(err)
		return nil
	}
	ch := &change{g: g, nowMs: s.now().UnixMilli(), oldTxns: cloneTxns(g.txns), oldFence: g.fence,
		oldDisk: g.onDisk, oldInfo: g.info, oldStamp: g.unstamped, oldMembers: g.members}
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		if r.fence.Less(g.fence) {
			r.err = ErrFenced
			continue
		}
		g.fence = r.fence
		ch.apply(r)
	}
	if !ch.changed {
		g.fence = ch.oldFence // nothing written: memory stays equal to disk
		return nil
	}
	// The last check before the rename: every accepted request is still
	// granted, and the file is still the one the batch was applied to.
	var refused error
	recheck := func() error {
		refused = s.recheck(g, batch)
		return refused
	}
	// And the first check after it: a rename cannot be refused, and a
	// volume may hold it for seconds. While the write is in flight, the
	// brokers gaining the group wait for it (s.flights, in the liveness
	// reports); but when this broker's view went stale meanwhile, it may
	// have been declared dead and the group taken over without that wait,
	// so the write is not acknowledged (NOT_COORDINATOR; a newer owner
	// writes its own state back, refresh). The file is then trusted over
	// memory.
	regrant := func() error {
		refused = s.regrant(batch)
		return refused
	}
	var (
		err     error
		renamed bool
	)
	end := s.flights.Begin(g.fence.stamp())
	if ch.remove && g.st.n == 0 && len(g.txns) == 0 {
		if err = recheck(); err == nil {
			renamed, err = s.removeFile(g, regrant)
		}
	} else {
		renamed, err = s.writeFile(g, recheck, regrant)
	}
	end()
	if err == nil {
		g.unstamped = false
		return nil
	}
	ch.rollback()
	if renamed {
		// The new file may be visible: trust only the disk from now on.
		g.loaded = false
		g.st = state{}
	}
	if errors.Is(err, errRaced) {
		return err
	}
	if refused == nil {
		s.log.Warn("offsets: write failed", "group", g.id, "err", err)
	}
	fail(err)
	return nil
}

// recheck is the last check before a group file is replaced: every accepted
// request of the batch is still granted with a stamp no older than the one
// it was applied with, and the file is still the one the batch was applied
// to (errRaced otherwise).
func (s *Store) recheck(g *groupState, batch []*request) error {
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		f, err := grant(r.own)
		if err != nil {
			return err
		}
		if f.Less(r.fence) {
			return ErrFenced
		}
	}
	fi, err := s.fs.Stat(g.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if g.fi.IsSet() {
			return errRaced
		}
	case err != nil:
		return fmt.Errorf("offsets: stat %q: %w", g.id, err)
	case !g.fi.Same(fi):
		return errRaced
	}
	return nil
}

// regrant is the check after a group file was replaced: no Owner of the
// batch refuses with ErrNotFresh (ErrFenced otherwise). A refusal for
// ownership alone is no reason: the brokers gaining the group waited for
// this write.
func (s *Store) regrant(batch []*request) error {
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		if _, err := grant(r.own); errors.Is(err, ErrNotFresh) {
			return fmt.Errorf("%w: the write landed while this broker's view of the cluster was stale: %w", ErrFenced, err)
		}
	}
	return nil
}

// change is one attempt's changes to a group, with what is needed to undo
// them.
type change struct {
	g        *groupState
	nowMs    int64
	log      []undo
	intern   map[string]string
	changed  bool
	remove   bool
	oldTxns  map[int64]Staged
	oldFence Fence
	oldDisk  bool
	oldInfo  Retention
	oldStamp bool
	// oldMembers: the membership before the batch (a request replaces the
	// pointer, never the value it points to).
	oldMembers *Membership
}

func (ch *change) rollback() {
	g := ch.g
	g.st.rollback(ch.log)
	g.txns = ch.oldTxns
	g.fence, g.onDisk, g.info, g.unstamped = ch.oldFence, ch.oldDisk, ch.oldInfo, ch.oldStamp
	g.members = ch.oldMembers
}

// apply performs one accepted request on the group's state.
func (ch *change) apply(r *request) {
	switch r.kind {
	case opCommit:
		ch.commit(r)
	case opDelete:
		for _, tp := range r.tps {
			ch.del(tp)
		}
	case opDeleteTopic:
		if t := ch.g.st.topics[r.topic]; t != nil {
			var tps []TP
			t.each(func(p int32, _ *entry) { tps = append(tps, TP{r.topic, p}) })
			for _, tp := range tps {
				ch.del(tp)
			}
		}
	case opExpire:
		ch.expire(r)
	case opStage:
		ch.stage(r)
	case opEndTxn:
		ch.endTxn(r)
	case opSetRetention:
		if !ch.g.info.equal(r.info) {
			ch.g.info = r.info
			ch.changed = true
		}
	case opSetMembership:
		ch.g.members = r.membership
		ch.changed = true
	case opDeleteGroup:
		g := ch.g
		g.members = nil
		r.existed = g.onDisk || g.st.n > 0
		var tps []TP
		g.st.each(func(topic string, p int32, _ *entry) { tps = append(tps, TP{topic, p}) })
		for _, tp := range tps {
			ch.del(tp)
		}
		g.info = Retention{}
		ch.changed, ch.remove = true, true
	}
}

func (ch *change) del(tp TP) {
	var had bool
	if ch.log, had = ch.g.st.delLogged(ch.log, tp); had {
		ch.changed = true
	}
}

func (ch *change) commit(r *request) {
	g := ch.g
	for tp, o := range r.offs {
		e := entryOf(o)
		if e.commitTs == 0 {
			e.commitTs = ch.nowMs
		}
		if e.metadata != "" {
			if old, ok := g.st.get(tp); ok && old.metadata == e.metadata {
				e.metadata = old.metadata
			} else {
				if ch.intern == nil {
					ch.intern = map[string]string{}
				}
				if m, ok := ch.intern[e.metadata]; ok {
					e.metadata = m
				} else {
					ch.intern[e.metadata] = e.metadata
				}
			}
		}
		ch.log = g.st.putLogged(ch.log, tp, e)
		ch.changed, ch.remove = true, false
	}
}

// expire applies the retention rule of docs/offsets.md ("Retention") at
// r.now with the group's stored Retention.
func (ch *change) expire(r *request) {
	g := ch.g
	info := g.info
	if info.ProtocolType != "" && info.EmptySince == 0 && !r.members {
		// The group had members at its last owner and has none here: its
		// retention starts now, as when Kafka's coordinator loads a group
		// whose members then time out.
		g.info.EmptySince = r.now
		info = g.info
		ch.changed = true
	}
	if g.unstamped {
		ch.changed = true // persist the commit times given at load
	}
	expired := func(e *entry, base int64) bool {
		if e.expireTs >= 0 {
			return r.now >= e.expireTs
		}
		return r.now-base >= r.retention
	}
	var tps []TP
	switch {
	case info.ProtocolType == "":
		g.st.each(func(topic string, p int32, e *entry) {
			if expired(e, e.commitTs) {
				tps = append(tps, TP{topic, p})
			}
		})
	case info.EmptySince > 0:
		g.st.each(func(topic string, p int32, e *entry) {
			if expired(e, info.EmptySince) {
				tps = append(tps, TP{topic, p})
			}
		})
	case info.ProtocolType == "consumer" && info.Subscribed != nil:
		g.st.each(func(topic string, p int32, e *entry) {
			if _, sub := slices.BinarySearch(info.Subscribed, topic); !sub && expired(e, e.commitTs) {
				tps = append(tps, TP{topic, p})
			}
		})
	}
	for _, tp := range tps {
		ch.log, _ = g.st.delLogged(ch.log, tp)
	}
	r.removed = len(tps)
	if len(tps) > 0 {
		ch.changed = true
		// KIP-211: an Empty group left with no offsets is removed.
		ch.remove = g.st.n == 0 && (info.ProtocolType == "" || info.EmptySince > 0) &&
			(g.members == nil || len(g.members.Members) == 0)
	}
}

func (ch *change) stage(r *request) {
	g := ch.g
	if g.txns == nil {
		g.txns = map[int64]Staged{}
	}
	cur, ok := g.txns[r.pid]
	if !ok || cur.ProducerEpoch != r.staged.ProducerEpoch {
		cur = Staged{ProducerEpoch: r.staged.ProducerEpoch, TransactionalID: r.staged.TransactionalID, Offsets: map[TP]Offset{}}
	} else {
		cur.Offsets = maps.Clone(cur.Offsets)
	}
	for tp, o := range r.staged.Offsets {
		if o.CommitTimestamp == 0 {
			o.CommitTimestamp = ch.nowMs
		}
		cur.Offsets[tp] = o
	}
	g.txns[r.pid] = cur
	ch.changed, ch.remove = true, false
}

func (ch *change) endTxn(r *request) {
	g := ch.g
	st, ok := g.txns[r.pid]
	r.existed = ok
	if !ok {
		return
	}
	if r.commit {
		for tp, o := range st.Offsets {
			e := entryOf(o)
			if e.commitTs == 0 {
				e.commitTs = ch.nowMs
			}
			ch.log = g.st.putLogged(ch.log, tp, e)
		}
		r.removed = len(st.Offsets)
	}
	delete(g.txns, r.pid)
	ch.changed = true
}

// now is the store's clock.
func (s *Store) now() time.Time { return s.clock() }
