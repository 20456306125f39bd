package cluster

import (
	"slices"
	"sort"
	"time"

	"github.com/kaas-dev/kaas/internal/route"
)

// TopicInfo is what the controller needs of a topic.
type TopicInfo struct {
	Name       string
	Partitions int32
}

// Observed is the controller's view of one broker.
type Observed struct {
	Health Health
	Report Report
}

// Inputs are everything Compute looks at. Compute is pure: the same inputs
// give the same assignment.
type Inputs struct {
	Prev    *Assignment // the assignment in force (nil before the first)
	Epoch   int64       // the controller's epoch
	Me      string      // the controller's broker id
	Now     time.Time
	Brokers map[string]Observed // every broker with a report
	Removed map[string]bool     // brokers removed from the cluster on purpose
	Topics  []TopicInfo
	Stalled bool // the controller's own reports are not landing: declare no deaths
}

// Compute derives the next assignment. It returns nil when nothing but
// timestamps would change.
//
// Rules:
//   - Rows: every broker in Prev or reporting, except removed brokers that
//     are not alive. A row stays (as dead) until removed, so the routing
//     divisor is stable across restarts. The controller is always alive
//     (unless draining), so the alive set is never empty while it lives.
//     While Stalled, no alive row becomes dead.
//   - Partitions: a leader that is alive keeps its partitions. Partitions of
//     new topics and of brokers no longer alive go, one at a time, to the
//     alive broker leading the fewest, ties by id; a moved partition's
//     epoch is the previous epoch + 1. Rows of deleted topics are dropped.
//   - Groups: an entry is minted for a group that an alive broker reports
//     active when route.Coordinator over the rows being written already
//     picks that broker (so minting never moves a group); an entry is kept
//     while its broker is alive and reports the group active (members, or a
//     commit in the last five minutes), and retired otherwise: when the
//     broker is no longer alive, when the group was deleted, or when it went
//     quiet. assignment.json thus stays proportional to the active groups.
//     When a broker stops being alive (draining or dead), the groups its
//     last report lists active are pinned where the rows being written route
//     them (a hand-off entry, again moving nothing): held for handOffHold
//     even before the new home reports them, so that the broker returning
//     does not pull them back for a second move.
func Compute(in Inputs) *Assignment {
	prev := in.Prev
	if prev == nil {
		prev = &Assignment{}
	}
	next := &Assignment{
		ControllerEpoch: in.Epoch,
		Controller:      in.Me,
		GeneratedAt:     in.Now.UTC(),
		Brokers:         []BrokerRow{},
		Partitions:      []PartitionRow{},
	}
	rows, removed := computeRows(in, prev)
	next.Removed = removed
	for _, r := range rows {
		next.Brokers = append(next.Brokers, r)
	}
	alive := func(id string) bool { r, ok := rows[id]; return ok && r.Health == Alive }
	var aliveIDs []string
	for id := range rows {
		if alive(id) {
			aliveIDs = append(aliveIDs, id)
		}
	}
	sort.Strings(aliveIDs)
	next.Partitions = computePartitions(in, prev, alive, aliveIDs)
	next.ConsumerGroups = computeGroups(in, prev, rows, alive, aliveIDs)
	next.sortRows()
	if in.Prev != nil && sameContent(in.Prev, next) {
		return nil
	}
	next.AssignmentVersion = prev.AssignmentVersion + 1
	return next
}

// computeRows is the broker rows of the next assignment, and its list of
// removed brokers (see Compute).
func computeRows(in Inputs, prev *Assignment) (map[string]BrokerRow, []RemovedRow) {
	rows := map[string]BrokerRow{}
	for _, r := range prev.Brokers {
		rows[r.ID] = r
	}
	removedInc := map[string]string{}
	for _, r := range prev.Removed {
		removedInc[r.ID] = r.Incarnation
	}
	rejoined := map[string]bool{}
	for id, o := range in.Brokers {
		if inc, gone := removedInc[id]; gone {
			_, hasRow := rows[id]
			// A removed broker's last report (held by any broker that
			// becomes controller) or a late report of that process is not
			// a return: only another process with the id, alive, is.
			if !hasRow && (o.Health != Alive || o.Report.Incarnation == inc) {
				continue
			}
			rejoined[id] = true
		}
		row, existed := rows[id]
		row.ID, row.NodeID = id, o.Report.NodeID
		row.Host, row.Port, row.Rack = o.Report.Host, o.Report.Port, o.Report.Rack
		h := o.Health
		if id == in.Me && h != Draining {
			h = Alive
		}
		if in.Stalled && existed && row.Health == Alive && h == Dead {
			h = Alive
		}
		if h == Alive || !existed || row.Health != h {
			row.LastSeen = o.Report.At.UTC()
		}
		row.Health = h
		rows[id] = row
	}
	for id, row := range rows {
		if _, reporting := in.Brokers[id]; !reporting && row.Health != Dead && !in.Stalled {
			row.Health = Dead
			rows[id] = row
		}
	}
	var removed []RemovedRow
	for _, r := range prev.Removed {
		if !rejoined[r.ID] {
			removed = append(removed, r)
		}
	}
	for id, row := range rows {
		if in.Removed[id] && row.Health != Alive {
			delete(rows, id)
			removed = append(removed, RemovedRow{ID: id, Incarnation: in.Brokers[id].Report.Incarnation, At: in.Now.UTC()})
		}
	}
	sort.SliceStable(removed, func(i, j int) bool {
		if !removed[i].At.Equal(removed[j].At) {
			return removed[i].At.Before(removed[j].At)
		}
		return removed[i].ID < removed[j].ID
	})
	if len(removed) > maxRemoved {
		removed = removed[len(removed)-maxRemoved:]
	}
	return rows, removed
}

// computePartitions is the partition rows of the next assignment (see
// Compute).
func computePartitions(in Inputs, prev *Assignment, alive func(string) bool, aliveIDs []string) []PartitionRow {
	out := []PartitionRow{}
	type key struct {
		topic string
		p     int32
	}
	old := map[key]PartitionRow{}
	for _, p := range prev.Partitions {
		old[key{p.Topic, p.Partition}] = p
	}
	load := map[string]int{}
	var orphans []PartitionRow
	topics := append([]TopicInfo(nil), in.Topics...)
	sort.Slice(topics, func(i, j int) bool { return topics[i].Name < topics[j].Name })
	for _, t := range topics {
		for p := int32(0); p < t.Partitions; p++ {
			row, ok := old[key{t.Name, p}]
			if !ok {
				row = PartitionRow{Topic: t.Name, Partition: p, Epoch: -1, Role: "leader"}
			}
			if ok && alive(row.Broker) {
				out = append(out, row)
				load[row.Broker]++
				continue
			}
			orphans = append(orphans, row)
		}
	}
	for _, row := range orphans {
		if len(aliveIDs) == 0 {
			if row.Broker != "" {
				out = append(out, row) // keep; nobody can lead
			}
			continue
		}
		best := aliveIDs[0]
		for _, id := range aliveIDs[1:] {
			if load[id] < load[best] {
				best = id
			}
		}
		row.Broker = best
		row.Epoch++
		load[best]++
		out = append(out, row)
	}

	return out
}

// handOffHold is how long a hand-off entry stays without its new home
// reporting the group in use: time for the group's members to find it
// (session timeouts are seconds); an untouched group's entry then retires.
const handOffHold = 30 * time.Second

// computeGroups is the explicit group entries of the next assignment (see
// Compute).
func computeGroups(in Inputs, prev *Assignment, rows map[string]BrokerRow, alive func(string) bool, aliveIDs []string) []GroupRow {
	var out []GroupRow
	ids := make([]string, 0, len(rows))
	for id := range rows {
		ids = append(ids, id)
	}
	placed := map[string]bool{}
	active := map[string]map[string]bool{} // broker -> groups it reports active
	for _, id := range aliveIDs {
		m := map[string]bool{}
		for _, g := range in.Brokers[id].Report.Groups {
			m[g] = true
		}
		active[id] = m
	}
	held := func(g GroupRow) bool { return !g.HandedOffAt.IsZero() && in.Now.Sub(g.HandedOffAt) < handOffHold }
	for _, g := range prev.ConsumerGroups {
		if alive(g.Broker) && (active[g.Broker][g.GroupID] || held(g)) && !placed[g.GroupID] {
			out = append(out, g)
			placed[g.GroupID] = true
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		if was, ok := prev.Row(id); alive(id) || !ok || was.Health != Alive {
			continue // only when the broker stops being alive
		}
		for _, g := range in.Brokers[id].Report.Groups {
			if placed[g] {
				continue
			}
			if c, ok := route.Coordinator(g, ids, alive); ok {
				out = append(out, GroupRow{GroupID: g, Broker: c, Epoch: in.Epoch, HandedOffAt: in.Now.UTC()})
				placed[g] = true
			}
		}
	}
	for _, id := range aliveIDs {
		for _, g := range in.Brokers[id].Report.Groups {
			if placed[g] {
				continue
			}
			if c, ok := route.Coordinator(g, ids, alive); ok && c == id {
				out = append(out, GroupRow{GroupID: g, Broker: id, Epoch: in.Epoch})
				placed[g] = true
			}
		}
	}
	return out
}

// sameContent compares two assignments ignoring version, time and lastSeen.
func sameContent(a, b *Assignment) bool {
	if a.ControllerEpoch != b.ControllerEpoch || a.Controller != b.Controller ||
		len(a.Brokers) != len(b.Brokers) || len(a.Partitions) != len(b.Partitions) ||
		len(a.ConsumerGroups) != len(b.ConsumerGroups) || !slices.Equal(a.Removed, b.Removed) {
		return false
	}
	for i := range a.Brokers {
		x, y := a.Brokers[i], b.Brokers[i]
		x.LastSeen, y.LastSeen = time.Time{}, time.Time{}
		if x != y {
			return false
		}
	}
	for i := range a.Partitions {
		if a.Partitions[i] != b.Partitions[i] {
			return false
		}
	}
	for i := range a.ConsumerGroups {
		if a.ConsumerGroups[i] != b.ConsumerGroups[i] {
			return false
		}
	}
	return true
}
