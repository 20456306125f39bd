package cliflag

import (
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

type testCLI struct {
	DataDir   string        `name:"data-dir"`
	DeadAfter time.Duration `name:"dead-after" default:"1s"`
	Log       `embed:""`
}

func parse(t *testing.T, args ...string) (testCLI, error) {
	t.Helper()
	var c testCLI
	p, err := kong.New(&c, Options("x", "")...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Parse(args)
	return c, err
}

func TestEnvironmentThenCommandLine(t *testing.T) {
	t.Setenv("KAAS_DATA_DIR", "/from/env")
	t.Setenv("KAAS_DEAD_AFTER", "7s")
	c, err := parse(t, "--dead-after", "9s")
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/from/env" || c.DeadAfter != 9*time.Second {
		t.Fatalf("data-dir %q dead-after %v: want the environment, then the command line over it", c.DataDir, c.DeadAfter)
	}
	if c, err := parse(t); err != nil || c.DeadAfter != 7*time.Second {
		t.Fatalf("dead-after %v (%v): want KAAS_DEAD_AFTER's 7s", c.DeadAfter, err)
	}
	t.Setenv("KAAS_DEAD_AFTER", "3")
	if _, err := parse(t); err == nil || !strings.Contains(err.Error(), "use 3s") {
		t.Fatalf("a bad environment value: %v, want the fix named", err)
	}
}

func TestDurationWithoutAUnitNamesTheFix(t *testing.T) {
	for in, want := range map[string]string{
		"3":    `"3" has no unit: use 3s`,
		"1.5":  `"1.5" has no unit: use 1.5s`,
		"soon": `"soon" is not a duration`,
	} {
		if _, err := parse(t, "--dead-after", in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--dead-after %s: %v, want %q", in, err, want)
		}
	}
	if c, err := parse(t, "--dead-after", "0"); err != nil || c.DeadAfter != 0 {
		t.Errorf("--dead-after 0: %v %v", c.DeadAfter, err)
	}
	if _, err := parse(t, "--log-level", "loud"); err == nil {
		t.Error("--log-level loud was accepted")
	}
}
