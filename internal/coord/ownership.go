// Package coord owns consumer-group coordination on one broker: the one
// ownership function (two tiers: explicit placements in assignment.json,
// then the routing hash), the swappable assignment source, the resident
// groups with their membership shells, the takeover on assignment change
// with its orphan sweep, and the offset operations on top of
// internal/offsets. It imports internal/route, internal/cluster (the
// assignment model), internal/offsets and internal/group; it must not
// import internal/broker, which maps its errors to Kafka codes.
package coord

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/route"
)

// Broker is a coordinator as FindCoordinator reports it.
type Broker struct {
	ID     string
	NodeID int32
	Host   string
	Port   int32
}

// Source answers "who coordinates this key?". Implementations are
// immutable; the Ownership swaps whole sources.
type Source interface {
	// Group returns the coordinator of a group: an explicit placement
	// first, else the routing hash. ok=false when no broker is alive.
	Group(group string) (Broker, bool)
	// Txn returns the coordinator of a transactional id (hash tier only).
	Txn(id string) (Broker, bool)
	// Fence is the assignment stamp writes are made under.
	Fence() offsets.Fence
	// Serving reports whether the source may answer client traffic.
	Serving() bool
}

// Local is the permissive bootstrap source: this broker coordinates every
// key. A broker in a cluster holds it only until its runtime applies the
// first assignment, before it serves clients; a broker running alone (no
// cluster runtime) keeps it.
type Local struct {
	Self Broker
	// Standalone marks a broker that runs without a cluster runtime, where
	// the local source is the real one.
	Standalone bool
}

func (l Local) Group(string) (Broker, bool) { return l.Self, true }
func (l Local) Txn(string) (Broker, bool)   { return l.Self, true }
func (l Local) Fence() offsets.Fence        { return offsets.Fence{} }
func (l Local) Serving() bool               { return l.Standalone }

// Table is the assignment-backed source, built once per applied assignment.
type Table struct {
	a        *cluster.Assignment
	ids      []string // the full broker set, sorted
	rows     map[string]cluster.BrokerRow
	explicit map[string]string // group -> broker (first entry wins)
	applied  time.Time         // when this broker applied it (Coordinator.Apply)
}

// NewTable indexes an assignment.
func NewTable(a *cluster.Assignment) *Table {
	t := &Table{a: a, ids: a.BrokerIDs(), rows: map[string]cluster.BrokerRow{}, explicit: map[string]string{}}
	for _, r := range a.Brokers {
		t.rows[r.ID] = r
	}
	for _, g := range a.ConsumerGroups {
		if _, ok := t.explicit[g.GroupID]; !ok {
			t.explicit[g.GroupID] = g.Broker
		}
	}
	return t
}

func (t *Table) alive(id string) bool { return t.rows[id].Health == cluster.Alive }

func (t *Table) broker(id string) Broker {
	r := t.rows[id]
	return Broker{ID: r.ID, NodeID: r.NodeID, Host: r.Host, Port: r.Port}
}

// Group implements Source: tier 1, the explicit entry; tier 2, the hash.
func (t *Table) Group(group string) (Broker, bool) {
	if id, ok := t.explicit[group]; ok {
		return t.broker(id), true
	}
	id, ok := route.Coordinator(group, t.ids, t.alive)
	if !ok {
		return Broker{}, false
	}
	return t.broker(id), true
}

// Txn implements Source: the hash tier only.
func (t *Table) Txn(id string) (Broker, bool) {
	b, ok := route.Coordinator(id, t.ids, t.alive)
	if !ok {
		return Broker{}, false
	}
	return t.broker(b), true
}

// Fence implements Source.
func (t *Table) Fence() offsets.Fence {
	return offsets.Fence{ControllerEpoch: t.a.ControllerEpoch, AssignmentVersion: t.a.AssignmentVersion}
}

// Serving implements Source.
func (t *Table) Serving() bool { return true }

// Version is the assignment version the table was built from.
func (t *Table) Version() int64 { return t.a.AssignmentVersion }

// Explicit lists the groups with explicit placements.
func (t *Table) Explicit() []string {
	out := make([]string, 0, len(t.explicit))
	for g := range t.explicit {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// Ownership is the one answer to "do I coordinate G?" on a broker. Every
// component asks it: request handlers, FindCoordinator, the takeover sweep,
// ListGroups/DescribeGroups filtering, offset purges.
type Ownership struct {
	me  string
	src atomic.Pointer[sourceBox]
}

type sourceBox struct{ Source }

// NewOwnership starts with src (normally Local).
func NewOwnership(me string, src Source) *Ownership {
	o := &Ownership{me: me}
	o.Swap(src)
	return o
}

// Swap installs a new source and returns the previous one.
func (o *Ownership) Swap(src Source) Source {
	old := o.src.Swap(&sourceBox{src})
	if old == nil {
		return nil
	}
	return old.Source
}

// Source is the source in force.
func (o *Ownership) Source() Source { return o.src.Load().Source }

// OwnsGroup reports whether this broker coordinates group.
func (o *Ownership) OwnsGroup(group string) bool {
	b, ok := o.Source().Group(group)
	return ok && b.ID == o.me
}

// OwnsTxn reports whether this broker coordinates a transactional id.
func (o *Ownership) OwnsTxn(id string) bool {
	b, ok := o.Source().Txn(id)
	return ok && b.ID == o.me
}
