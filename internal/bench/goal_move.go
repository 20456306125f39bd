package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/cluster"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/node"
)

func init() { Register(moveGoal{}) }

// moveGoal measures what a group's members see when coordinators move on a
// cluster that stays up (issue 14): three kaas brokers in this process
// over one scratch dir, default liveness timings, initial rebalance delay 0.
//
// The pause row: one franz-go consumer-group member (default session and
// heartbeat, autocommit) reads a 6-partition topic that a producer writes
// one record to every 5 ms, round robin over the partitions. Its group's
// coordinator is drained (node.Shutdown, the SIGTERM path), and the row is
// the longest gap between two consecutive records the member receives on
// any one partition, over the gaps that reach into the window from the
// drain's start until the member has heartbeated and committed once more
// after its end (6 s; 0.5 s in the quick test); against 1 s. The drain is
// repeated (the drained broker restarts on its address, then the group's
// new coordinator drains); the row is the worst, the note gives the median.
// The member must keep its member id and generation: a change makes the
// row unmet whatever the pause.
//
// The rebalance row: 100 groups of one franz-go member each settle, then
// every broker in turn drains and restarts on the same id, data dir and
// address; the row counts the groups whose generation and member id
// survived, against all of them (target: no rebalance at all).
type moveGoal struct{}

func (moveGoal) Name() string { return "move" }
func (moveGoal) Describe() string {
	return "move: longest pause in consumption a franz-go member sees when its group's coordinator drains (SIGTERM path) vs 1 s; groups that keep generation and member id through a rolling restart of 3 brokers (100 one-member groups) vs all"
}

const (
	movePartitions  = 6
	moveEvery       = 5 * time.Millisecond // one record per tick, round robin
	moveMaxRecords  = 60_000               // the producer's bound: 5 minutes at moveEvery
	movePauseBound  = time.Second
	moveRecent      = 300 * time.Millisecond // "steady": every partition delivered within this
	moveStartLimit  = 30 * time.Second
	moveSettleLimit = 30 * time.Second
	moveHeartbeat   = 3 * time.Second // franz-go's default heartbeat interval
	moveAutocommit  = 5 * time.Second // franz-go's default autocommit interval
)

func (moveGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	quick := env.Duration < time.Second // the quick test
	c, err := startMoveCluster(env)
	if err != nil {
		return nil, err
	}
	defer c.close()
	row, err := c.measurePause(ctx, quick)
	if err != nil {
		return nil, fmt.Errorf("bench: move pause: %w", err)
	}
	rows := []Row{row}
	row, err = c.measureRollingRestart(ctx, quick)
	if err != nil {
		return rows, fmt.Errorf("bench: move rolling restart: %w", err)
	}
	return append(rows, row), nil
}

// moveCluster is three in-process brokers over one scratch dir whose
// addresses stay fixed across restarts. Its fields are owned by the goal's
// goroutine (startMoveCluster's parallel starts write distinct elements and
// hand over through a channel).
type moveCluster struct {
	env   *Env
	dir   string
	gc    group.Config
	nodes []*node.Node // nil while down
	addrs []string     // each broker's listener, fixed by its first start
}

func startMoveCluster(env *Env) (*moveCluster, error) {
	dir, err := env.ScratchDir(false, "kaas-move-")
	if err != nil {
		return nil, err
	}
	c := &moveCluster{env: env, dir: dir, gc: group.DefaultConfig(),
		nodes: make([]*node.Node, 3), addrs: make([]string, 3)}
	c.gc.InitialRebalanceDelay = 0
	errs := make(chan error, len(c.nodes))
	for i := range c.nodes {
		go func() { errs <- c.start(i) }()
	}
	var first error
	for range c.nodes {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		c.close()
		return nil, first
	}
	return c, nil
}

// start starts broker i on its fixed address (any free port the first
// time). The port of a broker that just stopped is normally free at once
// (Go listeners set SO_REUSEADDR); a bind that still fails is retried for
// up to 5 s before it is an error.
func (c *moveCluster) start(i int) error {
	listen := c.addrs[i]
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	var err error
	for try := 0; try < 10; try++ {
		var n *node.Node
		n, err = node.Start(node.Config{Broker: broker.Config{ID: int32(i), DataDir: c.dir, Listen: listen,
			Logger: c.env.Log.With("target", fmt.Sprintf("kaas-move-%d", i))},
			Group: &c.gc, ReadyTimeout: moveStartLimit})
		if err == nil {
			c.nodes[i], c.addrs[i] = n, n.Addr()
			return nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("start broker %d on %s: %w", i, listen, err)
}

// drain is the SIGTERM path of broker i; it returns how long it took.
func (c *moveCluster) drain(ctx context.Context, i int) (time.Duration, error) {
	n := c.nodes[i]
	c.nodes[i] = nil
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := n.Shutdown(sctx); err != nil {
		return 0, fmt.Errorf("drain broker %d: %w", i, err)
	}
	return time.Since(t0), nil
}

// restart starts broker i again on its address and waits until the
// cluster is settled with it.
func (c *moveCluster) restart(ctx context.Context, i int) error {
	if err := c.start(i); err != nil {
		return err
	}
	return c.waitSettled(ctx)
}

// settled reports whether every broker is up, alive in the newest
// assignment, and has applied it.
func (c *moveCluster) settled() bool {
	var ref *cluster.Assignment
	for _, n := range c.nodes {
		if n == nil {
			return false
		}
		cur := n.Runtime.Current()
		if cur == nil {
			return false
		}
		if ref == nil {
			ref = cur
		} else if cur.ControllerEpoch != ref.ControllerEpoch || cur.AssignmentVersion != ref.AssignmentVersion {
			return false
		}
	}
	alive := 0
	for _, row := range ref.Brokers {
		if row.Health == cluster.Alive {
			alive++
		}
	}
	if alive != len(c.nodes) {
		return false
	}
	for _, n := range c.nodes {
		if !n.Runtime.Settled(ref) {
			return false
		}
	}
	return true
}

func (c *moveCluster) waitSettled(ctx context.Context) error {
	return pollUntil(ctx, moveSettleLimit, 50*time.Millisecond, func() error {
		if !c.settled() {
			return errors.New("cluster not settled")
		}
		return nil
	})
}

// coordinator returns the broker every running broker names as group's
// coordinator.
func (c *moveCluster) coordinator(groupID string) (int, error) {
	at := -1
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		b, err := n.Broker.Coordinator().FindGroup(groupID)
		if err != nil {
			return -1, err
		}
		if at >= 0 && int(b.NodeID) != at {
			return -1, fmt.Errorf("brokers disagree on the coordinator of %s", groupID)
		}
		at = int(b.NodeID)
	}
	if at < 0 {
		return -1, errors.New("no broker running")
	}
	return at, nil
}

func (c *moveCluster) controller() int {
	for i, n := range c.nodes {
		if n != nil && n.Runtime.IsController() {
			return i
		}
	}
	return -1
}

func (c *moveCluster) close() {
	for i, n := range c.nodes {
		if n != nil {
			n.Kill()
			c.nodes[i] = nil
		}
	}
}

func (c *moveCluster) createTopic(ctx context.Context, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// pollUntil calls cond every tick until it returns nil, for at most limit.
func pollUntil(ctx context.Context, limit, tick time.Duration, cond func() error) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("after %v: %w", limit, err)
		case <-t.C:
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// drainRep is one drain of the member's coordinator.
type drainRep struct {
	victim     int
	controller bool // the victim also held the controller role
	pause      time.Duration
	open       bool // the longest gap had not closed when the wait ended
	partition  int32
	drain      time.Duration
	retried    map[string]int // what the member's client retried, by error (kgoLog)
	before     [2]string      // member id, generation
	after      [2]string
}

func (r drainRep) kept() bool { return r.before == r.after }

func (c *moveCluster) measurePause(ctx context.Context, quick bool) (Row, error) {
	const topic = "bench-move"
	// The window runs on past the drain's end until the member has
	// heartbeated and committed at least once more (to the new coordinator).
	reps, after := 3, max(moveHeartbeat, moveAutocommit)+time.Second
	if quick {
		reps, after = 1, 500*time.Millisecond
	}
	if err := c.createTopic(ctx, topic, movePartitions); err != nil {
		return Row{}, err
	}
	// A group whose coordinator is not the controller: the first drain
	// measures a coordinator's hand-off, not the controller's.
	ctrl := c.controller()
	var groupID string
	for i := 0; groupID == "" && i < 10_000; i++ {
		id := fmt.Sprintf("bench-move-%d", i)
		if at, err := c.coordinator(id); err == nil && at != ctrl {
			groupID = id
		}
	}
	if groupID == "" {
		return Row{}, fmt.Errorf("no group id coordinated by a broker other than the controller (%d)", ctrl)
	}

	pctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopLoad()

	prod, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return Row{}, err
	}
	defer prod.Close()
	var produceErrs atomic.Int64
	var produceErr atomic.Value // the first error
	wg.Go(func() {
		t := time.NewTicker(moveEvery)
		defer t.Stop()
		for i := 0; i < moveMaxRecords; i++ {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			rec := &kgo.Record{Partition: int32(i % movePartitions), Value: fmt.Appendf(nil, "%d", i)}
			prod.Produce(pctx, rec, func(_ *kgo.Record, err error) {
				if err != nil && pctx.Err() == nil {
					produceErrs.Add(1)
					produceErr.CompareAndSwap(nil, err)
				}
			})
		}
	})

	klog := newKgoLog()
	member, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic),
		kgo.WithLogger(klog))
	if err != nil {
		return Row{}, err
	}
	defer member.Close()
	arr := newArrivals(movePartitions)
	var fetchErrs errCounts
	wg.Go(func() {
		pollLoop(pctx, member, &fetchErrs, func(now time.Time, p kgo.FetchTopicPartition) { arr.add(p.Partition, now) })
	})

	steady := func() error {
		hold := time.Second
		if quick {
			hold = moveRecent
		}
		var since time.Time
		return pollUntil(ctx, moveStartLimit, 50*time.Millisecond, func() error {
			now := time.Now()
			if p, ok := arr.stale(now, moveRecent); ok {
				since = time.Time{}
				return fmt.Errorf("partition %d delivered nothing in the last %v (produce errors %d, first %v)",
					p, moveRecent, produceErrs.Load(), produceErr.Load())
			}
			if since.IsZero() {
				since = now
			}
			if now.Sub(since) < hold {
				return errors.New("not steady long enough")
			}
			return nil
		})
	}
	metadata := func() [2]string {
		id, gen := member.GroupMetadata()
		return [2]string{id, fmt.Sprint(gen)}
	}

	var runs []drainRep
	for rep := range reps {
		if err := steady(); err != nil {
			return Row{}, fmt.Errorf("member not consuming steadily before drain %d: %w", rep+1, err)
		}
		victim, err := c.coordinator(groupID)
		if err != nil {
			return Row{}, err
		}
		r := drainRep{victim: victim, controller: victim == c.controller(), before: metadata()}
		t0 := time.Now()
		if r.drain, err = c.drain(ctx, victim); err != nil {
			return Row{}, err
		}
		end := time.Now().Add(after)
		if err := sleepCtx(ctx, after); err != nil {
			return Row{}, err
		}
		// Every gap reaching into the window closes at the partition's
		// next record; wait for those (bounded: an open gap counts up to
		// the end of the wait).
		_ = pollUntil(ctx, 10*time.Second, 20*time.Millisecond, func() error {
			if p, ok := arr.silentSince(end); ok {
				return fmt.Errorf("partition %d", p)
			}
			return nil
		})
		r.pause, r.partition, r.open = arr.longestGap(t0, end, time.Now())
		r.retried = klog.retriedIn(t0, time.Now())
		r.after = metadata()
		runs = append(runs, r)
		if r.pause > movePauseBound || !r.kept() {
			klog.dump(c.env, t0.Add(-time.Second), time.Now(), fmt.Sprintf("drain %d", rep+1))
		}
		if err := c.restart(ctx, victim); err != nil {
			return Row{}, err
		}
	}

	pauses := make([]time.Duration, len(runs))
	for i, r := range runs {
		pauses[i] = r.pause
	}
	worst := slices.Max(pauses)
	slices.Sort(pauses)
	kept := true
	var parts []string
	for i, r := range runs {
		kept = kept && r.kept()
		role := ""
		if r.controller {
			role = ", also the controller"
		}
		open := ""
		if r.open {
			open = " (still open)"
		}
		parts = append(parts, fmt.Sprintf("drain %d: broker %d%s, drain took %s, pause %s on partition %d%s, member %s gen %s → %s gen %s, kgo retried %s",
			i+1, r.victim, role, r.drain.Round(time.Millisecond), r.pause.Round(time.Millisecond), r.partition, open,
			r.before[0], r.before[1], r.after[0], r.after[1], fmtCounts(r.retried)))
	}
	note := fmt.Sprintf("worst of %d drains, median %s; 3 in-process brokers, default liveness; one record every %v round robin over %d partitions; %s",
		len(runs), pauses[len(pauses)/2].Round(time.Millisecond), moveEvery, movePartitions, strings.Join(parts, "; "))
	if !kept {
		note = "MEMBER ID OR GENERATION CHANGED (row unmet); " + note
	}
	if fe := fetchErrs.String(); fe != "none" {
		note += "; errors returned by the member's polls: " + fe
	}
	if n := produceErrs.Load(); n > 0 {
		note += fmt.Sprintf("; %d produce errors, first: %v", n, produceErr.Load())
	}
	row := AtMost("move", "move: longest pause in consumption when the member's coordinator drains (SIGTERM), vs 1 s",
		"ms", float64(worst.Milliseconds()), float64(movePauseBound.Milliseconds()), RefSpec, 1.0, note)
	row.Met = row.Met && kept
	return row, nil
}

// measureRollingRestart settles one-member groups, restarts every broker in
// turn (drain, start on the same address) and counts the groups whose
// member kept its id and generation.
func (c *moveCluster) measureRollingRestart(ctx context.Context, quick bool) (Row, error) {
	const topic = "bench-move-roll"
	groups := 100
	if quick {
		groups = 10
	}
	if err := c.createTopic(ctx, topic, 3); err != nil {
		return Row{}, err
	}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	var lost, manageErrs atomic.Int64
	var fetchErrs errCounts
	hook := manageErrHook{n: &manageErrs}
	cls := make([]*kgo.Client, groups)
	defer func() {
		for _, cl := range cls {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	for i := range cls {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.ConsumerGroup(fmt.Sprintf("bench-move-roll-%d", i)),
			kgo.ConsumeTopics(topic), kgo.WithHooks(hook),
			kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) { lost.Add(1) }))
		if err != nil {
			return Row{}, err
		}
		cls[i] = cl
		wg.Go(func() { pollLoop(pctx, cl, &fetchErrs, nil) })
	}
	type meta struct {
		id  string
		gen int32
	}
	snapshot := func() []meta {
		ms := make([]meta, len(cls))
		for i, cl := range cls {
			ms[i].id, ms[i].gen = cl.GroupMetadata()
		}
		return ms
	}
	// settled: every member holds a generation, unchanged over a second.
	settle := func() ([]meta, error) {
		var prev []meta
		var out []meta
		err := pollUntil(ctx, 60*time.Second, time.Second, func() error {
			cur := snapshot()
			defer func() { prev = cur }()
			for i, m := range cur {
				if m.id == "" || m.gen <= 0 {
					return fmt.Errorf("group %d has no generation yet", i)
				}
			}
			if !slices.Equal(prev, cur) {
				return errors.New("generations still changing")
			}
			out = cur
			return nil
		})
		return out, err
	}
	before, err := settle()
	if err != nil {
		return Row{}, fmt.Errorf("%d groups did not settle: %w", groups, err)
	}
	lost0, errs0 := lost.Load(), manageErrs.Load()
	var drains []string
	for i := range c.nodes {
		d, err := c.drain(ctx, i)
		if err != nil {
			return Row{}, err
		}
		if err := c.restart(ctx, i); err != nil {
			return Row{}, err
		}
		drains = append(drains, d.Round(time.Millisecond).String())
	}
	// A rebalance the restart caused surfaces at a member's next
	// heartbeat: give every member one, then wait until they are settled.
	if err := sleepCtx(ctx, moveHeartbeat+time.Second); err != nil {
		return Row{}, err
	}
	afterMeta, err := settle()
	if err != nil {
		return Row{}, fmt.Errorf("groups did not settle after the restart: %w", err)
	}
	kept, rebalances, idChanged := 0, 0, 0
	for i := range before {
		b, a := before[i], afterMeta[i]
		rebalances += int(a.gen - b.gen)
		if a.id != b.id {
			idChanged++
		}
		if a == b {
			kept++
		}
	}
	note := fmt.Sprintf("target 0 rebalances, shown as groups kept / groups (met iff all kept); rebalances %d (sum of generation increments), member ids changed %d, partitions lost (kgo OnPartitionsLost) %d, group session errors (kgo HookGroupManageError) %d; %d one-member franz-go groups (default session and heartbeat) on a 3-partition topic; brokers 0, 1, 2 drained and restarted on the same address in turn, drains took %s",
		rebalances, idChanged, lost.Load()-lost0, manageErrs.Load()-errs0, groups, strings.Join(drains, ", "))
	if fe := fetchErrs.String(); fe != "none" {
		note += "; errors returned by the members' polls: " + fe
	}
	return AtLeast("move", fmt.Sprintf("move: rolling restart of 3 brokers, %d one-member groups: groups with no rebalance (generation and member id kept)", groups),
		"groups", float64(kept), float64(groups), RefSpec, 1.0, note), nil
}

// pollLoop polls cl until ctx ends, handing each partition's records to
// got (if not nil) with the time the poll returned. A poll that returns no
// records (errors only: a broker going away, say) is followed by a 20 ms
// pause, so that a client whose polls keep failing does not spin and starve
// the brokers of this process of CPU.
func pollLoop(ctx context.Context, cl *kgo.Client, errs *errCounts, got func(time.Time, kgo.FetchTopicPartition)) {
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		now := time.Now()
		records := false
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				records = true
				if got != nil {
					got(now, p)
				}
			}
		})
		if ctx.Err() != nil {
			return
		}
		for _, e := range fs.Errors() {
			errs.add(e.Err)
		}
		if !records {
			_ = sleepCtx(ctx, 20*time.Millisecond)
		}
	}
}

// errCounts counts errors by their text. Guarded by mu.
type errCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *errCounts) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[err.Error()]++
}

// String lists the counts, most frequent first, at most five; "none".
func (c *errCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.n) == 0 {
		return "none"
	}
	keys := slices.Collect(maps.Keys(c.n))
	slices.SortFunc(keys, func(a, b string) int { return c.n[b] - c.n[a] })
	var out []string
	for i, k := range keys {
		if i == 5 {
			out = append(out, fmt.Sprintf("%d more kinds", len(keys)-5))
			break
		}
		out = append(out, fmt.Sprintf("%q×%d", k, c.n[k]))
	}
	return strings.Join(out, ", ")
}

// manageErrHook counts the errors that ended a client's group session.
type manageErrHook struct{ n *atomic.Int64 }

func (h manageErrHook) OnGroupManageError(error) { h.n.Add(1) }

// arrivals records when the member's poll loop was handed records of each
// partition. Guarded by mu: the poll loop adds, the goal reads.
type arrivals struct {
	mu sync.Mutex
	at [][]time.Time // per partition, in order
}

func newArrivals(partitions int) *arrivals {
	return &arrivals{at: make([][]time.Time, partitions)}
}

func (a *arrivals) add(p int32, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if int(p) < len(a.at) && len(a.at[p]) < 2*moveMaxRecords {
		a.at[p] = append(a.at[p], t)
	}
}

// stale returns a partition with no arrival within d before now.
func (a *arrivals) stale(now time.Time, d time.Duration) (int32, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p, ts := range a.at {
		if len(ts) == 0 || now.Sub(ts[len(ts)-1]) > d {
			return int32(p), true
		}
	}
	return 0, false
}

// silentSince returns a partition with no arrival after t.
func (a *arrivals) silentSince(t time.Time) (int32, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p, ts := range a.at {
		if len(ts) == 0 || !ts[len(ts)-1].After(t) {
			return int32(p), true
		}
	}
	return 0, false
}

func (a *arrivals) longestGap(from, to, now time.Time) (time.Duration, int32, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var best time.Duration
	var bestP int32
	var bestOpen bool
	for p, ts := range a.at {
		g, open := longestGap(ts, from, to, now)
		if g > best {
			best, bestP, bestOpen = g, int32(p), open
		}
	}
	return best, bestP, bestOpen
}

// longestGap returns the longest interval between consecutive times in ts
// (ascending) that overlaps [from, to], including the one that straddles
// from. An interval the last time in ts opens and nothing closes by now
// counts up to now (open is then true); so does a partition with no time
// at all before to, counted from from.
func longestGap(ts []time.Time, from, to, now time.Time) (gap time.Duration, open bool) {
	prev := time.Time{}
	for _, t := range ts {
		if !prev.IsZero() && t.After(from) && prev.Before(to) {
			gap = max(gap, t.Sub(prev))
		}
		prev = t
	}
	switch {
	case prev.IsZero():
		return now.Sub(from), true
	case prev.Before(to) && now.Sub(prev) > gap:
		return now.Sub(prev), true
	}
	return gap, false
}

// kgoLog is the member client's kgo logger at debug level. It keeps the
// last lines in a bounded ring, for the bench log when a drain misses its
// bound, and what kgo retried: the answers it retried a request on (its
// "retrying request" line), by error, and the offset or epoch loads that
// failed (its "handled … results" line; kgo reloads them after 1 s).
// Guarded by mu.
type kgoLog struct {
	mu      sync.Mutex
	lines   []kgoLine // ring of kgoLogLines
	next    int
	retried []kgoRetry // bounded by kgoLogLines too
}

const kgoLogLines = 20_000

type kgoLine struct {
	at   time.Time
	line string
}

type kgoRetry struct {
	at   time.Time
	what string // the Kafka error's name, "connection error", or "epoch load failed"
}

func newKgoLog() *kgoLog { return &kgoLog{} }

func (l *kgoLog) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (l *kgoLog) Log(level kgo.LogLevel, msg string, kv ...any) {
	now := time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", level, msg)
	var retry []string
	answer, connErr := "", false // of a "retrying request" line
	for i := 0; i+1 < len(kv); i += 2 {
		v := fmt.Sprint(kv[i+1])
		fmt.Fprintf(&b, " %v=%s", kv[i], v)
		// "handled epoch results" / "handled list results": partitions
		// whose offset or epoch load failed are retried after 1 s.
		if strings.HasPrefix(msg, "handled ") && kv[i] == "reloading" && v != "map[]" {
			retry = append(retry, strings.TrimSuffix(strings.TrimPrefix(msg, "handled "), " results")+" load failed")
		}
		if msg != "retrying request" || (kv[i] != "response_error" && kv[i] != "request_error") {
			continue
		}
		if err, ok := kv[i+1].(error); ok && err != nil {
			var ke *kerr.Error
			if errors.As(err, &ke) {
				answer = ke.Message
			} else {
				connErr = true // a dial or read error, not an answer
			}
		}
	}
	switch {
	case answer != "":
		retry = append(retry, answer)
	case connErr:
		retry = append(retry, "connection error")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	line := kgoLine{at: now, line: b.String()}
	if len(l.lines) < kgoLogLines {
		l.lines = append(l.lines, line)
	} else {
		l.lines[l.next] = line
		l.next = (l.next + 1) % kgoLogLines
	}
	for _, w := range retry {
		if len(l.retried) < kgoLogLines {
			l.retried = append(l.retried, kgoRetry{at: now, what: w})
		}
	}
}

// retriedIn counts the retried answers logged in [from, to].
func (l *kgoLog) retriedIn(from, to time.Time) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, r := range l.retried {
		if !r.at.Before(from) && !r.at.After(to) {
			out[r.what]++
		}
	}
	return out
}

// dump writes the lines logged in [from, to] to the bench log.
func (l *kgoLog) dump(env *Env, from, to time.Time, what string) {
	l.mu.Lock()
	lines := append(slices.Clone(l.lines[l.next:]), l.lines[:l.next]...)
	l.mu.Unlock()
	for _, ln := range lines {
		if !ln.at.Before(from) && !ln.at.After(to) {
			env.Log.Warn("move: member's kgo log", "drain", what, "at", ln.at.Format("15:04:05.000000"), "line", ln.line)
		}
	}
}

// fmtCounts formats counts by name, sorted: "NOT_COORDINATOR×1, …" or "none".
func fmtCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(out, ", ")
}
