package conformance

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The mixed-group scenario (issue #15): a classic group upgraded online to
// the consumer protocol (KIP-848) member by member, then downgraded back,
// while records are produced. Each step stops the oldest member and starts
// one of the other protocol in its place; the group must settle with
// every partition owned once after each, consume again, and in the end
// have consumed every acknowledged record, none twice. The first member
// of the consumer protocol converts the classic group (Kafka's default
// group.consumer.migration.policy, bidirectional); the last one leaving
// converts it back.
var migrations = []struct {
	classic, consumer string
	quick             bool
}{
	{"franz-go-cooperative", "franz-go-848", true},
	// Static members: each new member takes the instance id of the one it
	// replaces (a static classic member stopped does not leave; a static
	// consumer-protocol member leaves with -2), so the group sees an
	// instance change protocol in place.
	{"franz-go-static", "franz-go-848-static", true},
	{"java", "java-848", false},
	{"confluent-kafka-python", "confluent-kafka-python-848", false},
}

// franz848Static is franz-go's KIP-848 member with an instance id, for the
// static pair only (the matrix has no static KIP-848 driver).
var franz848Static = driver{name: "franz-go-848-static", static: true, consumer848: true, need: noNeed,
	start: franz(kgo.CooperativeStickyBalancer(), kgo.ServerSideBalancer())}

func driverNamed(t *testing.T, name string) driver {
	for _, d := range append(drivers, franz848Static) {
		if d.name == name {
			return d
		}
	}
	t.Fatalf("no driver %s", name)
	return driver{}
}

// TestConformanceMigration runs the mixed-group scenario for each pair of
// drivers of one client (the franz-go pair in quick mode, all in long mode).
func TestConformanceMigration(t *testing.T) {
	for _, mg := range migrations {
		if !long() && !mg.quick {
			continue
		}
		classic, consumer := driverNamed(t, mg.classic), driverNamed(t, mg.consumer)
		pair := classic
		pair.name = mg.classic + " ↔ " + mg.consumer
		pair.need = func(t *testing.T) { classic.need(t); consumer.need(t) }
		t.Run(mg.classic, func(t *testing.T) {
			runPair(t, scenario{name: "migration", run: migration(consumer)}, pair, localFolder)
		})
	}
}

// migration upgrades a group of 3 classic members to consumer's protocol
// one member at a time, then downgrades it the same way.
func migration(consumer driver) func(r *run) {
	return func(r *run) {
		r.mixed = true
		classic := r.drv
		r.start(3)
		r.waitStable(3, 60*time.Second)
		r.consuming("3 classic members")
		r.checkType("classic")
		step := func(to driver, what string, i int) {
			ids := make([]int, 0, len(r.members))
			for id := range r.members {
				ids = append(ids, id)
			}
			oldest := slices.Min(ids)
			r.stopMember(oldest)
			if r.drv.static {
				r.nextSlot = r.slots[oldest]
			}
			r.startWith(to, 1)
			r.waitStable(3, 90*time.Second)
			r.consuming(fmt.Sprintf("%d of 3 members %s", i, what))
		}
		for i := 1; i <= 3; i++ {
			step(consumer, "on the consumer protocol", i)
		}
		r.checkType("consumer")
		for i := 1; i <= 3; i++ {
			step(classic, "back on the classic protocol", i)
		}
		r.checkType("classic")
		r.finish()
		if d := r.got.duplicates(); d > 0 {
			r.t.Errorf("%d records consumed twice", d)
		}
	}
}

// checkType checks the group's type as ListGroups v5 reports it.
func (r *run) checkType(want string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := r.adm.ListGroups(ctx)
	if err != nil {
		r.t.Fatalf("ListGroups: %v", err)
	}
	for _, g := range gs.Sorted() {
		if g.Group == r.group {
			if g.GroupType != want {
				r.t.Errorf("group type %q, want %q", g.GroupType, want)
			}
			r.logf("group type %s", g.GroupType)
			return
		}
	}
	r.t.Errorf("group %s not listed", r.group)
}
