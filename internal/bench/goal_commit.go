package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/volume"
)

func init() { Register(commitGoal{}) }

// commitGoal measures durable OffsetCommit on the data dir (spec goals 1–4):
// simple commits (generation -1, no member) over the wire, each answered
// after the fsync that covers it, against the durable small-file pattern L
// measured in this run on the same volume.
type commitGoal struct{}

func (commitGoal) Name() string { return "commit" }
func (commitGoal) Describe() string {
	return "durable OffsetCommit: 1-partition p50 vs L, 1000-partition p50 vs L(file of that size) + 1 ms, 64 groups in parallel vs the volume's file ceiling, one hot group with 64 committers vs 5,000/s"
}

// Bounds of the durable commit goals (docs/performance, goals 1–4).
const (
	commitLatencyBound = 1.25   // × L
	commitBigSlack     = 1e-3   // s added to L for the 1000-partition commit
	commitCeilingShare = 0.8    // × the volume's files/s at 8 writers
	hotGroupCommits    = 5000.0 // acknowledged commits/s, one group, 64 committers
	commitTopic        = "bench-commit"
	commitPartitions   = 1000
	parallelGroups     = 64
	clientsPerLoad     = 8         // connections shared by the workers of a parallel loop
	maxGroupOps        = 1_000_000 // per loop, besides its window
)

func (commitGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	const g = "commit"
	lim, err := env.Limits(ctx)
	if err != nil {
		return nil, err
	}
	t := env.Kaas
	kind := "durable"
	if !t.Durable {
		kind = "data dir on tmpfs, not durable"
	}
	window := groupWindow(env)
	if err := CreateTopic(ctx, t, commitTopic, commitPartitions); err != nil {
		return nil, err
	}
	defer dropTopic(ctx, env, t, commitTopic)
	// loops are the rows' loops, run on Kafka after every kaas row (a
	// 1000-partition topic keeps Kafka writing for seconds after it is
	// created: it must not be created while kaas is measured).
	type kafkaLoop struct {
		workers, groups, parts int
		prefix                 string
		rate                   bool // commits/s; else the p50 in µs
	}
	var loops []kafkaLoop
	var rows []Row
	onKafka := func(row Row, workers, groups, parts int, prefix string, rate bool) Row { // row i ↔ loops[i]
		loops = append(loops, kafkaLoop{workers, groups, parts, prefix, rate})
		return row
	}

	// 1. One partition, one committer: p50 against the file pattern.
	lat, _, err := commitLoop(ctx, t, 1, 1, 1, window, "bench-c1")
	if err != nil {
		return rows, err
	}
	p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
	rows = append(rows, onKafka(AtMost(g, fmt.Sprintf("OffsetCommit p50, 1 partition, kaas %s vs L", kind), "µs",
		us(p50), us(lim.FileP50), RefL, commitLatencyBound,
		fmt.Sprintf("L = file pattern p50 (1 KiB, same volume); p99 %s vs L p99 %s; loopback p50 %s; %d commits",
			fmtDur(p99), fmtDur(lim.FileP99), fmtDur(lim.LoopP50), len(lat))), 1, 1, 1, "bench-c1", false))

	// 2. 1000 partitions, one committer: p50 against the file pattern with a
	// file of the size kaas writes for that group.
	lat, _, err = commitLoop(ctx, t, 1, 1, commitPartitions, window, "bench-c1000")
	if err != nil {
		return rows, err
	}
	size := largestGroupFile(t.DataDir)
	if size <= 0 {
		size = 140 << 10
	}
	bigLat, err := filePattern(ctx, filepath.Join(env.DataDir, "limits-big"), int(size), min(window, 2*time.Second))
	if err != nil {
		return rows, err
	}
	bigL := percentile(bigLat, 0.5)
	p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
	rows = append(rows, onKafka(AtMost(g, fmt.Sprintf("OffsetCommit p50, 1000 partitions, kaas %s vs L+1ms", kind), "µs",
		us(p50), us(bigL)+1000, RefL, 1.0,
		fmt.Sprintf("L = file pattern p50 with a %d KB file (the group's file) = %s; p99 %s; %d commits",
			size>>10, fmtDur(bigL), fmtDur(p99), len(lat))), 1, 1, commitPartitions, "bench-c1000", false))

	// 3. 64 groups in parallel: files/s against the volume's ceiling.
	lat, rate, err := commitLoop(ctx, t, parallelGroups, parallelGroups, 1, window, "bench-c64")
	if err != nil {
		return rows, err
	}
	rows = append(rows, onKafka(AtLeast(g, fmt.Sprintf("OffsetCommit, 64 groups in parallel, kaas %s vs L ceiling", kind), "commits/s",
		rate, lim.Files8, RefL, commitCeilingShare,
		fmt.Sprintf("L = file pattern files/s at 8 writers; 1 writer %.0f/s; p50 %s p99 %s; %d commits",
			lim.Files1, fmtDur(percentile(lat, 0.5)), fmtDur(percentile(lat, 0.99)), len(lat))),
		parallelGroups, parallelGroups, 1, "bench-c64", true))

	// 4. One hot group, 64 committers (each on its own partition): coalesced
	// writes, each ack after the fsync that covers it.
	lat, rate, err = commitLoop(ctx, t, parallelGroups, 1, 1, window, "bench-hot")
	if err != nil {
		return rows, err
	}
	rows = append(rows, onKafka(AtLeast(g, fmt.Sprintf("OffsetCommit, 1 group × 64 committers, kaas %s vs 5,000/s", kind), "commits/s",
		rate, hotGroupCommits, RefSpec, 1.0,
		fmt.Sprintf("absolute goal of the spec; %.1f × L files/s at 8 writers; p50 %s p99 %s; %d commits",
			rate/max(lim.Files8, 1), fmtDur(percentile(lat, 0.5)), fmtDur(percentile(lat, 0.99)), len(lat))),
		parallelGroups, 1, 1, "bench-hot", true))
	if env.Kafka != nil {
		withKafkaCommitTopic(ctx, env, func(k Target, err error) {
			for i, l := range loops {
				if err != nil {
					rows[i] = rows[i].WithKafka(0, "", err)
					continue
				}
				lat, r, err := commitLoop(ctx, k, l.workers, l.groups, l.parts, window, l.prefix+"-kafka")
				v := r
				if !l.rate {
					v = us(percentile(lat, 0.5))
				}
				rows[i] = rows[i].WithKafka(v, fmt.Sprintf("p50 %s p99 %s; %d commits",
					fmtDur(percentile(lat, 0.5)), fmtDur(percentile(lat, 0.99)), len(lat)), err)
			}
		})
	}
	return rows, nil
}

// withKafkaCommitTopic runs fn on Kafka with the commit topic created, of
// one replica (a commit goes to __consumer_offsets, replicated as the
// cluster says, whatever the committed topic's replication); err says why
// the topic could not be created. It is called after the kaas
// measurements; the topic is dropped after fn, then Kafka's writes settle.
func withKafkaCommitTopic(ctx context.Context, env *Env, fn func(k Target, err error)) {
	k := *env.Kafka
	k.Replication = 1
	err := CreateTopic(ctx, k, commitTopic, commitPartitions)
	fn(k, err)
	if err == nil {
		dropTopic(ctx, env, k, commitTopic)
	}
	env.Settle()
}

// groupWindow is how long each group measurement runs: the run's duration,
// capped at 2 s so that the full run stays within a few minutes.
func groupWindow(env *Env) time.Duration { return min(env.Duration, 2*time.Second) }

func dropTopic(ctx context.Context, env *Env, t Target, topic string) {
	if err := DeleteTopic(ctx, t, topic); err != nil {
		env.Log.Warn("delete topic", "target", t.Name, "topic", topic, "err", err)
	}
}

// largestGroupFile is the size of the largest group file in a kaas data
// dir (the 1000-partition group's, when it is the largest); 0 if none.
func largestGroupFile(dataDir string) int64 {
	dir := volume.OffsetsDir(dataDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var best int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && fi.Size() > best {
			if n := e.Name(); len(n) > 0 && n[0] != '.' {
				best = fi.Size()
			}
		}
	}
	return best
}

// filePattern measures the durable file pattern with files of size bytes,
// one writer, for window; dir is created and removed.
func filePattern(ctx context.Context, dir string, size int, window time.Duration) ([]time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	var lat []time.Duration
	deadline := time.Now().Add(window)
	for i := 0; i < 10_000 && ctx.Err() == nil && (i < 5 || time.Now().Before(deadline)); i++ {
		t0 := time.Now()
		if _, err := writeRenameSync(dir, 0, nil, data); err != nil {
			return nil, fmt.Errorf("bench: file pattern: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, ctx.Err()
}

// --- the group load generator, shared by the group goals ---

// openClients opens n clients against t with the same options for every
// target.
func openClients(t Target, n int) ([]*kgo.Client, error) {
	cls := make([]*kgo.Client, 0, n)
	for range n {
		cl, err := kgo.NewClient(ClientOpts(t)...)
		if err != nil {
			closeClients(cls)
			return nil, fmt.Errorf("bench: client for %s: %w", t.Name, err)
		}
		cls = append(cls, cl)
	}
	return cls, nil
}

func closeClients(cls []*kgo.Client) {
	var wg sync.WaitGroup
	for _, cl := range cls {
		wg.Go(cl.Close)
	}
	wg.Wait()
}

// simpleCommit is an OffsetCommit of parts partitions of topic for group,
// generation -1 and no member: a simple (admin-style) commit.
func simpleCommit(group, topic string, first, parts int) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = group
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	for p := first; p < first+parts; p++ {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition = int32(p)
		rp.LeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = []kmsg.OffsetCommitRequestTopic{rt}
	return req
}

// setOffsets makes every partition of req commit off, so that no commit
// repeats the previous one.
func setOffsets(req *kmsg.OffsetCommitRequest, off int64) {
	for i := range req.Topics {
		for j := range req.Topics[i].Partitions {
			req.Topics[i].Partitions[j].Offset = off
		}
	}
}

// doCommit sends req and fails on any partition error.
func doCommit(ctx context.Context, cl *kgo.Client, req *kmsg.OffsetCommitRequest) error {
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("commit %s %s[%d]: %w", req.Group, t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}

// fetchReq is an OffsetFetch of partitions 0..parts-1 of topic for group.
func fetchReq(group, topic string, parts int) *kmsg.OffsetFetchRequest {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range parts {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
	return req
}

// doFetch sends req and fails on any error; it returns the partitions
// answered with an offset.
func doFetch(ctx context.Context, cl *kgo.Client, req *kmsg.OffsetFetchRequest) (int, error) {
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, err
	}
	// kgo answers in both shapes (top-level topics and per-group); count
	// the per-group shape when there is one.
	ts := resp.Topics
	for _, g := range resp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return 0, err
		}
		ts = nil
		for _, t := range g.Topics {
			ft := kmsg.OffsetFetchResponseTopic{Topic: t.Topic}
			for _, p := range t.Partitions {
				ft.Partitions = append(ft.Partitions, kmsg.OffsetFetchResponseTopicPartition{
					Partition: p.Partition, Offset: p.Offset, ErrorCode: p.ErrorCode})
			}
			ts = append(ts, ft)
		}
	}
	n := 0
	for _, t := range ts {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, err
			}
			if p.Offset >= 0 {
				n++
			}
		}
	}
	return n, nil
}

// hammer runs op from workers goroutines for window (and at most maxGroupOps
// operations in all), after one untimed warm-up call per worker, and returns
// every timed operation's latency and the operations/s.
func hammer(ctx context.Context, workers int, window time.Duration, op func(ctx context.Context, w, i int) error) ([]time.Duration, float64, error) {
	ctx, cancel := context.WithTimeout(ctx, window+30*time.Second)
	defer cancel()
	var (
		mu    sync.Mutex // guards all, first
		all   []time.Duration
		first error
		wg    sync.WaitGroup
		ops   atomic.Int64
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	// Warm up: connections, coordinator lookups, the group loaded.
	for w := range workers {
		wg.Go(func() {
			if err := op(ctx, w, 0); err != nil {
				fail(fmt.Errorf("bench: warm-up: %w", err))
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, 0, first
	}
	start := time.Now()
	deadline := start.Add(window)
	for w := range workers {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 1024)
			for i := 1; ctx.Err() == nil && time.Now().Before(deadline) && ops.Add(1) <= maxGroupOps; i++ {
				t0 := time.Now()
				if err := op(ctx, w, i); err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					break
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return nil, 0, first
	}
	if len(all) == 0 {
		return nil, 0, errors.New("bench: no operation completed")
	}
	return all, float64(len(all)) / elapsed.Seconds(), nil
}

// commitLoop runs workers committers against groups groups (worker w on
// group w % groups, and within a group on its own partitions), each commit
// of parts partitions of commitTopic, for window. Workers share
// min(workers, clientsPerLoad) clients.
func commitLoop(ctx context.Context, t Target, workers, groups, parts int, window time.Duration, prefix string) ([]time.Duration, float64, error) {
	cls, err := openClients(t, min(workers, clientsPerLoad))
	if err != nil {
		return nil, 0, err
	}
	defer closeClients(cls)
	reqs := make([]*kmsg.OffsetCommitRequest, workers)
	for w := range workers {
		first := 0
		if groups < workers { // several committers on one group: disjoint partitions
			first = (w / groups * parts) % commitPartitions
		}
		reqs[w] = simpleCommit(fmt.Sprintf("%s-%d", prefix, w%groups), commitTopic, first, parts)
	}
	return hammer(ctx, workers, window, func(ctx context.Context, w, i int) error {
		setOffsets(reqs[w], int64(i))
		return doCommit(ctx, cls[w%len(cls)], reqs[w])
	})
}
