package groupconfig

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/testutil"
	"github.com/kaas-dev/kaas/internal/volume"
)

// TestValidateAsKafka: Kafka's bounds (45-60 s, 5-15 s by default,
// widened to hold the broker's own default) and messages; Kafka's other
// group configs are refused with the reason, unknown names as unknown.
func TestValidateAsKafka(t *testing.T) {
	b := BoundsFor(45*time.Second, 5*time.Second)
	for _, c := range []struct{ name, value, err string }{
		{HeartbeatInterval, "6000", ""},
		{HeartbeatInterval, "1000", "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."},
		{SessionTimeout, "70000", "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."},
		{SessionTimeout, "50000", ""},
		{SessionTimeout, "5s", "Invalid value 5s for configuration consumer.session.timeout.ms"},
		{"foo", "1", "Unknown group config name: foo"},
		{"share.session.timeout.ms", "50000", "kaas serves no share or streams groups"},
	} {
		err := b.Validate(c.name, c.value)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s=%s: %v, want %q", c.name, c.value, err, c.err)
		}
	}
	if err := BoundsFor(10*time.Second, time.Second).Validate(SessionTimeout, "10000"); err != nil {
		t.Errorf("a broker default below Kafka's minimum is refused on a group: %v", err)
	}
}

// TestAlterIsDurableAndSeenByAnotherStore: Alter writes the file, another
// broker's store reads it, DELETE restores the default, validateOnly
// writes nothing, and one refused op refuses them all.
func TestAlterIsDurableAndSeenByAnotherStore(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(volume.ClusterDir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	b := BoundsFor(45*time.Second, 5*time.Second)
	w, r := Open(dir), Open(dir)
	if err := w.Alter("g", []Op{{Name: HeartbeatInterval, Value: "6000"}, {Name: SessionTimeout, Value: "50000"}}, b, false); err != nil {
		t.Fatal(err)
	}
	got, err := r.Get("g")
	if err != nil || got[HeartbeatInterval] != "6000" || got[SessionTimeout] != "50000" {
		t.Fatalf("the other store reads %v, %v", got, err)
	}
	if err := w.Alter("g", []Op{{Name: HeartbeatInterval, Value: "7000"}, {Name: "foo", Value: "1"}}, b, false); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an unknown name beside a valid one: %v", err)
	}
	if err := w.Alter("g", []Op{{Name: HeartbeatInterval, Value: "8000"}}, b, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Get("g"); got[HeartbeatInterval] != "6000" {
		t.Fatalf("a refused or validate-only alter changed the file: %v", got)
	}
	if err := w.Alter("g", []Op{{Name: SessionTimeout, Op: 1}}, b, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Get("g"); got[SessionTimeout] != "" || got[HeartbeatInterval] != "6000" {
		t.Fatalf("after DELETE of the session timeout: %v", got)
	}
	if err := w.Alter("g", []Op{{Name: HeartbeatInterval, Op: 2, Value: "1"}}, b, false); !errors.Is(err, ErrInvalid) {
		t.Fatalf("APPEND on a single-valued config: %v", err)
	}
}

// clockedStore is a Store over a fresh volume's folder dir, on a clock the
// test moves (*clock), its values read at that clock's start.
func clockedStore(t *testing.T) (dir string, r *Store, clock *time.Time) {
	t.Helper()
	dir = t.TempDir()
	if err := os.MkdirAll(volume.ClusterDir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	r, clock = Open(dir), new(time.Time)
	*clock = time.Unix(1_700_000_000, 0)
	r.now, r.read = func() time.Time { return *clock }, *clock
	return dir, r, clock
}

// TestOverridesFollowTheFile: Overrides answers from memory and picks up
// another broker's change once its values are older than maxAge.
func TestOverridesFollowTheFile(t *testing.T) {
	dir, r, clock := clockedStore(t)
	b := BoundsFor(45*time.Second, 5*time.Second)
	if o := r.Overrides("g"); o != (Overrides{}) {
		t.Fatalf("no file: %+v", o)
	}
	if err := Open(dir).Alter("g", []Op{{Name: HeartbeatInterval, Value: "6000"}}, b, false); err != nil {
		t.Fatal(err)
	}
	*clock = clock.Add(2 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for r.Overrides("g").HeartbeatInterval != 6*time.Second {
		if time.Now().After(deadline) {
			t.Fatal("the other broker's change was never read")
		}
		*clock = clock.Add(2 * time.Second)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOverridesSeeAChangeAtTheFirstHeartbeatAfterIt: a config altered on
// the controller applies to the coordinator's next heartbeat once its
// values are older than maxAge, as on Kafka (the reference cluster's first
// join after the alter is told the new interval, TestGroupAnswersMatchKafka);
// kaas answered that heartbeat with the old values and re-read the file
// only for the ones after it.
func TestOverridesSeeAChangeAtTheFirstHeartbeatAfterIt(t *testing.T) {
	dir, r, clock := clockedStore(t)
	if err := Open(dir).Alter("g", []Op{{Name: HeartbeatInterval, Value: "6000"}}, BoundsFor(45*time.Second, 5*time.Second), false); err != nil {
		t.Fatal(err)
	}
	*clock = clock.Add(2 * time.Second)
	if o := r.Overrides("g"); o.HeartbeatInterval != 6*time.Second {
		t.Fatalf("first heartbeat after the change: %+v, want the 6 s interval", o)
	}
}

// TestOverridesWaitOnlyForTheReadTheyStart: on a stalled volume only the
// heartbeat that starts a re-read waits for it (at most freshWait); the
// ones after it answer with the values held. The first version of the
// wait had every heartbeat wait on the stalled read once the values were a
// second old. freshWait is an hour here, so a heartbeat that waits on the
// stalled read never returns until the read is released.
func TestOverridesWaitOnlyForTheReadTheyStart(t *testing.T) {
	_, r, clock := clockedStore(t)
	release := make(chan struct{})
	r.freshWait = time.Hour
	r.stat = func(name string) (fs.FileInfo, error) { <-release; return os.Stat(name) }
	*clock = clock.Add(2 * time.Second)
	first := make(chan struct{})
	go func() { r.Overrides("g"); close(first) }() // starts the read, waits on it
	testutil.WaitFor(t, 10*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.refreshing {
			return errors.New("no read started")
		}
		return nil
	})
	*clock = clock.Add(2 * time.Second) // past maxAge again, the read still stalled
	second := make(chan struct{})
	go func() { r.Overrides("g"); close(second) }()
	select {
	case <-second:
	case <-first:
		t.Fatal("the first heartbeat returned before the stalled read was released")
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("a heartbeat that did not start the stalled read waited for it")
	}
	close(release)
	<-first
}
