package coord

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/offsets"
)

// TestSessionExpiresOnTheCoordinatorsClock runs a member's session on
// virtual time (testing/synctest): the coordinator decides with its clock
// and arms the group's timers on the same clock, so the member is removed
// exactly when its session timeout has passed without a heartbeat, and not
// a moment before.
func TestSessionExpiresOnTheCoordinatorsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := offsets.Open(offsets.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		gc := group.DefaultConfig()
		gc.InitialRebalanceDelay = 0
		c := New(Config{Me: "kaas-0", Store: st, Group: gc})
		c.Apply(nil, assignment(1, 1, nil, nil))
		ch, err := c.Join("g", group.JoinInput{Version: 3, ProtocolType: "consumer",
			Protocols: []group.Protocol{{Name: "range"}}, SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		jr := <-ch
		sch, err := c.Sync("g", group.SyncInput{MemberID: jr.MemberID, Generation: jr.Generation,
			Assignments: []group.Assignment{{MemberID: jr.MemberID}}})
		if err != nil {
			t.Fatal(err)
		}
		<-sch
		state := func() string {
			d, err := c.Describe("g")
			if err != nil {
				t.Fatal(err)
			}
			return d.State
		}
		time.Sleep(10*time.Second - time.Millisecond)
		synctest.Wait()
		if s := state(); s != "Stable" {
			t.Fatalf("state %s just before the session timeout", s)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if s := state(); s != "Empty" {
			t.Fatalf("state %s just after the session timeout: the member was not removed", s)
		}
	})
}
