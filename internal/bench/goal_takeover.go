package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/node"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/kaas-dev/kaas/internal/volume"
)

func init() { Register(takeoverGoal{}) }

// takeoverGoal measures what a broker gaining groups pays (spec goal 10),
// on the data dir:
//
//   - a moved group: broker A commits 1000 partitions for a few groups and
//     stops; broker B starts on the same volume and serves each group's
//     first request (an OffsetFetch of its 1000 partitions, loaded from the
//     group file on first touch); the slowest first request is reported.
//   - readiness: a volume holding 10k group files (written through the
//     offsets store without fsync, to save time); the time from broker.New
//     to the first answered request. Groups load lazily, so no file is read.
type takeoverGoal struct{}

func (takeoverGoal) Name() string { return "takeover" }
func (takeoverGoal) Describe() string {
	return "takeover: first OffsetFetch of a moved 1000-partition group on the new coordinator (≤ 10 ms); broker ready over 10k group files (≤ 1 s)"
}

const (
	takeoverFirstMs = 10
	takeoverReadyMs = 1000
	movedGroups     = 5
)

func (takeoverGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	const g = "takeover"
	files := 10_000
	if env.Duration < time.Second { // the quick test
		files = 1000
	}
	var rows []Row

	// A moved group's first request.
	dir, err := env.ScratchDir(false, "kaas-takeover-")
	if err != nil {
		return nil, err
	}
	a, stopA, err := startBroker(ctx, env, dir)
	if err != nil {
		return nil, err
	}
	if err := CreateTopic(ctx, a, commitTopic, commitPartitions); err != nil {
		stopA()
		return nil, err
	}
	cls, err := openClients(a, 1)
	if err != nil {
		stopA()
		return nil, err
	}
	for i := range movedGroups {
		req := simpleCommit(fmt.Sprintf("bench-moved-%d", i), commitTopic, 0, commitPartitions)
		setOffsets(req, 7)
		if err := doCommit(ctx, cls[0], req); err != nil {
			closeClients(cls)
			stopA()
			return nil, err
		}
	}
	closeClients(cls)
	stopA()
	b, stopB, err := startBroker(ctx, env, dir)
	if err != nil {
		return nil, err
	}
	defer stopB()
	if cls, err = openClients(b, 1); err != nil {
		return nil, err
	}
	defer closeClients(cls)
	if _, err := doFetch(ctx, cls[0], fetchReq("bench-unrelated", commitTopic, 1)); err != nil { // connect, route
		return nil, err
	}
	var firsts []time.Duration
	for i := range movedGroups {
		t0 := time.Now()
		n, err := doFetch(ctx, cls[0], fetchReq(fmt.Sprintf("bench-moved-%d", i), commitTopic, commitPartitions))
		if err != nil {
			return nil, err
		}
		if n != commitPartitions {
			return nil, fmt.Errorf("bench: moved group: fetched %d offsets, want %d", n, commitPartitions)
		}
		firsts = append(firsts, time.Since(t0))
	}
	// The same request once the group is resident: the cost of the request
	// itself, for comparison.
	t0 := time.Now()
	if _, err := doFetch(ctx, cls[0], fetchReq("bench-moved-0", commitTopic, commitPartitions)); err != nil {
		return nil, err
	}
	warm := time.Since(t0)
	slices.Sort(firsts)
	kind := "durable"
	if !b.Durable {
		kind = "data dir on tmpfs"
	}
	rows = append(rows, AtMost(g, fmt.Sprintf("takeover: first OffsetFetch of a moved 1000-partition group, kaas %s", kind), "ms",
		ms(firsts[len(firsts)-1]), takeoverFirstMs, RefSpec, 1.0,
		fmt.Sprintf("slowest of %d groups (median %s; the same request with the group resident %s); new broker on the same volume, group file %d KB, page cache warm",
			movedGroups, fmtDur(firsts[len(firsts)/2]), fmtDur(warm), largestGroupFile(dir)>>10)))

	// Ready over many group files.
	dir, err = env.ScratchDir(false, "kaas-ready-")
	if err != nil {
		return rows, err
	}
	if err := writeGroupFiles(ctx, volume.OffsetsDir(dir), files); err != nil {
		return rows, err
	}
	t0 = time.Now()
	r, stopR, err := startBroker(ctx, env, dir)
	if err != nil {
		return rows, err
	}
	defer stopR()
	cl, err := kgo.NewClient(ClientOpts(r)...)
	if err != nil {
		return rows, err
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		return rows, err
	}
	ready := time.Since(t0)
	rows = append(rows, AtMost(g, fmt.Sprintf("takeover: broker ready over %d group files, kaas %s", files, kind), "ms",
		ms(ready), takeoverReadyMs, RefSpec, 1.0,
		"from the broker's start (node.StartSingle) to the first answered request (client connect included); groups load on first touch"))
	return rows, nil
}

// startBroker runs a standalone kaas broker on dir that the caller stops
// (at the latest when the run ends).
func startBroker(ctx context.Context, env *Env, dir string) (Target, func(), error) {
	s, err := node.StartSingle(broker.Config{ID: 0, DataDir: dir, Listen: "127.0.0.1:0", Logger: env.Log.With("target", "kaas-takeover")}, nil)
	if err != nil {
		return Target{}, nil, fmt.Errorf("bench: start broker: %w", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s.Close(cctx)
		})
	}
	env.onClose(stop)
	return Target{Name: "kaas-takeover", Addrs: []string{s.Addr()}, DataDir: dir, Durable: !IsTmpfs(dir)}, stop, nil
}

// writeGroupFiles writes n group files (one offset each) through the
// offsets store without fsync.
func writeGroupFiles(ctx context.Context, dir string, n int) error {
	st, err := offsets.Open(offsets.Options{Dir: dir, NoSync: true})
	if err != nil {
		return err
	}
	defer st.Close()
	const workers = 16
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			var err error
			for i := w; i < n && err == nil; i += workers {
				group := fmt.Sprintf("bench-file-%d", i)
				err = st.Commit(ctx, group, offsets.Fence{}, map[offsets.TP]offsets.Offset{
					{Topic: commitTopic, Partition: 0}: {Offset: int64(i), LeaderEpoch: -1, ExpireTimestamp: -1},
				})
				st.Evict(group)
			}
			errs <- err
		}()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
