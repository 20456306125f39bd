package cluster

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/testutil"
)

// delayedDisk is an in-memory volume that several brokers share through
// their own views. A view shows another broker's write only after a delay
// of up to max, different for each (view, write), and its own writes at
// once (read-after-write): what a network file system with one client per
// broker may do. Exclusive create is decided on the true state, as a
// file server decides it.
type delayedDisk struct {
	max time.Duration
	// stallTick and stallOdds model a file server that holds a call
	// conflicting with another client's cached state until its next tick
	// (CephFS's MDS, docs/volume.md "Stalls"): a call stalls with
	// probability stallOdds until the next multiple of stallTick since
	// born. Zero: no call stalls.
	stallTick time.Duration
	stallOdds float64
	// reportReadOdds is the probability that reading a liveness report
	// file fails (ESTALE, as NFS answers a read racing the rename that
	// replaced the file). Zero: reads do not fail.
	reportReadOdds float64
	born           time.Time
	closed         chan struct{} // closed at the end of the test: no more stalls

	mu    sync.Mutex // guards files, seq
	files map[string][]version
	seq   uint64
}

type version struct {
	seq     uint64
	at      time.Time
	writer  string
	data    []byte
	deleted bool
}

func newDelayedDisk(max time.Duration) *delayedDisk {
	return &delayedDisk{max: max, files: map[string][]version{}, born: time.Now(), closed: make(chan struct{})}
}

// wait holds a call as the file server would (see stallTick).
func (d *delayedDisk) wait() {
	if d.stallTick <= 0 || rand.Float64() >= d.stallOdds {
		return
	}
	since := time.Since(d.born)
	t := time.NewTimer(d.stallTick - since%d.stallTick)
	defer t.Stop()
	select {
	case <-t.C:
	case <-d.closed:
	}
}

// view is one broker's client of the disk.
func (d *delayedDisk) view(me string) *delayedView { return &delayedView{d: d, me: me} }

type delayedView struct {
	d    *delayedDisk
	me   string
	hung atomic.Bool // every call blocks until the end of the test
	// killed: the broker's process was killed (kill): no call starts
	// any more; one the file server holds goes on to its end.
	killed atomic.Bool
}

// errKilled is what a killed broker's view answers to a call started after
// the kill: a killed process makes no more calls, and its in-process
// stand-in (whose loop goes on with the step it was in) must not either.
var errKilled = errors.New("the broker was killed")

// wait holds a call as the file server would, or for good while hung; it
// refuses a call started after the kill.
func (v *delayedView) wait() error {
	if v.killed.Load() {
		return errKilled
	}
	if v.hung.Load() {
		<-v.d.closed
		return nil
	}
	v.d.wait()
	return nil
}

// delay is the view's delay for one write: a hash of both, in [0, max].
func (v *delayedView) delay(seq uint64) time.Duration {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", v.me, seq)
	return time.Duration(h.Sum64() % uint64(v.d.max+1))
}

// visible is the newest version of path this view shows now. Called with
// d.mu held.
func (v *delayedView) visible(path string, now time.Time) (version, bool) {
	hist := v.d.files[path]
	for i := len(hist) - 1; i >= 0; i-- {
		w := hist[i]
		if w.writer == v.me || now.Sub(w.at) >= v.delay(w.seq) {
			return w, true
		}
	}
	return version{}, false
}

func (v *delayedView) put(path string, data []byte, deleted bool) {
	v.d.seq++
	v.d.files[path] = append(v.d.files[path], version{seq: v.d.seq, at: time.Now(), writer: v.me, data: append([]byte(nil), data...), deleted: deleted})
}

func (v *delayedView) ReadDir(dir string) ([]string, error) {
	if err := v.wait(); err != nil {
		return nil, err
	}
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	now := time.Now()
	var out []string
	for path := range v.d.files {
		if filepath.Dir(path) != dir {
			continue
		}
		if w, ok := v.visible(path, now); ok && !w.deleted {
			out = append(out, filepath.Base(path))
		}
	}
	sort.Strings(out)
	return out, nil
}

func (v *delayedView) ReadFile(path string) ([]byte, error) {
	if err := v.wait(); err != nil {
		return nil, err
	}
	if filepath.Base(filepath.Dir(path)) == "brokers" && rand.Float64() < v.d.reportReadOdds {
		return nil, &fs.PathError{Op: "read", Path: path, Err: syscall.ESTALE}
	}
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	w, ok := v.visible(path, time.Now())
	if !ok || w.deleted {
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return append([]byte(nil), w.data...), nil
}

func (v *delayedView) Stamp(path string) (string, error) {
	if err := v.wait(); err != nil {
		return "", err
	}
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	w, ok := v.visible(path, time.Now())
	if !ok || w.deleted {
		return "", &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
	}
	return fmt.Sprint(w.seq), nil
}

func (v *delayedView) WriteFile(path string, data []byte) error {
	if err := v.wait(); err != nil {
		return err
	}
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	v.put(path, data, false)
	return nil
}

func (v *delayedView) CreateExclusive(path string, data []byte) error {
	if err := v.wait(); err != nil {
		return err
	}
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	if hist := v.d.files[path]; len(hist) > 0 && !hist[len(hist)-1].deleted {
		return &fs.PathError{Op: "create", Path: path, Err: fs.ErrExist}
	}
	v.put(path, data, false)
	return nil
}

func (v *delayedView) Remove(path string) error {
	if err := v.wait(); err != nil {
		return err
	}
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	if hist := v.d.files[path]; len(hist) > 0 && !hist[len(hist)-1].deleted {
		v.put(path, nil, true)
	}
	return nil
}

func (v *delayedView) MkdirAll(string) error { return nil }

// delayedCluster is n runtimes on one delayed disk, each with a cluster
// listener on loopback.
type delayedCluster struct {
	t     *testing.T
	rts   []*Runtime
	views []*delayedView
	mu    sync.Mutex // guards seen
	seen  []string   // every broker health change any runtime applied
}

func startDelayedCluster(t *testing.T, n int, maxDelay time.Duration) *delayedCluster {
	return startOnDisk(t, n, newDelayedDisk(maxDelay))
}

func startOnDisk(t *testing.T, n int, disk *delayedDisk, tune ...func(*Config)) *delayedCluster {
	c := &delayedCluster{t: t}
	for i := range n {
		id := fmt.Sprintf("kaas-%d", i)
		var log *slog.Logger = slog.New(slog.DiscardHandler)
		if testing.Verbose() {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
		view := disk.view(id)
		cfg := Config{DataDir: "/volume", ID: id, NodeID: int32(i), Host: "127.0.0.1", Port: int32(9092 + i),
			ClusterListen: "127.0.0.1:0", DeadAfter: 3 * time.Second, Volume: view, Logger: log}
		for _, f := range tune {
			f(&cfg)
		}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r.OnApply(func(prev, next *Assignment) {
			if prev == nil {
				return
			}
			for _, b := range next.Brokers {
				if p, ok := prev.Row(b.ID); ok && p.Health != b.Health {
					c.mu.Lock()
					c.seen = append(c.seen, fmt.Sprintf("%s saw %s %s at epoch %d", id, b.ID, b.Health, next.ControllerEpoch))
					c.mu.Unlock()
				}
			}
		})
		c.rts = append(c.rts, r)
		c.views = append(c.views, view)
	}
	for _, r := range c.rts {
		r.Start()
	}
	t.Cleanup(func() {
		close(disk.closed)
		for _, r := range c.rts {
			r.Abort()
		}
	})
	return c
}

// without is the brokers 0..n-1 but down: their indexes, and which of
// their ids are alive (all but kaas-<down>), for allSee.
func without(n, down int) (live []int, alive map[string]bool) {
	alive = map[string]bool{}
	for i := range n {
		if i != down {
			live = append(live, i)
		}
		alive[fmt.Sprintf("kaas-%d", i)] = i != down
	}
	return live, alive
}

// idleFresh waits until every broker's view is fresh, then watches the idle
// cluster for d: the controller must stay kaas-<ctrl> at epoch, and it
// returns how many of the samples (every 100 ms) found each broker not
// fresh.
func (c *delayedCluster) idleFresh(ctrl int, epoch int64, d time.Duration) (stale map[int]int, samples int) {
	c.t.Helper()
	if err := testutil.Poll(10*time.Second, func() error {
		for i, r := range c.rts {
			if !r.Fresh() {
				return fmt.Errorf("kaas-%d not fresh", i)
			}
		}
		return nil
	}); err != nil {
		c.t.Fatal(err)
	}
	stale = map[int]int{}
	c.idle(ctrl, epoch, d, func() {
		for i, r := range c.rts {
			if !r.Fresh() {
				stale[i]++
			}
		}
		samples++
	})
	return stale, samples
}

// idle fails the test if the controller changes from ctrl at epoch over
// the next d (a moment with none named is no change), looking every
// 100 ms; sample, if not nil, runs at each look.
func (c *delayedCluster) idle(ctrl int, epoch int64, d time.Duration, sample func()) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if now, e := c.controller([]int{0, 1, 2}); now >= 0 && (now != ctrl || e != epoch) {
			c.t.Fatalf("the controller changed while idle: kaas-%d epoch %d, then kaas-%d epoch %d", ctrl, epoch, now, e)
		}
		if sample != nil {
			sample()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// healthSeen is a copy of the health changes the brokers logged so far.
func (c *delayedCluster) healthSeen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// forgetHealth drops the health changes logged so far (forming may mark a
// broker not yet heard dead).
func (c *delayedCluster) forgetHealth() {
	c.mu.Lock()
	c.seen = nil
	c.mu.Unlock()
}

// kill kills broker i as kill -9 would: its volume view starts no call
// any more (one the file server holds ends as it would), then its runtime
// aborts. Abort alone leaves the loop to finish its step, and on a volume
// whose calls stall the rest of that step wrote reports for seconds after
// the "kill": the broker's peers saw it alive again.
func (c *delayedCluster) kill(i int) {
	c.views[i].killed.Store(true)
	c.rts[i].Abort()
}

// formed waits until the three brokers see each other alive and returns
// the controller and its epoch.
func (c *delayedCluster) formed() (ctrl int, epoch int64) {
	c.t.Helper()
	all := map[string]bool{"kaas-0": true, "kaas-1": true, "kaas-2": true}
	if err := c.allSee([]int{0, 1, 2}, all, 30*time.Second); err != nil {
		c.t.Fatalf("the cluster did not form: %v", err)
	}
	if ctrl, epoch = c.controller([]int{0, 1, 2}); ctrl < 0 {
		c.t.Fatal("no controller")
	}
	return ctrl, epoch
}

// allSee waits until every runtime in live applies an assignment where
// exactly the brokers in alive are alive.
func (c *delayedCluster) allSee(live []int, alive map[string]bool, within time.Duration) error {
	return testutil.Poll(within, func() error {
		for _, i := range live {
			a := c.rts[i].Current()
			if a == nil {
				return fmt.Errorf("kaas-%d has no assignment", i)
			}
			for _, b := range a.Brokers {
				if (b.Health == Alive) != alive[b.ID] {
					return fmt.Errorf("kaas-%d sees %s %s", i, b.ID, b.Health)
				}
			}
			if len(a.Brokers) != 3 {
				return fmt.Errorf("kaas-%d sees %d brokers", i, len(a.Brokers))
			}
		}
		return nil
	})
}

func (c *delayedCluster) controller(live []int) (int, int64) {
	for _, i := range live {
		if c.rts[i].IsController() {
			return i, c.rts[i].KnownEpoch()
		}
	}
	return -1, 0
}

// TestLivenessAndElectionOnADelayedVolume runs three brokers on a volume
// that shows each broker the others' writes up to 5 s late (and its own at
// once): idle, nobody is declared dead and there is one election; a broker
// killed is detected, and the controller killed is replaced, within
// --dead-after + 1 s plus one report interval (its last report may have
// been sent just before) — asserted with 2 s more for a loaded CI machine,
// and logged. On the volume alone, a late report or lease renewal would
// push both past --dead-after + the delay (8 s).
func TestLivenessAndElectionOnADelayedVolume(t *testing.T) {
	c := startDelayedCluster(t, 3, 5*time.Second)
	ctrl, epoch := c.formed()
	// Idle: the volume shows reports and lease renewals up to 5 s late,
	// longer than --dead-after.
	idleFor := 12 * time.Second
	deadline := time.Now().Add(idleFor)
	for time.Now().Before(deadline) {
		if now, e := c.controller([]int{0, 1, 2}); now != ctrl || e != epoch {
			t.Fatalf("the controller changed while idle: kaas-%d epoch %d, then kaas-%d epoch %d", ctrl, epoch, now, e)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if seen := c.healthSeen(); len(seen) > 0 {
		t.Fatalf("health changes while idle on a delayed volume: %v", seen)
	}

	// kill -9 of a broker that is not the controller.
	victim := (ctrl + 1) % 3
	live, gone := without(3, victim)
	killed := time.Now()
	c.kill(victim)
	bound := 3*time.Second + time.Second + time.Second + 2*time.Second // dead-after + 1 s + one report interval + slack
	if err := c.allSee(live, gone, bound+5*time.Second); err != nil {
		t.Fatalf("kill -9 of kaas-%d not detected: %v", victim, err)
	}
	took := time.Since(killed)
	t.Logf("kill -9 of kaas-%d detected by every live broker after %v", victim, took.Round(10*time.Millisecond))
	if took > bound {
		t.Errorf("kill -9 detected after %v, above %v", took, bound)
	}

	// kill -9 of the controller.
	killed = time.Now()
	c.kill(ctrl)
	var other int
	for _, i := range live {
		if i != ctrl {
			other = i
		}
	}
	if err := testutil.Poll(bound+5*time.Second, func() error {
		if !c.rts[other].IsController() || c.rts[other].KnownEpoch() <= epoch {
			return fmt.Errorf("kaas-%d is not the new controller", other)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	took = time.Since(killed)
	t.Logf("the controller kaas-%d killed; kaas-%d elected after %v", ctrl, other, took.Round(10*time.Millisecond))
	if took > bound {
		t.Errorf("new controller after %v, above %v", took, bound)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.seen {
		if strings.Contains(s, fmt.Sprintf("kaas-%d dead", other)) {
			t.Errorf("a live broker was declared dead: %s", s)
		}
	}
}

// TestIdleClusterOnAVolumeWhoseCallsStallDeclaresNobodyDead runs three
// brokers on a volume whose calls stall, one in ten, until the file
// server's next 4 s tick (CephFS's MDS with its default tick stalled
// renames and lookups up to 5 s), with writes shown to the other brokers up
// to 1 s late. Liveness goes over the network, but a broker whose own loop
// waits on the volume must still be heard: idle, nobody is declared dead,
// the controller does not change, and every broker's view stays fresh (it
// may serve its groups); a broker killed is still detected.
func TestIdleClusterOnAVolumeWhoseCallsStallDeclaresNobodyDead(t *testing.T) {
	disk := newDelayedDisk(time.Second)
	disk.stallTick, disk.stallOdds = 4*time.Second, 0.1
	c := startOnDisk(t, 3, disk)
	all := map[string]bool{"kaas-0": true, "kaas-1": true, "kaas-2": true}
	if err := c.allSee([]int{0, 1, 2}, all, 60*time.Second); err != nil {
		t.Fatalf("the cluster did not form: %v", err)
	}
	var ctrl int
	var epoch int64
	if err := testutil.Poll(30*time.Second, func() error {
		if ctrl, epoch = c.controller([]int{0, 1, 2}); ctrl < 0 {
			return errors.New("no controller")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.forgetHealth()
	// Let every broker's view be confirmed once, then require it to stay
	// so: the heartbeat's answers keep it fresh while the loop waits.
	stale, samples := c.idleFresh(ctrl, epoch, 16*time.Second)
	if len(stale) > 0 {
		t.Errorf("brokers not fresh while idle (samples of %d): %v", samples, stale)
	}
	if seen := c.healthSeen(); len(seen) > 0 {
		t.Fatalf("health changes while idle on a stalling volume: %v", seen)
	}

	victim := (ctrl + 1) % 3
	live, gone := without(3, victim)
	killed := time.Now()
	c.kill(victim)
	if err := c.allSee(live, gone, 30*time.Second); err != nil {
		t.Fatalf("kill -9 of kaas-%d not detected: %v", victim, err)
	}
	t.Logf("kill -9 of kaas-%d detected by every live broker after %v", victim, time.Since(killed).Round(10*time.Millisecond))
}

// TestBrokerWhoseVolumeHangsIsDeclaredDead: the heartbeat speaks for a
// runtime loop waiting on the volume only up to the stall limit. A broker
// whose every volume call hangs for good is declared dead by the others
// once the limit and --dead-after have passed, and a new controller is
// elected when it was the controller.
func TestBrokerWhoseVolumeHangsIsDeclaredDead(t *testing.T) {
	const stallLimit = 4 * time.Second
	c := startOnDisk(t, 3, newDelayedDisk(0), func(cfg *Config) { cfg.StallLimit = stallLimit })
	ctrl, epoch := c.formed()
	hung := time.Now()
	c.views[ctrl].hung.Store(true)
	live, gone := without(3, ctrl)
	if err := c.allSee(live, gone, 30*time.Second); err != nil {
		t.Fatalf("the broker with a hung volume was not declared dead: %v", err)
	}
	took := time.Since(hung)
	t.Logf("kaas-%d's volume hung; declared dead after %v (stall limit %v + dead-after 3s)", ctrl, took.Round(10*time.Millisecond), stallLimit)
	if took < stallLimit {
		t.Errorf("declared dead after %v, before the stall limit %v: the heartbeat did not speak for the loop", took, stallLimit)
	}
	if now, e := c.controller(live); now < 0 || e <= epoch {
		t.Errorf("no new controller among the live brokers (kaas-%d, epoch %d; was epoch %d)", now, e, epoch)
	}
}

// TestKilledBrokerIsDeclaredDeadOnlyAfterTheTTL was the defect: a broker
// killed -9 stayed alive in the assignment for all of --dead-after, though
// its cluster listener refused every report sent to it from the moment it
// died; clients kept being routed to a closed port, backed off, and
// consumed again seconds after the takeover (franz-go: 7-9 s with a 3 s
// --dead-after). A peer whose listener refuses a report sent after its last
// report arrived has no process behind that address: it is dead at once.
// With a TTL of a minute, both a killed broker and a killed controller are
// replaced long before it; a frozen one (listening, not answering) is not.
func TestKilledBrokerIsDeclaredDeadOnlyAfterTheTTL(t *testing.T) {
	const ttl = time.Minute
	c := startOnDisk(t, 3, newDelayedDisk(0), func(cfg *Config) { cfg.DeadAfter = ttl })
	ctrl, epoch := c.formed()

	frozen := (ctrl + 2) % 3
	c.rts[frozen].Pause(5 * time.Second)
	time.Sleep(4 * time.Second)
	if seen := c.healthSeen(); len(seen) > 0 {
		t.Fatalf("a frozen broker (still listening) was declared dead before the TTL: %v", seen)
	}

	victim := (ctrl + 1) % 3
	killed := time.Now()
	c.kill(victim)
	live, alive := without(3, victim)
	if err := c.allSee(live, alive, ttl/2); err != nil {
		t.Fatalf("kill -9 of kaas-%d not detected within half the TTL: %v", victim, err)
	}
	t.Logf("kill -9 of kaas-%d detected after %v (TTL %v)", victim, time.Since(killed).Round(10*time.Millisecond), ttl)

	killed = time.Now()
	c.kill(ctrl)
	rest := []int{frozen}
	if err := testutil.Poll(ttl/2, func() error {
		if now, e := c.controller(rest); now < 0 || e <= epoch {
			return fmt.Errorf("no new controller (was kaas-%d, epoch %d)", ctrl, epoch)
		}
		a := c.rts[frozen].Current()
		if a == nil {
			return errors.New("no assignment")
		}
		for _, b := range a.Brokers {
			if want := b.ID == fmt.Sprintf("kaas-%d", frozen); (b.Health == Alive) != want {
				return fmt.Errorf("%s %s", b.ID, b.Health)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("kill -9 of the controller kaas-%d not taken over within half the TTL: %v", ctrl, err)
	}
	t.Logf("kill -9 of the controller kaas-%d taken over after %v (TTL %v)", ctrl, time.Since(killed).Round(10*time.Millisecond), ttl)
}

// TestBrokerWhoseVolumeCallsEachWaitATickIsNotDeclaredDead was the
// defect: the heartbeat spoke for the loop only while the loop finished a
// whole step within the stall limit, but a step is a dozen volume calls,
// and on a file server that holds each conflicting call until its next
// tick (CephFS: up to 5 s each) a step that makes progress call by call
// took longer than the limit: a live, idle broker stopped reporting and was
// declared dead, and was no longer fresh (it stopped serving its groups)
// long before that. Here every call waits for the next 500 ms tick and the
// stall limit is 2 s: steps take seconds, no call waits more than 500 ms,
// and every broker must stay fresh and alive.
func TestBrokerWhoseVolumeCallsEachWaitATickIsNotDeclaredDead(t *testing.T) {
	disk := newDelayedDisk(0)
	disk.stallTick, disk.stallOdds = 500*time.Millisecond, 1
	c := startOnDisk(t, 3, disk, func(cfg *Config) { cfg.StallLimit = 2 * time.Second })
	all := map[string]bool{"kaas-0": true, "kaas-1": true, "kaas-2": true}
	if err := c.allSee([]int{0, 1, 2}, all, 60*time.Second); err != nil {
		t.Fatalf("the cluster did not form: %v", err)
	}
	ctrl, epoch := c.controller([]int{0, 1, 2})
	c.forgetHealth()
	stale, samples := c.idleFresh(ctrl, epoch, 15*time.Second)
	if len(stale) > 0 {
		t.Errorf("brokers not fresh while idle (samples of %d), no volume call waiting more than 500 ms: %v", samples, stale)
	}
	if seen := c.healthSeen(); len(seen) > 0 {
		t.Errorf("health changes while idle, no volume call waiting more than 500 ms: %v", seen)
	}
}

// TestReportThatFailsToReadIsNotABrokerRemoved was the defect: a liveness
// report file that could not be read was left out of the reports read, as
// if its broker had been removed, and the controller declared a broker
// missing from them dead at once, without --dead-after: itself included,
// since its own report comes from the volume alone. On NFS a read that
// races the rename replacing the file fails (ESTALE). Here three in ten
// report reads fail: an unreadable report is no news, and nobody may be
// declared dead.
func TestReportThatFailsToReadIsNotABrokerRemoved(t *testing.T) {
	disk := newDelayedDisk(0)
	disk.reportReadOdds = 0.3
	c := startOnDisk(t, 3, disk)
	ctrl, epoch := c.formed()
	c.forgetHealth()
	c.idle(ctrl, epoch, 10*time.Second, nil)
	if seen := c.healthSeen(); len(seen) > 0 {
		t.Fatalf("health changes while idle, with report reads failing now and then: %v", seen)
	}
	// A broker killed is still declared dead.
	victim := (ctrl + 1) % 3
	live, gone := without(3, victim)
	c.kill(victim)
	if err := c.allSee(live, gone, 15*time.Second); err != nil {
		t.Fatalf("kill -9 of kaas-%d not detected: %v", victim, err)
	}
}
