package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/route"
)

func obs(h Health, groups ...string) Observed {
	return Observed{Health: h, Report: Report{Groups: groups}}
}

func leaders(a *Assignment) map[string]int {
	out := map[string]int{}
	for _, p := range a.Partitions {
		out[p.Broker]++
	}
	return out
}

func partitionOf(a *Assignment, topic string, p int32) PartitionRow {
	for _, r := range a.Partitions {
		if r.Topic == topic && r.Partition == p {
			return r
		}
	}
	return PartitionRow{}
}

var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func threeAlive() map[string]Observed {
	return map[string]Observed{"kaas-0": obs(Alive), "kaas-1": obs(Alive), "kaas-2": obs(Alive)}
}

func TestComputeSpreadsLeadersEvenly(t *testing.T) {
	a := Compute(Inputs{Epoch: 1, Me: "kaas-0", Now: t0, Brokers: threeAlive(), Topics: []TopicInfo{{"orders", 6}}})
	if got := leaders(a); got["kaas-0"] != 2 || got["kaas-1"] != 2 || got["kaas-2"] != 2 {
		t.Fatalf("leaders %v, want 2/2/2", got)
	}
	if a.AssignmentVersion != 1 || a.ControllerEpoch != 1 {
		t.Fatalf("version %d epoch %d", a.AssignmentVersion, a.ControllerEpoch)
	}
	if again := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0.Add(time.Second), Brokers: threeAlive(), Topics: []TopicInfo{{"orders", 6}}}); again != nil {
		t.Fatalf("nothing changed but a new assignment was computed: %+v", again)
	}
}

func TestComputeMovesOnlyTheDeadBrokersPartitionsAndNoChurnOnReturn(t *testing.T) {
	topics := []TopicInfo{{"orders", 6}, {"audit", 3}}
	a := Compute(Inputs{Epoch: 1, Me: "kaas-0", Now: t0, Brokers: threeAlive(), Topics: topics})
	down := threeAlive()
	down["kaas-2"] = obs(Dead)
	b := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: down, Topics: topics})
	if b == nil || b.AssignmentVersion != 2 {
		t.Fatal("death not reflected")
	}
	if r, _ := b.Row("kaas-2"); r.Health != Dead {
		t.Fatalf("kaas-2 row %+v", r)
	}
	for _, p := range a.Partitions {
		q := partitionOf(b, p.Topic, p.Partition)
		switch {
		case p.Broker == "kaas-2" && (q.Broker == "kaas-2" || q.Epoch != p.Epoch+1):
			t.Errorf("%s/%d not moved with a new epoch: %+v -> %+v", p.Topic, p.Partition, p, q)
		case p.Broker != "kaas-2" && q != p:
			t.Errorf("%s/%d churned: %+v -> %+v", p.Topic, p.Partition, p, q)
		}
	}
	if got := leaders(b); got["kaas-0"]+got["kaas-1"] != 9 || abs(got["kaas-0"]-got["kaas-1"]) > 1 {
		t.Fatalf("moved partitions unevenly: %v", got)
	}
	// kaas-2 returns: alive again, nothing moves.
	c := Compute(Inputs{Prev: b, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: threeAlive(), Topics: topics})
	if r, _ := c.Row("kaas-2"); r.Health != Alive {
		t.Fatalf("returned broker row %+v", r)
	}
	for _, p := range b.Partitions {
		if q := partitionOf(c, p.Topic, p.Partition); q != p {
			t.Errorf("%s/%d churned on return: %+v -> %+v", p.Topic, p.Partition, p, q)
		}
	}
	// A new topic lands on the least loaded broker first.
	d := Compute(Inputs{Prev: c, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: threeAlive(), Topics: append(topics, TopicInfo{"new", 3})})
	for p := int32(0); p < 3; p++ {
		if q := partitionOf(d, "new", p); q.Broker != "kaas-2" {
			t.Errorf("new/%d went to %s, want the idle kaas-2", p, q.Broker)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func TestComputeRowsStayUntilRemoved(t *testing.T) {
	a := Compute(Inputs{Epoch: 1, Me: "kaas-0", Now: t0, Brokers: threeAlive()})
	gone := map[string]Observed{"kaas-0": obs(Alive), "kaas-1": obs(Alive)} // kaas-2's report file is gone
	b := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: gone})
	if r, ok := b.Row("kaas-2"); !ok || r.Health != Dead {
		t.Fatalf("a vanished broker's row must stay as dead: %+v %v", r, ok)
	}
	c := Compute(Inputs{Prev: b, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: gone, Removed: map[string]bool{"kaas-2": true}})
	if _, ok := c.Row("kaas-2"); ok {
		t.Fatal("a removed dead broker's row stayed")
	}
	// Removing an alive broker does nothing until it is no longer alive.
	d := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: threeAlive(), Removed: map[string]bool{"kaas-1": true}})
	if d != nil {
		if _, ok := d.Row("kaas-1"); !ok {
			t.Fatal("an alive broker was removed")
		}
	}
}

func TestTrap12LivenessBlipNeverEmptiesTheAliveSet(t *testing.T) {
	a := Compute(Inputs{Epoch: 1, Me: "kaas-0", Now: t0, Brokers: threeAlive(), Topics: []TopicInfo{{"t", 3}}})
	// The controller's own report looks stale (its writes stall): it stays
	// alive, and with Stalled nobody else dies either (trap 12).
	allQuiet := map[string]Observed{"kaas-0": obs(Dead), "kaas-1": obs(Dead), "kaas-2": obs(Dead)}
	b := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: allQuiet, Topics: []TopicInfo{{"t", 3}}, Stalled: true})
	if b != nil {
		t.Fatalf("a stalled volume moved things: %+v", b)
	}
	c := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: allQuiet, Topics: []TopicInfo{{"t", 3}}})
	if !c.IsAlive("kaas-0") {
		t.Fatal("the controller marked itself dead: the alive set became empty")
	}
	for _, p := range c.Partitions {
		if p.Broker != "kaas-0" {
			t.Fatalf("partition on a dead broker: %+v", p)
		}
	}
}

func TestComputeDrainingBrokerHandsOver(t *testing.T) {
	a := Compute(Inputs{Epoch: 1, Me: "kaas-0", Now: t0, Brokers: threeAlive(), Topics: []TopicInfo{{"t", 6}}})
	dr := threeAlive()
	dr["kaas-0"] = obs(Draining) // even the controller drains
	b := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: dr, Topics: []TopicInfo{{"t", 6}}})
	if r, _ := b.Row("kaas-0"); r.Health != Draining {
		t.Fatalf("row %+v", r)
	}
	if leaders(b)["kaas-0"] != 0 {
		t.Fatalf("draining broker still leads: %v", leaders(b))
	}
}

func TestComputeGroupEntriesMintedWhereTheHashAlreadyRoutes(t *testing.T) {
	ids := []string{"kaas-0", "kaas-1", "kaas-2"}
	var mine, other string
	for i := 0; mine == "" || other == ""; i++ {
		g := fmt.Sprintf("g%d", i)
		if route.Preferred(g, ids) == "kaas-1" {
			if mine == "" {
				mine = g
			}
		} else if other == "" {
			other = g
		}
	}
	br := threeAlive()
	br["kaas-1"] = obs(Alive, mine, other) // kaas-1 reports a group it does not route to (stale)
	a := Compute(Inputs{Epoch: 4, Me: "kaas-0", Now: t0, Brokers: br})
	if len(a.ConsumerGroups) != 1 || a.ConsumerGroups[0] != (GroupRow{GroupID: mine, Broker: "kaas-1", Epoch: 4}) {
		t.Fatalf("entries %+v, want only %s on kaas-1", a.ConsumerGroups, mine)
	}
	// The group stays active: the entry stays while kaas-1 is alive.
	b := Compute(Inputs{Prev: a, Epoch: 4, Me: "kaas-0", Now: t0, Brokers: br})
	if b != nil && len(b.ConsumerGroups) != 1 {
		t.Fatalf("entry retired while its broker lives: %+v", b.ConsumerGroups)
	}
	// kaas-1 dies: its entry is retired; the group it last reported active
	// is pinned at its fallback home instead (a hand-off entry).
	down := threeAlive()
	down["kaas-1"] = obs(Dead, mine)
	c := Compute(Inputs{Prev: a, Epoch: 4, Me: "kaas-0", Now: t0, Brokers: down})
	if len(c.ConsumerGroups) != 1 || c.ConsumerGroups[0].Broker == "kaas-1" || c.ConsumerGroups[0].HandedOffAt.IsZero() {
		t.Fatalf("entries after kaas-1 died: %+v, want one hand-off entry elsewhere", c.ConsumerGroups)
	}
}

func TestAssignmentKeepsNoEntryForDeletedOrQuietGroups(t *testing.T) {
	ids := []string{"kaas-0", "kaas-1", "kaas-2"}
	var groups []string
	for i := 0; len(groups) < 300; i++ {
		if g := fmt.Sprintf("short-lived-%d", i); route.Preferred(g, ids) == "kaas-1" {
			groups = append(groups, g)
		}
	}
	// Many short-lived groups, each active for a while and then deleted
	// (or quiet: no members, no commits for five minutes), so no longer
	// reported by their broker.
	var a *Assignment
	for i := 0; i < len(groups); i += 10 {
		br := threeAlive()
		br["kaas-1"] = obs(Alive, groups[i:i+10]...)
		if next := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: br}); next != nil {
			a = next
		}
		if len(a.ConsumerGroups) != 10 {
			t.Fatalf("after round %d: %d explicit entries for 10 active groups", i/10, len(a.ConsumerGroups))
		}
	}
	b := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: threeAlive()})
	if b == nil || len(b.ConsumerGroups) != 0 {
		t.Fatalf("entries kept for groups no broker reports active: %+v", b)
	}
}

// TestGroupHandedOffStaysWhenItsBrokerReturns: a group active on a broker
// that drains (or dies) moves to its fallback home; when the broker comes
// back before the new home has loaded and reported the group, the group
// used to route straight back (no entry pinned it yet), so each restart of
// a rolling restart moved such groups twice and clients that rejoin on
// NOT_COORDINATOR (kafkajs, kafka-go) rebalanced twice. The hand-off pins
// the group at its new home (an entry minted with the hash over the rows
// being written, so it moves nothing), held for a while even before the
// new home reports the group; kept as usual once it does, retired when it
// never does.
func TestGroupHandedOffStaysWhenItsBrokerReturns(t *testing.T) {
	ids := []string{"kaas-0", "kaas-1", "kaas-2"}
	var g string
	for i := 0; g == ""; i++ {
		if c := fmt.Sprintf("handed-%d", i); route.Preferred(c, ids) == "kaas-1" {
			g = c
		}
	}
	owner := func(a *Assignment) string {
		for _, e := range a.ConsumerGroups {
			if e.GroupID == g {
				return e.Broker
			}
		}
		rows := map[string]BrokerRow{}
		for _, r := range a.Brokers {
			rows[r.ID] = r
		}
		c, _ := route.Coordinator(g, a.BrokerIDs(), func(id string) bool { return rows[id].Health == Alive })
		return c
	}
	for _, down := range []Health{Draining, Dead} {
		t.Run(string(down), func(t *testing.T) {
			br := threeAlive()
			br["kaas-1"] = obs(Alive, g)
			a := Compute(Inputs{Epoch: 1, Me: "kaas-0", Now: t0, Brokers: br})
			if owner(a) != "kaas-1" {
				t.Fatalf("%s starts on %s", g, owner(a))
			}
			br["kaas-1"] = obs(down, g) // its last report still lists the group
			b := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0.Add(time.Second), Brokers: br})
			home := owner(b)
			if home == "kaas-1" {
				t.Fatalf("%s stays on the %s broker", g, down)
			}
			// Back before the new home has touched the group.
			br["kaas-1"] = obs(Alive)
			c := Compute(Inputs{Prev: b, Epoch: 1, Me: "kaas-0", Now: t0.Add(3 * time.Second), Brokers: br})
			if c == nil {
				c = b
			}
			if owner(c) != home {
				t.Fatalf("kaas-1 returned and %s moved back from %s to %s: a second move", g, home, owner(c))
			}
			// The new home reports it: kept for good.
			br[home] = obs(Alive, g)
			if d := Compute(Inputs{Prev: c, Epoch: 1, Me: "kaas-0", Now: t0.Add(time.Hour), Brokers: br}); d != nil && owner(d) != home {
				t.Fatalf("%s left %s although %s reports it active", g, home, home)
			}
			// Never touched at the new home: the entry goes after the hold.
			br[home] = obs(Alive)
			if e := Compute(Inputs{Prev: c, Epoch: 1, Me: "kaas-0", Now: t0.Add(time.Hour), Brokers: br}); e == nil || len(e.ConsumerGroups) != 0 {
				t.Fatalf("a hand-off entry outlived its hold without its group being used: %+v", e)
			}
		})
	}
}

// Defect: only the controller that removed a broker forgot its last report;
// the next controller still held it and re-added the row as dead, so the
// routing divisor went back up and every hashed group moved.
func TestRemovedBrokerStaysRemovedAfterAControllerChange(t *testing.T) {
	inc := func(h Health, inc string) Observed { return Observed{Health: h, Report: Report{Incarnation: inc}} }
	four := map[string]Observed{"kaas-0": inc(Alive, "a"), "kaas-1": inc(Alive, "b"), "kaas-2": inc(Alive, "c"), "kaas-3": inc(Alive, "d")}
	a := Compute(Inputs{Epoch: 1, Me: "kaas-0", Now: t0, Brokers: four})
	stopped := map[string]Observed{"kaas-0": inc(Alive, "a"), "kaas-1": inc(Alive, "b"), "kaas-2": inc(Alive, "c"), "kaas-3": inc(Dead, "d")}
	b := Compute(Inputs{Prev: a, Epoch: 1, Me: "kaas-0", Now: t0, Brokers: stopped, Removed: map[string]bool{"kaas-3": true}})
	if _, ok := b.Row("kaas-3"); ok || len(b.Brokers) != 3 {
		t.Fatalf("removal: rows %+v", b.Brokers)
	}
	// kaas-1 becomes controller; it still holds kaas-3's last report (and
	// no removal request: the old controller deleted it).
	c := Compute(Inputs{Prev: b, Epoch: 2, Me: "kaas-1", Now: t0, Brokers: stopped})
	if c != nil {
		if _, ok := c.Row("kaas-3"); ok {
			t.Fatalf("the next controller re-added the removed broker: rows %+v", c.Brokers)
		}
	} else {
		c = b
	}
	// A late report of the removed process (same incarnation, alive) does
	// not bring it back either.
	late := map[string]Observed{"kaas-0": inc(Alive, "a"), "kaas-1": inc(Alive, "b"), "kaas-2": inc(Alive, "c"), "kaas-3": inc(Alive, "d")}
	if d := Compute(Inputs{Prev: c, Epoch: 2, Me: "kaas-1", Now: t0, Brokers: late}); d != nil {
		if _, ok := d.Row("kaas-3"); ok {
			t.Fatalf("a late report of the removed process re-added it: rows %+v", d.Brokers)
		}
		c = d
	}
	// A new process with that id (started on purpose) joins again.
	back := map[string]Observed{"kaas-0": inc(Alive, "a"), "kaas-1": inc(Alive, "b"), "kaas-2": inc(Alive, "c"), "kaas-3": inc(Alive, "e")}
	e := Compute(Inputs{Prev: c, Epoch: 2, Me: "kaas-1", Now: t0, Brokers: back})
	if r, ok := e.Row("kaas-3"); !ok || r.Health != Alive {
		t.Fatalf("a new kaas-3 process did not join: rows %+v", e.Brokers)
	}
	if len(e.Removed) != 0 {
		t.Fatalf("the rejoined broker is still listed removed: %+v", e.Removed)
	}
}
