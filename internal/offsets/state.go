package offsets

import (
	"slices"
	"sort"
)

// entry is one committed offset in memory: 48 bytes on 64-bit platforms.
type entry struct {
	offset      int64
	commitTs    int64
	expireTs    int64
	metadata    string
	leaderEpoch int32
	set         bool
}

func (e entry) public() Offset {
	return Offset{Offset: e.offset, LeaderEpoch: e.leaderEpoch, Metadata: e.metadata,
		CommitTimestamp: e.commitTs, ExpireTimestamp: e.expireTs}
}

func entryOf(o Offset) entry {
	return entry{offset: o.Offset, commitTs: o.CommitTimestamp, expireTs: o.ExpireTimestamp,
		metadata: o.Metadata, leaderEpoch: o.LeaderEpoch, set: true}
}

// topicState holds the offsets of one topic: partitions below denseLimit (or
// below twice the count) live in a slice indexed by partition, the rest in a map.
// This keeps a 1000-partition group near 50 bytes per offset.
type topicState struct {
	dense  []entry
	sparse map[int32]entry
	n      int
}

const denseLimit = 4096

// state is the committed offsets of one group. Not safe for concurrent use: the
// owning group's mu guards it.
type state struct {
	topics map[string]*topicState
	n      int
}

func (s *state) get(tp TP) (entry, bool) {
	t := s.topics[tp.Topic]
	if t == nil {
		return entry{}, false
	}
	if int(tp.Partition) < len(t.dense) {
		e := t.dense[tp.Partition]
		return e, e.set
	}
	e, ok := t.sparse[tp.Partition]
	return e, ok
}

// put stores e (e.set must be true) and returns the previous entry.
func (s *state) put(tp TP, e entry) (entry, bool) {
	if s.topics == nil {
		s.topics = make(map[string]*topicState)
	}
	t := s.topics[tp.Topic]
	if t == nil {
		t = &topicState{}
		s.topics[tp.Topic] = t
	}
	p := int(tp.Partition)
	if p >= len(t.dense) && (p < denseLimit || p < 2*t.n) {
		if p >= cap(t.dense) {
			t.dense = slices.Grow(t.dense, p+1-len(t.dense))
		}
		t.dense = t.dense[:p+1]
		// Move sparse entries that now fall into the dense range.
		for q, se := range t.sparse {
			if int(q) < len(t.dense) {
				t.dense[q] = se
				delete(t.sparse, q)
			}
		}
	}
	var old entry
	var had bool
	if p < len(t.dense) {
		old = t.dense[p]
		had = old.set
		t.dense[p] = e
	} else {
		if t.sparse == nil {
			t.sparse = make(map[int32]entry)
		}
		old, had = t.sparse[tp.Partition]
		t.sparse[tp.Partition] = e
	}
	if !had {
		t.n++
		s.n++
	}
	return old, had
}

// del removes tp and returns the removed entry.
func (s *state) del(tp TP) (entry, bool) {
	t := s.topics[tp.Topic]
	if t == nil {
		return entry{}, false
	}
	var old entry
	var had bool
	if int(tp.Partition) < len(t.dense) {
		old = t.dense[tp.Partition]
		had = old.set
		t.dense[tp.Partition] = entry{}
	} else {
		old, had = t.sparse[tp.Partition]
		delete(t.sparse, tp.Partition)
	}
	if had {
		t.n--
		s.n--
		if t.n == 0 {
			delete(s.topics, tp.Topic)
		}
	}
	return old, had
}

// sortedTopics returns the topic names in sort.Strings order.
func (s *state) sortedTopics() []string {
	names := make([]string, 0, len(s.topics))
	for name := range s.topics {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// each calls fn for every partition of t in ascending partition order.
func (t *topicState) each(fn func(p int32, e *entry)) {
	for p := range t.dense {
		if t.dense[p].set {
			fn(int32(p), &t.dense[p])
		}
	}
	if len(t.sparse) == 0 {
		return
	}
	ps := make([]int32, 0, len(t.sparse))
	for p := range t.sparse {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		e := t.sparse[p]
		fn(p, &e)
	}
}

// each calls fn for every committed offset, topics sorted, partitions ascending.
func (s *state) each(fn func(topic string, p int32, e *entry)) {
	for _, name := range s.sortedTopics() {
		s.topics[name].each(func(p int32, e *entry) { fn(name, p, e) })
	}
}

func (s *state) snapshot() map[TP]Offset {
	out := make(map[TP]Offset, s.n)
	for name, t := range s.topics {
		t.each(func(p int32, e *entry) { out[TP{name, p}] = e.public() })
	}
	return out
}

// undo records how to revert the changes of one batch.
type undo struct {
	tp  TP
	old entry
	had bool
}

func (s *state) putLogged(log []undo, tp TP, e entry) []undo {
	old, had := s.put(tp, e)
	return append(log, undo{tp, old, had})
}

func (s *state) delLogged(log []undo, tp TP) ([]undo, bool) {
	old, had := s.del(tp)
	if !had {
		return log, false
	}
	return append(log, undo{tp, old, true}), true
}

// rollback reverts log (newest first).
func (s *state) rollback(log []undo) {
	for i := len(log) - 1; i >= 0; i-- {
		u := log[i]
		if u.had {
			s.put(u.tp, u.old)
		} else {
			s.del(u.tp)
		}
	}
}
