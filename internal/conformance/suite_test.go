package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/proctest"
)

const (
	topic = "conf"
	parts = 6
)

func TestMain(m *testing.M) {
	code := proctest.Main(m)
	if err := writeResults(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance: writing results:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// long reports whether KAAS_CONFORMANCE=long asks for every client ×
// every scenario.
func long() bool { return os.Getenv("KAAS_CONFORMANCE") == "long" }

// ---- results ----

type result struct {
	client, scenario, status string
	failover                 time.Duration // worst kill → consuming again; 0: not measured
	took                     time.Duration
	note                     string
	// genBefore and genAfter are the group's generation before the failure
	// and at the end (chaos scenarios; both 0 otherwise): the difference is
	// the rebalances the failure caused. dups counts records consumed more
	// than once.
	genBefore, genAfter int32
	dups                int
	// From the taps (since the failure in chaos scenarios, since the start
	// in membership): rebalances is the distinct generations completed
	// after the failure began (-1: not a chaos scenario); errs counts the
	// group's answers by error code; pauses lists, per broker taken down,
	// the longest time any partition waited to be consumed again.
	rebalances int
	errs       map[int16]int
	pauses     []string
	// untapped: the clients did not go through the taps (the Java ETL and
	// Streams tests), so the error columns were not measured.
	untapped bool
}

var (
	resMu   sync.Mutex // guards results, outDir
	results []result
	outDir  string
)

// out is the run's output folder: $KAAS_CONFORMANCE_OUT, else a temp dir
// made once per run (kept: it holds the table and the logs of failures).
func out() string {
	resMu.Lock()
	defer resMu.Unlock()
	if outDir == "" {
		if d := os.Getenv("KAAS_CONFORMANCE_OUT"); d != "" {
			outDir = d
		} else {
			d, err := os.MkdirTemp("", "kaas-conformance-")
			if err != nil {
				panic(err)
			}
			outDir = d
		}
		_ = os.MkdirAll(outDir, 0o755)
	}
	return outDir
}

func record(r result) {
	resMu.Lock()
	defer resMu.Unlock()
	results = append(results, r)
}

func writeResults() error {
	resMu.Lock()
	rs := append([]result(nil), results...)
	resMu.Unlock()
	if len(rs) == 0 {
		return nil
	}
	dir := out()
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].client != rs[j].client {
			return rs[i].client < rs[j].client
		}
		return rs[i].scenario < rs[j].scenario
	})
	mode := "quick"
	if long() {
		mode = "long"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s conformance results (%s mode, %s)\n\n", targetName(), mode, time.Now().UTC().Format(time.RFC3339))
	b.WriteString("kaas and Apache Kafka 4.4 row by row, each cell kaas · Kafka: `RESULTS-side-by-side.md` (written by `scripts/conformance.sh --save` from the two saved tables).\n\n")
	b.WriteString("| client | scenario | result | failover (kill → consuming again) | generation before → after the failure | rebalances | UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / REBALANCE_IN_PROGRESS seen | NOT_COORDINATOR seen | longest pause per move | records consumed twice | took | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fo := "–"
		if r.failover > 0 {
			fo = r.failover.Round(100 * time.Millisecond).String()
		}
		note := strings.ReplaceAll(r.note, "|", "/")
		note = strings.ReplaceAll(note, "\n", " ")
		if len(note) > 300 {
			note = note[:300] + "…"
		}
		gen := "–"
		if r.genBefore != 0 || r.genAfter != 0 {
			gen = fmt.Sprintf("%d → %d", r.genBefore, r.genAfter)
		}
		reb := "–"
		if r.rebalances >= 0 {
			reb = fmt.Sprint(r.rebalances)
		}
		pauses := "–"
		if len(r.pauses) > 0 {
			pauses = strings.Join(r.pauses, ", ")
		}
		seen := fmt.Sprintf("%d / %d / %d", r.errs[errUnknownMember], r.errs[errIllegalGeneration], r.errs[errRebalancing])
		notCoord := fmt.Sprint(r.errs[errNotCoordinator])
		if r.untapped {
			seen, notCoord = "–", "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s | %s |\n", r.client, r.scenario, r.status, fo, gen,
			reb, seen, notCoord, pauses, r.dups, r.took.Round(time.Second), note)
	}
	path := filepath.Join(dir, "RESULTS.md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Printf("conformance: results in %s\n%s", path, b.String())
	return nil
}

// ---- the ledger of consumed records ----

// consumed is every record any member of the group consumed.
type consumed struct {
	mu    sync.Mutex // guards all fields
	seen  map[int32]map[int64]bool
	max   map[int32]int64
	track bool            // min offsets since the last mark are tracked
	min   map[int32]int64 // lowest offset consumed per partition since mark
	total int
	// progress holds, per partition, when its highest consumed offset
	// grew: the gaps between them are the pauses the members saw.
	progress map[int32][]time.Time
}

func newConsumed() *consumed {
	return &consumed{seen: map[int32]map[int64]bool{}, max: map[int32]int64{}, min: map[int32]int64{}, progress: map[int32][]time.Time{}}
}

// longestGap is the longest time any partition went without progress
// within [from, to]: the pause the group's consumption saw then, the
// partition and when that pause began.
func (c *consumed) longestGap(from, to time.Time) (worst time.Duration, part int32, began time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	note := func(p int32, a, b time.Time) {
		if d := b.Sub(a); d > worst {
			worst, part, began = d, p, a
		}
	}
	for p := range int32(parts) {
		last := from
		for _, at := range c.progress[p] {
			if at.Before(from) {
				continue
			}
			if at.After(to) {
				break
			}
			note(p, last, at)
			last = at
		}
		note(p, last, to)
	}
	return worst, part, began
}

func (c *consumed) add(p int32, off int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.seen[p]
	if m == nil {
		m = map[int64]bool{}
		c.seen[p] = m
	}
	m[off] = true
	c.total++
	if v, ok := c.max[p]; !ok || off > v {
		c.max[p] = off
		c.progress[p] = append(c.progress[p], time.Now())
	}
	if c.track {
		if v, ok := c.min[p]; !ok || off < v {
			c.min[p] = off
		}
	}
}

// duplicates is how many records were consumed more than once (each
// extra time counts).
func (c *consumed) duplicates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.total
	for _, m := range c.seen {
		n -= len(m)
	}
	return n
}

// mark starts tracking the lowest offset consumed per partition.
func (c *consumed) mark() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.track, c.min = true, map[int32]int64{}
}

func (c *consumed) mins() map[int32]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int32]int64{}
	for p, v := range c.min {
		out[p] = v
	}
	return out
}

// past reports the partitions on which nothing at or past from[p] has been
// consumed yet.
func (c *consumed) behind(from map[int32]int64) []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int32
	for p := range int32(parts) {
		v, ok := c.max[p]
		if !ok || v < from[p] {
			out = append(out, p)
		}
	}
	return out
}

// missing lists acknowledged records not consumed (at most 10 of them) and
// how many there are.
func (c *consumed) missing(acked map[int32]map[int64]string) ([]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	n := 0
	for p, m := range acked {
		for off := range m {
			if !c.seen[p][off] {
				n++
				if len(out) < 10 {
					out = append(out, fmt.Sprintf("p%d@%d", p, off))
				}
			}
		}
	}
	sort.Strings(out)
	return out, n
}

// ---- one scenario run ----

// run is one client driving one scenario on a fresh 3-broker cluster.
type run struct {
	t       *testing.T
	drv     driver
	c       *cluster
	cl      *kgo.Client
	adm     *kadm.Client
	group   string
	dir     string
	prod    *proctest.Producer
	got     *consumed
	members map[int]member
	next    int
	static  int // next static slot name, for static membership

	sampleStop chan struct{}
	sampleDone chan struct{}
	smu        sync.Mutex // guards committed, regress
	committed  map[int32]int64
	regress    []string

	failover time.Duration
	notes    []string
	began    time.Time
	downed   map[int32]bool // brokers this run killed, froze or stopped
	// genEnd and endAt are the group's generation, and the time, when the
	// measured part of the run ended (before its members stop).
	genEnd int32
	endAt  time.Time
	// genBefore is the group's generation just before a chaos scenario's
	// failure (-1: none formed; 0: not a chaos scenario).
	genBefore int32
	// failAt is when a chaos scenario's failure began (zero: none);
	// pauses are its moves' longest waits, for the table.
	failAt time.Time
	pauses []string
	stalls *proctest.Stalls // the stalling volume's server, or nil
	// mixed: the group changes type during the run (the migration
	// scenario); describe asks for either.
	mixed bool
	// slots are the static slot (instance id) each member started with;
	// nextSlot, when set, is the one the next member takes.
	slots    map[int]string
	nextSlot string
}

var nameRE = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// volume is where a run's brokers keep their data.
type volume int

const (
	// localFolder: one temp folder for all three (the default), or, with
	// KAAS_CONFORMANCE_VOLUME=DIR%d, DIR0, DIR1, DIR2: three paths to one
	// shared folder, one per broker (each a mount of a network file
	// system: scripts/cephfs.sh mounts /tmp/ceph/mnt0..2).
	localFolder volume = iota
	// stallingVolume: three mounts of one folder whose calls stall until a
	// 5 s tick when they conflict with another broker's use of the same
	// folder (proctest.StallingVolume).
	stallingVolume
)

// stallTick is the stalling volume's tick: CephFS's default
// mds_tick_interval, the longest stalls measured (docs/volume.md).
const stallTick = 5 * time.Second

// volumeOptions gives the brokers of one run their data dirs.
func volumeOptions(t *testing.T, v volume, name string) (proctest.Options, *proctest.Stalls) {
	switch v {
	case stallingVolume:
		dirs, stalls := proctest.StallingVolume(t, 3, stallTick)
		return proctest.Options{DataDirs: dirs}, stalls
	}
	pattern := os.Getenv("KAAS_CONFORMANCE_VOLUME")
	if pattern == "" {
		return proctest.Options{}, nil
	}
	if !strings.Contains(pattern, "%d") {
		t.Fatalf("KAAS_CONFORMANCE_VOLUME=%q: want a path with %%d for the broker (0, 1, 2)", pattern)
	}
	sub := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	var dirs []string
	for i := range 3 {
		dirs = append(dirs, filepath.Join(fmt.Sprintf(pattern, i), sub))
	}
	if err := os.MkdirAll(dirs[0], 0o755); err != nil {
		t.Fatal(err)
	}
	return proctest.Options{DataDirs: dirs}, nil
}

func newRun(t *testing.T, drv driver, scenario string, v volume) *run {
	name := nameRE.ReplaceAllString(drv.name+"-"+scenario, "_")
	if v == stallingVolume {
		name += "-stalling"
	}
	dir := filepath.Join(out(), name)
	_ = os.RemoveAll(dir)
	opts, stalls := volumeOptions(t, v, name)
	group := "g-" + nameRE.ReplaceAllString(drv.name, "_")
	var c *cluster
	if reference() {
		c = startKafka(t, dir, group)
	} else {
		c = startKaas(t, opts, dir, group)
	}
	r := &run{t: t, drv: drv, c: c, group: group, dir: dir,
		downed: map[int32]bool{}, stalls: stalls,
		began: time.Now(), got: newConsumed(), members: map[int]member{}, committed: map[int32]int64{},
		sampleStop: make(chan struct{}), sampleDone: make(chan struct{})}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs()...), kgo.RetryTimeout(30*time.Second), kgo.ClientID(harnessClient))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r.cl = cl
	r.adm = kadm.NewClient(r.cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.adm.CreateTopic(ctx, parts, c.replicas, nil, topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	plog, err := os.Create(filepath.Join(r.dir, "producer.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plog.Close() })
	prod, err := proctest.StartProducer(c.addrs(), topic, parts, 20*time.Millisecond,
		kgo.WithLogger(kgo.BasicLogger(plog, kgo.LogLevelInfo, func() string { return time.Now().UTC().Format("15:04:05.000 ") })))
	if err != nil {
		t.Fatal(err)
	}
	r.prod = prod
	t.Cleanup(func() { _ = prod.Stop(2 * time.Second) })
	go r.sample()
	t.Cleanup(r.stopSampler)
	t.Cleanup(func() {
		for _, m := range r.members {
			m.kill()
		}
	})
	return r
}

// logf logs with the time since the run started.
func (r *run) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("[%5.1fs] %s", time.Since(r.began).Seconds(), fmt.Sprintf(format, args...))
}

func (r *run) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.logf("%s", s)
	r.notes = append(r.notes, s)
}

func (r *run) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// sample polls the group's committed offsets and records any that went
// backwards.
func (r *run) sample() {
	defer close(r.sampleDone)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.sampleStop:
			return
		case <-tick.C:
		}
		ctx, cancel := r.ctx(3 * time.Second)
		os, err := r.adm.FetchOffsets(ctx, r.group)
		cancel()
		if err != nil {
			continue
		}
		r.smu.Lock()
		os.Each(func(o kadm.OffsetResponse) {
			if o.Err != nil || o.Topic != topic || o.At < 0 {
				return
			}
			if prev, ok := r.committed[o.Partition]; ok && o.At < prev {
				r.regress = append(r.regress, fmt.Sprintf("p%d: %d after %d at %s", o.Partition, o.At, prev, time.Now().Format("15:04:05.000")))
			}
			if o.At > r.committed[o.Partition] {
				r.committed[o.Partition] = o.At
			}
		})
		r.smu.Unlock()
	}
}

func (r *run) stopSampler() {
	select {
	case <-r.sampleStop:
	default:
		close(r.sampleStop)
	}
	<-r.sampleDone
}

// start starts n new members.
func (r *run) start(n int) {
	r.t.Helper()
	r.startWith(r.drv, n)
}

// startWith starts n new members of drv (the migration scenario mixes two
// drivers in one group).
func (r *run) startWith(drv driver, n int) {
	r.t.Helper()
	for range n {
		id := r.next
		r.next++
		slot := fmt.Sprintf("static-%d", r.static)
		r.static++
		if r.nextSlot != "" { // a static member's instance taken over (migration)
			slot, r.nextSlot = r.nextSlot, ""
		}
		if r.slots == nil {
			r.slots = map[int]string{}
		}
		r.slots[id] = slot
		m, err := drv.start(r, id, slot)
		if err != nil {
			r.t.Fatalf("start member %d: %v", id, err)
		}
		r.members[id] = m
	}
}

// quiesce pauses the producer and waits until every acknowledged record
// was consumed, for clients that lose a record polled during shutdown; the
// returned func resumes producing.
func (r *run) quiesce() func() {
	r.t.Helper()
	if !r.drv.quiesce {
		return func() {}
	}
	r.prod.Pause()
	time.Sleep(300 * time.Millisecond) // let produces in flight be answered
	err := proctest.WaitFor(20*time.Second, func() error {
		if miss, n := r.got.missing(r.prod.Ledger.Snapshot()); n > 0 {
			return fmt.Errorf("%d acknowledged records not consumed yet, e.g. %v", n, miss)
		}
		return nil
	})
	if err != nil {
		r.t.Errorf("quiesce before stopping members: %v", err)
	}
	return r.prod.Resume
}

// stopMember asks one member to stop; it must end by itself.
func (r *run) stopMember(id int) {
	r.t.Helper()
	defer r.quiesce()()
	m := r.members[id]
	delete(r.members, id)
	if err := m.stop(45 * time.Second); err != nil {
		r.t.Errorf("member %d did not end by itself: %v", id, err)
	}
}

// stopAll stops every member concurrently.
func (r *run) stopAll() {
	r.t.Helper()
	defer r.quiesce()()
	var wg sync.WaitGroup
	errs := make(chan error, len(r.members))
	for id, m := range r.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.stop(45 * time.Second); err != nil {
				errs <- fmt.Errorf("member %d did not end by itself: %w", id, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		r.t.Error(err)
	}
	r.members = map[int]member{}
}

// describe returns the group as its coordinator describes it.
// groupView is what the checks read of the group: its state and each
// member's partitions of the topic.
type groupView struct {
	State   string
	Members []memberView
}

type memberView struct {
	ID, ClientID string
	Partitions   []int32
	Readable     bool // the assignment could be read
}

// describe describes the group: DescribeGroups for a classic group,
// ConsumerGroupDescribe for a KIP-848 one (Kafka answers DescribeGroups
// for those with "not a classic group").
func (r *run) describe() (groupView, error) {
	ctx, cancel := r.ctx(4 * time.Second)
	defer cancel()
	if r.drv.consumer848 || r.mixed {
		v, err := r.describeConsumer(ctx)
		if !r.mixed || !errors.Is(err, kerr.GroupIDNotFound) {
			return v, err
		}
		// Not a consumer group (yet, or any more): a classic one.
	}
	gs, err := r.adm.DescribeGroups(ctx, r.group)
	if err != nil {
		return groupView{}, err
	}
	g, ok := gs[r.group]
	if !ok {
		return groupView{}, errors.New("group not in DescribeGroups answer")
	}
	v := groupView{State: g.State}
	for _, m := range g.Members {
		mv := memberView{ID: m.MemberID, ClientID: m.ClientID}
		if a, ok := m.Assigned.AsConsumer(); ok {
			mv.Readable = true
			for _, tp := range a.Topics {
				if tp.Topic != topic {
					mv.Partitions = append(mv.Partitions, -1)
					continue
				}
				mv.Partitions = append(mv.Partitions, tp.Partitions...)
			}
		}
		v.Members = append(v.Members, mv)
	}
	return v, g.Err
}

// describeConsumer describes the group with ConsumerGroupDescribe.
func (r *run) describeConsumer(ctx context.Context) (groupView, error) {
	gs, err := r.adm.DescribeConsumerGroups(ctx, r.group)
	if err != nil {
		return groupView{}, err
	}
	g, ok := gs[r.group]
	if !ok {
		return groupView{}, errors.New("group not in ConsumerGroupDescribe answer")
	}
	v := groupView{State: g.State}
	for _, m := range g.Members {
		mv := memberView{ID: m.MemberID, ClientID: m.ClientID, Readable: true}
		for p := range m.Assignment[topic] {
			mv.Partitions = append(mv.Partitions, p)
		}
		for t := range m.Assignment {
			if t != topic {
				mv.Partitions = append(mv.Partitions, -1) // a partition outside the topic
			}
		}
		v.Members = append(v.Members, mv)
	}
	return v, g.Err
}

// waitStable waits until the group is Stable with n members and every
// partition of the topic is owned by exactly one of them.
func (r *run) waitStable(n int, timeout time.Duration) {
	r.t.Helper()
	start := time.Now()
	err := proctest.WaitFor(timeout, func() error {
		g, err := r.describe()
		if err != nil {
			return err
		}
		if g.State != "Stable" || len(g.Members) != n {
			return fmt.Errorf("state %s with %d members, want Stable with %d", g.State, len(g.Members), n)
		}
		owners := map[int32][]string{}
		for _, m := range g.Members {
			if !m.Readable {
				return fmt.Errorf("member %s: assignment is not a consumer assignment", m.ID)
			}
			for _, p := range m.Partitions {
				if p >= 0 {
					owners[p] = append(owners[p], m.ClientID+"/"+m.ID)
				}
			}
		}
		for p := range int32(parts) {
			if len(owners[p]) != 1 {
				return fmt.Errorf("partition %d owned by %d members %v", p, len(owners[p]), owners[p])
			}
		}
		if len(owners) != parts {
			return fmt.Errorf("assigned partitions outside the topic: %v", owners)
		}
		return nil
	})
	if err != nil {
		r.t.Fatalf("group never stable with %d members: %v", n, err)
	}
	r.logf("stable with %d members, every partition owned once (%v)", n, time.Since(start).Round(100*time.Millisecond))
}

// waitEmpty waits until the group has no members.
func (r *run) waitEmpty(timeout time.Duration) {
	r.t.Helper()
	err := proctest.WaitFor(timeout, func() error {
		g, err := r.describe()
		if err != nil {
			return err
		}
		if g.State != "Empty" || len(g.Members) != 0 {
			return fmt.Errorf("state %s with %d members", g.State, len(g.Members))
		}
		return nil
	})
	if err != nil {
		r.t.Fatalf("group never empty: %v", err)
	}
}

// waitConsuming waits until every partition has been consumed at or past
// the acknowledged ends taken at from, and returns how long that took.
func (r *run) waitConsuming(what string, from map[int32]int64, since time.Time, timeout time.Duration) time.Duration {
	r.t.Helper()
	err := proctest.WaitFor(timeout, func() error {
		if b := r.got.behind(from); len(b) > 0 {
			return fmt.Errorf("nothing new consumed on partitions %v", b)
		}
		return nil
	})
	if err != nil {
		r.t.Fatalf("%s: group not consuming again: %v", what, err)
	}
	d := time.Since(since)
	r.logf("%s: consuming again on every partition after %v", what, d.Round(100*time.Millisecond))
	return d
}

// consuming checks that the group consumes new records on every partition.
func (r *run) consuming(what string) {
	r.t.Helper()
	r.waitConsuming(what, r.prod.Ledger.Ends(), time.Now(), 60*time.Second)
}

// listedOnce checks that the union of ListGroups over every live broker
// lists the group exactly once.
func (r *run) listedOnce(timeout time.Duration) {
	r.t.Helper()
	cl := r.cl
	// ListGroups reads the volume (the groups with files, a group's file on
	// first touch): on the stalling volume each read can be held for a
	// tick, so one answer may take two ticks, and the union a few tries.
	perRequest := 3 * time.Second
	if r.stalls != nil {
		perRequest += 2 * stallTick
		timeout = max(timeout, 3*perRequest)
	}
	err := proctest.WaitFor(timeout, func() error {
		n := 0
		var where []int32
		for _, b := range r.c.nodes {
			if !b.running() || b.stopped() {
				continue
			}
			ctx, cancel := r.ctx(perRequest)
			resp, err := cl.Broker(int(b.id())).Request(ctx, kmsg.NewPtrListGroupsRequest())
			cancel()
			if err != nil {
				return fmt.Errorf("ListGroups to broker %d: %w", b.id(), err)
			}
			lr := resp.(*kmsg.ListGroupsResponse)
			if lr.ErrorCode != 0 {
				return fmt.Errorf("ListGroups to broker %d: error %d", b.id(), lr.ErrorCode)
			}
			for _, g := range lr.Groups {
				if g.Group == r.group {
					n++
					where = append(where, b.id())
				}
			}
		}
		if n != 1 {
			return fmt.Errorf("group listed %d times (by brokers %v)", n, where)
		}
		return nil
	})
	if err != nil {
		r.t.Errorf("ListGroups union: %v", err)
	}
}

// committedNow reads the group's committed offsets.
func (r *run) committedNow() map[int32]int64 {
	r.t.Helper()
	ctx, cancel := r.ctx(10 * time.Second)
	defer cancel()
	os, err := r.adm.FetchOffsets(ctx, r.group)
	if err != nil {
		r.t.Fatalf("fetch offsets: %v", err)
	}
	out := map[int32]int64{}
	os.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

// finish stops producing, waits until every acknowledged record was
// consumed, stops the members and runs the end checks.
func (r *run) finish() {
	r.t.Helper()
	if err := r.prod.Stop(45 * time.Second); err != nil {
		r.t.Errorf("producer: %v", err)
	}
	acked := r.prod.Ledger.Snapshot()
	err := proctest.WaitFor(60*time.Second, func() error {
		if miss, n := r.got.missing(acked); n > 0 {
			return fmt.Errorf("%d acknowledged records not consumed, e.g. %v", n, miss)
		}
		return nil
	})
	if err != nil {
		r.t.Errorf("at-least-once: %v", err)
	}
	a, f := r.prod.Ledger.Count()
	r.logf("%d acknowledged records (%d failed produces), all consumed: %v", a, f, err == nil)
	r.listedOnce(20 * time.Second)
	r.logf("listed once")
	// The measured part ends here: members leaving below rebalance the
	// group, which no failure caused.
	r.genEnd, r.endAt = r.generation(), time.Now()
	r.stopAll()
	r.logf("members stopped")
	r.stopSampler()
	r.smu.Lock()
	if len(r.regress) > 0 {
		r.t.Errorf("committed offsets went backwards: %v", r.regress)
	}
	r.smu.Unlock()
}

// ---- scenarios ----

type scenario struct {
	name  string
	run   func(r *run)
	quick []string // the clients that run it in quick mode
}

var scenarios = []scenario{
	{name: "membership", run: membership, quick: []string{"franz-go-cooperative", "kafka-python", "kcat", "java"}},
	{name: "coordinator-kill9", run: coordinatorKill, quick: []string{"franz-go-range", "confluent-kafka-python", "java-848"}},
	{name: "rolling-sigterm", run: rollingRestart},
	{name: "controller-kill9", run: controllerKill},
	{name: "sigstop-coordinator", run: sigstop, quick: []string{"franz-go-static"}},
}

// TestConformance runs every client × scenario in long mode, the quick
// subset otherwise.
func TestConformance(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, drv := range drivers {
				if !long() && !contains(sc.quick, drv.name) {
					continue
				}
				t.Run(drv.name, func(t *testing.T) { runPair(t, sc, drv, localFolder) })
			}
		})
	}
}

// TestConformanceOnAStallingVolume runs the quick pairs (in long mode too:
// each pair there takes twice as long) with each broker on its own mount of
// a volume whose calls
// stall up to 5 s, as CephFS's do (proctest.StallingVolume): the same
// checks, and besides them no broker declared dead that the run did not
// kill or freeze, and no election beyond the first and one per broker
// killed or frozen.
func TestConformanceOnAStallingVolume(t *testing.T) {
	if reference() {
		t.Skip("the stalling volume is kaas's shared folder; the reference cluster keeps a disk per node")
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, drv := range drivers {
				if contains(sc.quick, drv.name) {
					t.Run(drv.name, func(t *testing.T) { runPair(t, sc, drv, stallingVolume) })
				}
			}
		})
	}
}

// runPair runs one client × scenario on a fresh cluster and records it.
func runPair(t *testing.T, sc scenario, drv driver, v volume) {
	start := time.Now()
	res := result{client: drv.name, scenario: sc.name, rebalances: -1}
	if v == stallingVolume {
		res.scenario += " (stalling volume)"
	}
	var r *run
	defer func() {
		res.took = time.Since(start)
		switch {
		case t.Skipped():
			res.status = "skipped"
		case t.Failed():
			res.status = "FAILED"
		default:
			res.status = "passed"
		}
		if r != nil {
			res.failover = r.failover
			if r.genBefore != 0 {
				res.genBefore, res.genAfter = r.genBefore, r.genEnd
				if r.endAt.IsZero() {
					res.genAfter = r.generation()
				}
			}
			res.dups = r.got.duplicates()
			r.tapFigures(&res)
			res.note = strings.Join(r.notes, "; ")
		}
		record(res)
	}()
	drv.need(t)
	r = newRun(t, drv, sc.name, v)
	sc.run(r)
	if v == stallingVolume {
		r.checkLiveness()
	}
}

// checkLiveness reads the brokers' logs: a broker declared dead must have
// been killed, frozen or stopped by the run, and there is one election,
// plus at most one per broker so taken down. Notes the counts and what the
// volume held.
func (r *run) checkLiveness() {
	dead := map[string]int{}
	elections := 0
	r.eachLogLine(func(line logLine) {
		switch {
		case line.Msg == "elected controller":
			elections++
		case line.Msg == "broker health" && line.Health == "dead":
			dead[line.Peer]++
		}
	})
	var falseDeaths []string
	for id, n := range dead {
		var node int32
		if _, err := fmt.Sscanf(id, "kaas-%d", &node); err != nil || !r.downed[node] {
			falseDeaths = append(falseDeaths, fmt.Sprintf("%s (%d log lines)", id, n))
		}
	}
	sort.Strings(falseDeaths)
	r.note("%d elections, brokers logged dead %v; %s", elections, dead, r.stalls)
	if len(falseDeaths) > 0 {
		r.t.Errorf("brokers declared dead that the run did not take down: %v", falseDeaths)
	}
	if elections > 1+len(r.downed) {
		r.t.Errorf("%d controller elections, want at most %d (one, and one per broker taken down)", elections, 1+len(r.downed))
	}
	if r.stalls.Held() == 0 {
		r.t.Errorf("the volume held no call: the run did not test stalls (%s)", r.stalls)
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// membership: 3 members converge; a 4th joins and one leaves; all stop and
// restart and resume from the committed offsets.
func membership(r *run) {
	t := r.t
	r.start(3)
	r.waitStable(3, 60*time.Second)
	r.consuming("3 members")
	r.start(1)
	r.waitStable(4, 60*time.Second)
	r.consuming("4th member joined")
	first := -1
	for id := range r.members {
		if first < 0 || id < first {
			first = id
		}
	}
	r.stopMember(first)
	r.waitStable(3, 60*time.Second)
	r.consuming("one member left")

	r.stopAll()
	r.logf("all members stopped")
	static := r.drv.static
	if !static {
		r.waitEmpty(30 * time.Second)
	}
	committed := r.committedNow()
	r.listedOnce(10 * time.Second)
	r.got.mark()
	if static {
		r.static -= 3 // the same instance ids come back
	}
	r.start(3)
	r.waitStable(3, 60*time.Second)
	err := proctest.WaitFor(30*time.Second, func() error {
		mins := r.got.mins()
		if len(mins) < parts {
			return fmt.Errorf("consumed %d of %d partitions since the restart", len(mins), parts)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	mins := r.got.mins()
	for p := range int32(parts) {
		want, ok := committed[p]
		if !ok || want < 0 {
			want = 0
		}
		switch {
		case mins[p] < want:
			t.Errorf("partition %d: re-read committed records: first offset after restart %d, committed %d", p, mins[p], want)
		case mins[p] > want:
			t.Errorf("partition %d: skipped records: first offset after restart %d, committed %d", p, mins[p], want)
		}
	}
	r.note("resumed at the committed offsets %v", committed)
	r.finish()
}

// chaos starts 3 members, lets the group settle, runs hit (which returns the
// worst kill → consuming-again time), then checks the group settles again.
func chaos(r *run, hit func() time.Duration) {
	r.start(3)
	r.waitStable(3, 60*time.Second)
	r.consuming("before the failure")
	r.genBefore = r.generation()
	r.failAt = time.Now()
	r.failover = hit()
	r.waitStable(3, 90*time.Second)
	r.consuming("after the failure")
	r.finish()
}

// generation is the group's newest generation in the kaas brokers' logs:
// the highest "join phase complete" (a generation formed) or "group
// loaded" (a broker that gained the group restored it) of r.group, or for
// a KIP-848 group its group epoch ("epoch bumped", "consumer group
// loaded"); -1 when none. Against another target it is the newest generation the taps saw
// completed (JoinGroup or SyncGroup answered without error).
func (r *run) generation() int32 {
	if r.c.kaas == nil {
		return r.c.rec.Since(time.Now()).GenAfter
	}
	gen := int32(-1)
	r.eachLogLine(func(line logLine) {
		switch {
		case line.Group != r.group:
		case line.Msg == "join phase complete" || line.Msg == "group loaded":
			gen = max(gen, line.Gen)
		case line.Msg == "consumer group: epoch bumped" || line.Msg == "consumer group loaded":
			gen = max(gen, line.Epoch)
		}
	})
	return gen
}

// logLine is the part of a broker's JSON log line the checks read.
type logLine struct {
	Msg    string `json:"msg"`
	Peer   string `json:"peer"` // "broker health": the broker it is about
	Health string `json:"health"`
	Group  string `json:"group"`
	Gen    int32  `json:"gen"`
	Epoch  int32  `json:"epoch"` // a KIP-848 group's group epoch
}

// eachLogLine calls f with every JSON line of every broker's log (a log
// not yet written is skipped).
func (r *run) eachLogLine(f func(logLine)) {
	if r.c.kaas == nil {
		return
	}
	for _, b := range r.c.kaas.Brokers {
		file, err := os.Open(b.LogPath)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line logLine
			if json.Unmarshal(sc.Bytes(), &line) == nil {
				f(line)
			}
		}
		file.Close()
	}
}

func (r *run) coordinator() int32 {
	r.t.Helper()
	var id int32
	err := proctest.WaitFor(20*time.Second, func() error {
		ctx, cancel := r.ctx(3 * time.Second)
		defer cancel()
		var err error
		id, err = coordinatorOf(ctx, r.adm, r.group)
		return err
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

func (r *run) controller() int32 {
	r.t.Helper()
	var id int32
	err := proctest.WaitFor(20*time.Second, func() error {
		ctx, cancel := r.ctx(3 * time.Second)
		defer cancel()
		var err error
		id, err = r.c.controller(ctx, r.cl)
		return err
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

// killAndRestart kills broker id with -9, measures kill → consuming again,
// then restarts it.
func (r *run) killAndRestart(id int32, what string) time.Duration {
	b := r.c.node(id)
	from := r.prod.Ledger.Ends()
	at := time.Now()
	r.downed[id] = true
	if err := b.kill(); err != nil {
		r.t.Fatal(err)
	}
	d := r.waitConsuming(what, from, at, 90*time.Second)
	r.pause(id, d)
	if err := b.start(); err != nil {
		r.t.Fatal(err)
	}
	r.note("%s (broker %d): failover %v", what, id, d.Round(100*time.Millisecond))
	return d
}

func coordinatorKill(r *run) {
	chaos(r, func() time.Duration {
		return r.killAndRestart(r.coordinator(), "coordinator killed -9")
	})
}

func controllerKill(r *run) {
	chaos(r, func() time.Duration {
		co := r.coordinator()
		ctl := r.controller()
		if ctl == co {
			r.note("controller is also the coordinator")
		}
		return r.killAndRestart(ctl, "controller killed -9")
	})
}

// rollingRestart stops each broker in turn with SIGTERM and starts it again,
// beginning with the group's coordinator and going on in id order, on kaas
// and on the reference alike. Where the coordinator stands in the order
// decides how often the group moves, and a client that rejoins on every
// move rebalances once per move: with the coordinator first, the group
// moves away at its drain and again when the broker it went to drains (on
// Kafka the partition leadership it follows does the same), the most a
// roll can move it. A fixed order of ids would compare a group that moves
// twice on one target with one that moves once on the other.
func rollingRestart(r *run) {
	chaos(r, func() time.Duration {
		var worst time.Duration
		order := rollOrder(r.c.nodes, r.coordinator())
		var ids []string
		for _, b := range order {
			ids = append(ids, fmt.Sprint(b.id()))
		}
		r.note("brokers stopped in the order %s (the coordinator first)", strings.Join(ids, ", "))
		for _, b := range order {
			at := time.Now()
			r.downed[b.id()] = true
			if err := b.terminate(45 * time.Second); err != nil {
				r.t.Fatalf("SIGTERM: %v", err)
			}
			drained := time.Since(at)
			if err := b.start(); err != nil {
				r.t.Fatal(err)
			}
			r.waitConsuming(fmt.Sprintf("broker %d restarted", b.id()), r.prod.Ledger.Ends(), time.Now(), 90*time.Second)
			// The pause is the longest time a partition went without
			// progress from the SIGTERM on: the members consume from the
			// other brokers while this one drains and starts again.
			d, p, began := r.got.longestGap(at, time.Now())
			r.pause(b.id(), d)
			r.note("broker %d: drain %v, longest pause %v (partition %d, %v after the SIGTERM)", b.id(), drained.Round(100*time.Millisecond),
				d.Round(100*time.Millisecond), p, began.Sub(at).Round(100*time.Millisecond))
			worst = max(worst, d)
		}
		return worst
	})
}

// rollOrder is nodes with the broker whose id is first at the front; the
// others keep their order (id order).
func rollOrder(nodes []*tapped, first int32) []*tapped {
	out := make([]*tapped, 0, len(nodes))
	for _, b := range nodes {
		if b.id() == first {
			out = append(out, b)
		}
	}
	for _, b := range nodes {
		if b.id() != first {
			out = append(out, b)
		}
	}
	return out
}

// sigstop freezes the coordinator beyond --dead-after, checks it is no
// longer named coordinator, resumes it, and measures the group consuming
// again (from the freeze): the resumed broker must not keep acting as
// coordinator (the group listed once) or leader (no acked record lost,
// offsets never backwards). Recovery is measured after the resume, as the
// scenario of issue 7 puts it: while the broker stays frozen its TCP
// connections stay open but silent, and how long a client waits on one is
// the client's own read timeout (30 s in sarama, none for segmentio
// kafka-go's coordinator connection), not something the broker controls.
func sigstop(r *run) {
	chaos(r, func() time.Duration {
		id := r.coordinator()
		b := r.c.node(id)
		from := r.prod.Ledger.Ends()
		at := time.Now()
		r.downed[id] = true
		if err := b.stop(); err != nil {
			r.t.Fatal(err)
		}
		// The freeze outlasts the liveness timeout. On the stalling volume
		// the controller's own loop may wait up to a tick before it
		// judges, and its assignment up to one more before another broker
		// reads it: the freeze outlasts those too.
		freeze := r.c.deadAfter + 2*time.Second
		if r.stalls != nil {
			freeze += 2 * stallTick
		}
		time.Sleep(freeze)
		if nc := r.coordinator(); nc == id {
			r.t.Errorf("frozen broker %d still named coordinator after %v", id, time.Since(at))
		}
		if err := b.cont(); err != nil {
			r.t.Fatal(err)
		}
		frozen := time.Since(at)
		d := r.waitConsuming("coordinator frozen and resumed", from, at, 90*time.Second)
		r.pause(id, d)
		r.note("coordinator (broker %d) frozen %v, then resumed: consuming again %v after the freeze", id, frozen.Round(100*time.Millisecond), d.Round(100*time.Millisecond))
		r.listedOnce(20 * time.Second)
		return d
	})
}

// pause records one move's longest wait: from broker id's failure until
// every partition was consumed at or past its acknowledged end at the
// failure (waitConsuming).
func (r *run) pause(id int32, d time.Duration) {
	r.pauses = append(r.pauses, fmt.Sprintf("b%d %v", id, d.Round(100*time.Millisecond)))
}

// The group errors the table counts (Kafka's codes).
const (
	errNotCoordinator    = 16
	errIllegalGeneration = 22
	errUnknownMember     = 25
	errRebalancing       = 27
)

// tapFigures fills res with what the taps saw of the group's answers: since
// the failure (chaos scenarios) or the start (membership). Error codes
// outside the table's columns, and frames the taps could not decode, go
// to the notes.
func (r *run) tapFigures(res *result) {
	from := r.began
	if !r.failAt.IsZero() {
		from = r.failAt
	}
	s := r.c.rec.Between(from, r.endAt)
	res.errs = s.Errors
	if !r.failAt.IsZero() {
		res.rebalances = len(s.Rebalances)
	}
	res.pauses = r.pauses
	var other []string
	for code, n := range s.Errors {
		switch code {
		case errNotCoordinator, errIllegalGeneration, errUnknownMember, errRebalancing:
			continue
		}
		other = append(other, fmt.Sprintf("%s ×%d", errName(code), n))
	}
	sort.Strings(other)
	if len(other) > 0 {
		r.notes = append(r.notes, "other group errors seen: "+strings.Join(other, ", "))
	}
	if n := r.c.decodeFailures(); n > 0 {
		r.notes = append(r.notes, fmt.Sprintf("%d frames the taps could not decode (taps.log)", n))
	}
}

// errName is a Kafka error code's name.
func errName(code int16) string {
	var ke *kerr.Error
	if errors.As(kerr.ErrorForCode(code), &ke) {
		return ke.Message
	}
	return fmt.Sprintf("error %d", code)
}

// coordinatorOf asks the cluster for a group's coordinator.
func coordinatorOf(ctx context.Context, adm *kadm.Client, group string) (int32, error) {
	rs := adm.FindGroupCoordinators(ctx, group)
	c, ok := rs[group]
	if !ok {
		return -1, fmt.Errorf("no FindCoordinator answer for %s", group)
	}
	if c.Err != nil {
		return -1, fmt.Errorf("FindCoordinator %s: %w", group, c.Err)
	}
	return c.NodeID, nil
}
