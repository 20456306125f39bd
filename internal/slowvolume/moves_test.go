package slowvolume

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/powerfs"
	"github.com/kaas-dev/kaas/internal/proctest"
)

// The size of a run, from the environment:
//
//	KAAS_SLOWVOLUME=long     20 coordinator moves (scripts/slowvolume.sh)
//	KAAS_SLOWVOLUME_MOVES=N  another number of moves (default 3)
//	KAAS_SLOWVOLUME_SEED=S   replay the random stalls and moves of a run
//	KAAS_SLOWVOLUME_LOGS=DIR keep the brokers' logs there
func movesFromEnv(t *testing.T) (moves int, seed uint64) {
	moves, seed = 3, uint64(time.Now().UnixNano())
	if os.Getenv("KAAS_SLOWVOLUME") == "long" {
		moves = 20
	}
	if s := os.Getenv("KAAS_SLOWVOLUME_MOVES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("KAAS_SLOWVOLUME_MOVES=%q: want a positive number", s)
		}
		moves = n
	}
	if s := os.Getenv("KAAS_SLOWVOLUME_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KAAS_SLOWVOLUME_SEED=%q: %v", s, err)
		}
		seed = n
	}
	return moves, seed
}

// stallingRenames mounts one backing folder n times, each mount caching
// names and attributes for cache as an NFS client does (actimeo, with
// lookupcache=positive: docs/volume.md); a rename onto a group file (in
// the offsets folder) is held, one in four, for 0 to maxStall, as a network
// file system's server may hold it.
type stallingRenames struct {
	dirs []string
	mu   sync.Mutex // guards rng
	rng  *rand.Rand

	held    atomic.Int64
	longest atomic.Int64 // ns
	total   atomic.Int64 // ns
}

func mountStallingRenames(t *testing.T, n int, seed uint64, maxStall time.Duration, cache powerfs.Cache) *stallingRenames {
	s := &stallingRenames{rng: rand.New(rand.NewPCG(seed, 1))}
	backing := t.TempDir()
	for i := range n {
		fs := powerfs.MountT(t, backing, filepath.Join(t.TempDir(), fmt.Sprintf("mnt%d", i)), powerfs.Options{
			Metadata: powerfs.MetadataImmediate,
			Cache:    cache,
			Hold: func(op string, paths ...string) {
				if op != "rename" || len(paths) < 2 || !strings.Contains(paths[1], "__consumer_offsets/") || !strings.HasSuffix(paths[1], ".json") {
					return
				}
				s.mu.Lock()
				var d time.Duration
				if s.rng.IntN(4) == 0 {
					d = time.Duration(s.rng.Int64N(int64(maxStall)))
				}
				s.mu.Unlock()
				if d == 0 {
					return
				}
				s.held.Add(1)
				s.total.Add(int64(d))
				for {
					l := s.longest.Load()
					if int64(d) <= l || s.longest.CompareAndSwap(l, int64(d)) {
						break
					}
				}
				time.Sleep(d)
			},
		})
		s.dirs = append(s.dirs, fs.Dir())
	}
	return s
}

func (s *stallingRenames) String() string {
	return fmt.Sprintf("%d group-file renames held, %v in all, longest %v", s.held.Load(),
		time.Duration(s.total.Load()).Round(time.Millisecond), time.Duration(s.longest.Load()).Round(time.Millisecond))
}

// member is one franz-go group member: it consumes, commits what it
// consumed after every poll, and records what it read under which
// generation (member id and generation or member epoch).
type member struct {
	name  string
	group string
	cl    *kgo.Client

	mu      sync.Mutex
	seen    map[[2]int64]string // (partition, offset) -> identity it was read under
	twice   []string
	records int
	acked   map[int32]int64 // the highest committed offset acknowledged, by partition
	idents  map[string]bool // the identities it had
}

func (m *member) identity() string {
	id, gen := m.cl.GroupMetadata()
	return fmt.Sprintf("%s/%d", id, gen)
}

func (m *member) run(ctx context.Context) {
	for ctx.Err() == nil {
		fs := m.cl.PollRecords(ctx, 500)
		ident := m.identity()
		m.mu.Lock()
		m.idents[ident] = true
		fs.EachRecord(func(r *kgo.Record) {
			k := [2]int64{int64(r.Partition), r.Offset}
			if was, ok := m.seen[k]; ok && was == ident {
				m.twice = append(m.twice, fmt.Sprintf("%d@%d under %s", r.Partition, r.Offset, ident))
			}
			m.seen[k] = ident
			m.records++
		})
		m.mu.Unlock()
		offs := m.cl.UncommittedOffsets()
		if len(offs) == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := m.cl.CommitUncommittedOffsets(cctx)
		cancel()
		if err != nil {
			continue
		}
		m.mu.Lock()
		for _, ps := range offs {
			for p, o := range ps {
				if o.Offset > m.acked[p] {
					m.acked[p] = o.Offset
				}
			}
		}
		m.mu.Unlock()
	}
}

// Coordinator moves (SIGTERM, kill -9, SIGSTOP past --dead-after) on a
// volume that holds one group-file rename in four for up to 6 s, each
// broker's mount caching attributes and names for 2 s: cooperative
// and KIP-848 franz-go members and a committer lose no acknowledged commit,
// see no committed offset go back, and a member that kept its generation
// reads no record twice.
func TestCoordinatorMovesOnAVolumeThatHoldsRenames(t *testing.T) {
	if testing.Short() {
		t.Skip("OS processes on FUSE mounts; not in -short")
	}
	moves, seed := movesFromEnv(t)
	t.Logf("%d moves, seed %d (KAAS_SLOWVOLUME_SEED replays it)", moves, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	vol := mountStallingRenames(t, 3, seed, 6*time.Second, powerfs.Cache{Entry: 2 * time.Second, Attr: 2 * time.Second})
	c := proctest.Start(t, proctest.Options{Brokers: 3, DataDirs: vol.dirs, LogDir: os.Getenv("KAAS_SLOWVOLUME_LOGS")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.Client())
	const topic, partitions = "moves", 6
	if _, err := adm.CreateTopic(ctx, partitions, -1, nil, topic); err != nil {
		t.Fatal(err)
	}

	run, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// A producer, about 200 records a second.
	var produced atomic.Int64
	prod := c.Client(kgo.DefaultProduceTopic(topic), kgo.RecordRetries(1<<30))
	wg.Go(func() {
		for i := 0; run.Err() == nil; i++ {
			prod.Produce(run, &kgo.Record{Value: []byte(strconv.Itoa(i))}, func(_ *kgo.Record, err error) {
				if err == nil {
					produced.Add(1)
				}
			})
			time.Sleep(5 * time.Millisecond)
		}
	})
	// Five cooperative and five KIP-848 members.
	var members []*member
	for i := range 10 {
		g, opts := "moves-coop", []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())}
		if i >= 5 {
			g, opts = "moves-848", []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.ServerSideBalancer()}
		}
		opts = append(opts, kgo.ConsumerGroup(g), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
		m := &member{name: fmt.Sprintf("%s-%d", g, i%5), group: g, cl: c.Client(opts...),
			seen: map[[2]int64]string{}, acked: map[int32]int64{}, idents: map[string]bool{}}
		members = append(members, m)
		wg.Go(func() { m.run(run) })
	}
	// A committer that checks every acknowledged offset: after each
	// acknowledgement the committed offset is at least that, and never
	// below what it read before.
	var (
		cmu         sync.Mutex
		commitFails []string
		lastAcked   int64
		lastSent    int64
		commitsN    int
	)
	cadm := kadm.NewClient(c.Client())
	wg.Go(func() {
		var seen int64
		for next := int64(1); run.Err() == nil; next++ {
			o := kadm.Offsets{}
			o.AddOffset(topic, 0, next, -1)
			cmu.Lock()
			lastSent = next
			cmu.Unlock()
			cctx, cancel := context.WithTimeout(run, 10*time.Second)
			r, err := cadm.CommitOffsets(cctx, "moves-committer", o)
			if err == nil {
				err = r.Error()
			}
			if err == nil {
				cmu.Lock()
				lastAcked, commitsN = next, commitsN+1
				cmu.Unlock()
			}
			f, ferr := cadm.FetchOffsets(cctx, "moves-committer")
			cancel()
			if ferr != nil {
				continue
			}
			got, ok := f.Lookup(topic, 0)
			if !ok || got.Err != nil {
				continue
			}
			cmu.Lock()
			if err == nil && got.At < next {
				commitFails = append(commitFails, fmt.Sprintf("%d acknowledged, then the committed offset read %d", next, got.At))
			}
			if got.At < seen {
				commitFails = append(commitFails, fmt.Sprintf("the committed offset went back from %d to %d", seen, got.At))
			}
			seen = max(seen, got.At)
			cmu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	})

	// The moves: the coordinator of one of the three groups, in turn.
	groups := []string{"moves-coop", "moves-848", "moves-committer"}
	time.Sleep(5 * time.Second)
	for i := range moves {
		g := groups[rng.IntN(len(groups))]
		id, err := c.Coordinator(ctx, adm, g)
		if err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
		b := c.Broker(id)
		how := []string{"SIGTERM", "kill -9", "SIGSTOP"}[i%3]
		t.Logf("move %d: %s of broker %d, coordinator of %s", i, how, id, g)
		switch how {
		case "SIGTERM":
			if err := b.Terminate(60 * time.Second); err != nil {
				t.Fatal(err)
			}
			if err := b.Start(); err != nil {
				t.Fatal(err)
			}
		case "kill -9":
			if err := b.Kill(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			if err := b.Start(); err != nil {
				t.Fatal(err)
			}
		case "SIGSTOP":
			if err := b.Stop(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(c.Opts.DeadAfter + 2*time.Second)
			if err := b.Cont(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Duration(2000+rng.IntN(3000)) * time.Millisecond)
	}
	// Quiet: the members catch up and commit.
	time.Sleep(10 * time.Second)
	stop()
	wg.Wait()

	final := adm.FetchManyOffsets(ctx, "moves-coop", "moves-848", "moves-committer")
	if err := final.Error(); err != nil {
		t.Fatal(err)
	}
	var fails []string
	read, twice := 0, 0
	for _, m := range members {
		m.mu.Lock()
		read += m.records
		twice += len(m.twice)
		for _, s := range m.twice {
			fails = append(fails, fmt.Sprintf("%s read %s twice", m.name, s))
		}
		for p, at := range m.acked {
			got, ok := final[m.group].Fetched.Lookup(topic, p)
			if !ok || got.At < at {
				fails = append(fails, fmt.Sprintf("%s: %d acknowledged on partition %d, committed now %d", m.name, at, p, got.At))
			}
		}
		m.mu.Unlock()
	}
	cmu.Lock()
	fails = append(fails, commitFails...)
	// A commit that was not acknowledged (its request timed out) may or
	// may not have landed.
	if got, ok := final["moves-committer"].Fetched.Lookup(topic, 0); !ok || got.At < lastAcked || got.At > lastSent {
		fails = append(fails, fmt.Sprintf("committer: last acknowledged %d, last sent %d, committed now %d", lastAcked, lastSent, got.At))
	}
	t.Logf("%d moves; %s; %d records produced, %d read by members, %d read twice under one generation; committer: %d commits acknowledged, last %d",
		moves, vol, produced.Load(), read, twice, commitsN, lastAcked)
	cmu.Unlock()
	if len(fails) > 0 {
		if len(fails) > 30 {
			fails = append(fails[:30], fmt.Sprintf("... and %d more", len(fails)-30))
		}
		t.Fatal(errors.New(strings.Join(fails, "\n")))
	}
}
