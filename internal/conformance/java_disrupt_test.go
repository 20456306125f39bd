package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kaas-dev/kaas/internal/kafkaref"
	"github.com/kaas-dev/kaas/internal/proctest"
)

// javaScenarios are the disruptions the Java ETL and Streams tests run in
// long mode, named as the client matrix names them (suite_test.go's
// scenarios): rolling-sigterm, the group's coordinator and the controller
// killed with -9 and started again, the coordinator frozen past the
// liveness timeout and resumed, and a member replaced (membership).
var javaScenarios = []string{"rolling-sigterm", "coordinator-kill9", "controller-kill9", "sigstop-coordinator", "membership"}

// javaMembers lets disruptJava replace a member for the membership
// scenario: stop ends member i (SIGTERM, as a deployment stops a pod) and
// start starts a new one in its place under a new name.
type javaMembers struct {
	stop  func(i int)
	start func(i int, name string)
}

// disruptJava applies scenario to c while the Java members of group run,
// and says what it did (for the result's note).
func disruptJava(t *testing.T, ctx context.Context, c *proctest.Cluster, adm *kadm.Client, group, scenario string, m javaMembers) string {
	t.Helper()
	killAndRestart := func(id int32, what string) string {
		b := c.Broker(id)
		if err := b.Kill(); err != nil {
			t.Fatalf("kill -9 of broker %d: %v", id, err)
		}
		time.Sleep(5 * time.Second)
		if err := b.Start(); err != nil {
			t.Fatalf("restart of broker %d: %v", id, err)
		}
		return fmt.Sprintf("%s (broker %d) killed -9, started again 5 s later", what, id)
	}
	switch scenario {
	case "rolling-sigterm":
		if err := c.RollingRestart(30*time.Second, 3*time.Second, nil); err != nil {
			t.Fatal(err)
		}
		return "each broker in turn stopped with SIGTERM and started again"
	case "coordinator-kill9":
		id, err := coordinatorOf(ctx, adm, group)
		if err != nil {
			t.Fatal(err)
		}
		return killAndRestart(id, "the group's coordinator")
	case "controller-kill9":
		var id int32
		err := proctest.WaitFor(20*time.Second, func() error {
			var err error
			if reference() {
				id, err = kafkaref.Controller(ctx, c.Client())
			} else {
				id, err = c.Controller(ctx, adm)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return killAndRestart(id, "the controller")
	case "sigstop-coordinator":
		id, err := coordinatorOf(ctx, adm, group)
		if err != nil {
			t.Fatal(err)
		}
		b := c.Broker(id)
		if err := b.Stop(); err != nil {
			t.Fatalf("SIGSTOP of broker %d: %v", id, err)
		}
		freeze := c.Opts.DeadAfter + 2*time.Second
		time.Sleep(freeze)
		if err := b.Cont(); err != nil {
			t.Fatalf("SIGCONT of broker %d: %v", id, err)
		}
		return fmt.Sprintf("the group's coordinator (broker %d) frozen %v, then resumed", id, freeze)
	case "membership":
		m.stop(2)
		time.Sleep(3 * time.Second)
		m.start(2, "replacement")
		time.Sleep(5 * time.Second)
		return "member 2 stopped (SIGTERM), a new member started in its place 3 s later"
	}
	t.Fatalf("unknown scenario %q", scenario)
	return ""
}
