package coord

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/group"
)

// Defect: a classic join phase ended by its timer answered JoinGroup with
// a new generation from a broker whose view of the cluster had gone stale
// (frozen, cut off: the group may already be coordinated elsewhere). The
// timer now waits for a fresh view; a move answers the parked join with
// NOT_COORDINATOR, as it does any parked request.
func TestJoinPhaseEndedByItsTimerWaitsForAFreshView(t *testing.T) {
	var fresh atomic.Bool
	fresh.Store(true)
	a := newCoordWith(t, t.TempDir(), "kaas-0", func(c *Config) {
		c.Group.InitialRebalanceDelay = 300 * time.Millisecond
		c.Fresh = fresh.Load
	})
	v1 := assignment(1, 1, nil, nil)
	a.Apply(nil, v1)
	g := groupOn("kaas-1", "timer")
	ch, err := a.Join(g, group.JoinInput{Version: 3, ProtocolType: "consumer",
		Protocols: []group.Protocol{{Name: "range"}}, SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fresh.Store(false) // the view goes stale before the delay ends
	select {
	case r := <-ch:
		t.Fatalf("the join was answered from a stale view: %s, generation %d", group.ErrName(r.Err), r.Generation)
	case <-time.After(time.Second):
	}
	a.Apply(v1, assignment(2, 3, nil, nil)) // the group now routes to kaas-1
	select {
	case r := <-ch:
		if r.Err != group.ErrNotCoordinator {
			t.Fatalf("the parked join answered %s after the move", group.ErrName(r.Err))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the parked join was left hanging when the group moved")
	}
}
