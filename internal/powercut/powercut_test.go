package powercut

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kaas-dev/kaas/internal/powerfs"
	"github.com/kaas-dev/kaas/internal/proctest"
	"github.com/kaas-dev/kaas/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }

// mode is the run's size, from the environment:
//
//	KAAS_POWERCUT=long        50 cuts and the results table (scripts/powercut.sh)
//	KAAS_POWERCUT_CUTS=N      another number of cuts
//	KAAS_POWERCUT_SEED=S      replay the random moments of an earlier run
//	KAAS_POWERCUT_OUT=DIR     where the long mode writes POWERCUT.md's table
type mode struct {
	long bool
	cuts int
	seed uint64
	out  string
}

func modeFromEnv(t *testing.T) mode {
	m := mode{long: os.Getenv("KAAS_POWERCUT") == "long", cuts: 3, seed: uint64(time.Now().UnixNano())}
	if m.long {
		m.cuts = 50
	}
	if s := os.Getenv("KAAS_POWERCUT_CUTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("KAAS_POWERCUT_CUTS=%q: want a positive number", s)
		}
		m.cuts = n
	}
	if s := os.Getenv("KAAS_POWERCUT_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KAAS_POWERCUT_SEED=%q: %v", s, err)
		}
		m.seed = n
	}
	m.out = os.Getenv("KAAS_POWERCUT_OUT")
	return m
}

// rig is a cluster of kaas processes on a powerfs mount.
type rig struct {
	fs *powerfs.FS
	c  *proctest.Cluster
}

// newRig mounts powerfs (skipping the test when FUSE cannot be mounted),
// starts brokers on it and creates the workload's topics durably.
func newRig(t *testing.T, brokers int, topics ...string) *rig {
	t.Helper()
	// Mounted (and its unmount registered) before the cluster starts, so
	// the unmount runs after the brokers are dead.
	mnt := t.TempDir()
	fsys := powerfs.MountT(t, t.TempDir(), mnt, powerfs.Options{
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	logs := os.Getenv("KAAS_POWERCUT_OUT")
	if logs != "" {
		logs = filepath.Join(logs, "brokers", t.Name())
	}
	c := proctest.New(t, proctest.Options{Brokers: brokers, DataDir: mnt, LogDir: logs})
	if err := c.StartAll(); err != nil {
		t.Fatalf("start the brokers on powerfs: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.Client())
	for _, topic := range topics {
		createTopic(t, ctx, adm, topic)
	}
	// Every partition has a leader before the load starts.
	err := testutil.Poll(30*time.Second, func() error {
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			err = ends.Error()
		}
		return err
	})
	if err != nil {
		t.Fatalf("topics not served: %v", err)
	}
	return &rig{fs: fsys, c: c}
}

// createTopic creates topic with the smallest segments Kafka allows
// (1 MiB, KIP-1030), so that segments roll (a new file, a directory fsync,
// an index written) during a long run.
func createTopic(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) {
	t.Helper()
	seg := "1048576"
	if _, err := adm.CreateTopic(ctx, partitions, 1, map[string]*string{"segment.bytes": &seg}, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// powerCut stops every broker where it is (SIGSTOP, then SIGKILL), stops
// the clients (so no acknowledgement can race the cut) and cuts the power.
func (r *rig) powerCut(ld *load) (powerfs.Loss, error) {
	for _, b := range r.c.Brokers {
		if b.Running() {
			_ = b.Stop() // frozen at once; killed below
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(r.c.Brokers))
	for i, b := range r.c.Brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.Running() {
				errs[i] = b.Kill()
			}
		}()
	}
	wg.Wait()
	if ld != nil {
		ld.stop()
	}
	if err := errors.Join(errs...); err != nil {
		return powerfs.Loss{}, err
	}
	return r.fs.Cut()
}

// waitProgress waits until the ledger shows new acknowledged records and
// commits and a decided transaction since from.
func waitProgress(l *ledger, from counts, timeout time.Duration) error {
	return testutil.Poll(timeout, func() error {
		c := l.counts()
		var behind []string
		if c.Records <= from.Records {
			behind = append(behind, "records")
		}
		if c.Commits <= from.Commits {
			behind = append(behind, "offset commits")
		}
		if c.Committed+c.Aborted <= from.Committed+from.Aborted {
			behind = append(behind, "transactions")
		}
		if len(behind) > 0 {
			return fmt.Errorf("no new acknowledged %s", strings.Join(behind, ", "))
		}
		return nil
	})
}

// cutResult is one cut, for the log and the table.
type cutResult struct {
	Loss           powerfs.Loss
	DuringRecovery bool // a second cut came while the brokers recovered
	Load           time.Duration
	Restart        time.Duration
	Problems       []string
}

// TestPowerCut runs the workload on a powerfs mount and, at a random
// moment of each round, cuts the power: every broker is killed -9, every
// unsynced write and every namespace operation not yet durable is dropped,
// and the brokers restart on what is left. After each cut every broker must
// start, every acknowledged record must be readable at its offset with its
// value, every acknowledged offset commit must be there (or a later one),
// every committed transaction whole, and nothing of an aborted or
// unfinished one visible to read_committed.
func TestPowerCut(t *testing.T) {
	m := modeFromEnv(t)
	t.Logf("power cut: %d cuts, seed %d (KAAS_POWERCUT_SEED to replay)", m.cuts, m.seed)
	r := newRig(t, 3, plainTopic, txnTopic)
	rng := rand.New(rand.NewPCG(m.seed, 1))
	l := newLedger()
	start := time.Now()
	var results []cutResult
	failed := 0
	for round := 1; round <= m.cuts; round++ {
		res, fatal := r.round(round, l, rng)
		results = append(results, res)
		c := l.counts()
		t.Logf("cut %d/%d after %v of load (again during recovery: %v): dropped %d files (%d KiB) and %d namespace ops; restart %v; acked so far %d records, %d commits, %d/%d/%d/%d txns committed/aborted/open/in-doubt; %d problems [%v]",
			round, m.cuts, res.Load.Round(10*time.Millisecond), res.DuringRecovery, res.Loss.Files, res.Loss.Bytes/1024, res.Loss.Ops,
			res.Restart.Round(10*time.Millisecond), c.Records, c.Commits, c.Committed, c.Aborted, c.Open, c.Doubt,
			len(res.Problems), time.Since(start).Round(time.Second))
		if len(res.Problems) > 0 {
			failed++
			t.Errorf("cut %d: %d problems:\n  %s", round, len(res.Problems), strings.Join(res.Problems, "\n  "))
		}
		if fatal || failed >= 3 {
			t.Errorf("stopping after cut %d", round)
			break
		}
	}
	if m.out != "" {
		if err := writeCutTable(m, l, results, time.Since(start)); err != nil {
			t.Error(err)
		}
	}
}

// round runs the load until a random moment, cuts, restarts and verifies.
// fatal means the cluster cannot go on (a broker did not start).
func (r *rig) round(round int, l *ledger, rng *rand.Rand) (res cutResult, fatal bool) {
	seeds := r.c.Addrs()
	before := l.counts()
	ld, err := startLoad(seeds, round, l, rng)
	if err != nil {
		return cutResult{Problems: []string{err.Error()}}, true
	}
	t0 := time.Now()
	if err := waitProgress(l, before, 45*time.Second); err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("load did not progress before the cut: %v", err))
	}
	// The random moment: up to 3s more of load, then the next instant at
	// which something is not yet durable (within half a second), so that
	// the cut has something to take.
	timer := time.NewTimer(time.Duration(rng.Int64N(int64(3 * time.Second))))
	<-timer.C
	_ = testutil.Poll(500*time.Millisecond, func() error {
		if r.fs.Pending() == (powerfs.Loss{}) {
			return errors.New("nothing pending")
		}
		return nil
	})
	res.Load = time.Since(t0)
	loss, err := r.powerCut(ld)
	res.Loss = loss
	if err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("power cut: %v", err))
		return res, true
	}
	if rng.IntN(3) == 0 {
		// Once in three rounds the power goes off again while the
		// brokers recover.
		res.DuringRecovery = true
		loss, err := r.cutDuringRecovery(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
		res.Loss.Files += loss.Files
		res.Loss.Bytes += loss.Bytes
		res.Loss.Ops += loss.Ops
		if err != nil {
			res.Problems = append(res.Problems, fmt.Sprintf("power cut during recovery: %v", err))
			return res, true
		}
	}
	t1 := time.Now()
	if err := r.c.StartAll(); err != nil {
		res.Problems = append(res.Problems, fmt.Sprintf("a broker did not start after the cut: %v", err))
		return res, true
	}
	res.Restart = time.Since(t1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v := verify(ctx, seeds, round, l)
	res.Problems = append(res.Problems, v.Problems...)
	return res, false
}

// cutDuringRecovery starts every broker and cuts the power after delay,
// whether or not they have finished recovering.
func (r *rig) cutDuringRecovery(delay time.Duration) (powerfs.Loss, error) {
	var wg sync.WaitGroup
	for _, b := range r.c.Brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = b.Start() // fails when the cut comes first
		}()
	}
	defer wg.Wait()
	err := testutil.Poll(10*time.Second, func() error {
		for _, b := range r.c.Brokers {
			if !b.Running() {
				return fmt.Errorf("broker %d not started", b.ID)
			}
		}
		return nil
	})
	if err != nil {
		return powerfs.Loss{}, err
	}
	timer := time.NewTimer(delay)
	<-timer.C
	return r.powerCut(nil)
}

// writeCutTable writes the long mode's results table to m.out.
func writeCutTable(m mode, l *ledger, results []cutResult, took time.Duration) error {
	c := l.counts()
	var loss powerfs.Loss
	failures := 0
	var notes []string
	for i, r := range results {
		loss.Files += r.Loss.Files
		loss.Bytes += r.Loss.Bytes
		loss.Ops += r.Loss.Ops
		if len(r.Problems) > 0 {
			failures++
			notes = append(notes, fmt.Sprintf("cut %d: %s", i+1, strings.Join(r.Problems[:min(3, len(r.Problems))], "; ")))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Power cuts (%s, seed %d, %d s):\n\n", time.Now().UTC().Format(time.RFC3339), m.seed, int(took.Seconds()))
	b.WriteString("| cuts | records acked / failed | offset commits acked / failed | transactions committed / aborted / open / in doubt | dropped by the cuts (files, KiB, namespace ops) | cuts with failures |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %d / %d | %d / %d | %d / %d / %d / %d | %d, %d, %d | %d |\n",
		len(results), c.Records, c.RecordsFailed, c.Commits, c.CommitsFailed, c.Committed, c.Aborted, c.Open, c.Doubt,
		loss.Files, loss.Bytes/1024, loss.Ops, failures)
	b.WriteString("\nAfter every cut all of it was checked again from the start of each log: every acknowledged record at its offset, every acknowledged commit (or a later one), every committed transaction whole and no aborted or open one visible to read_committed.\n")
	for _, n := range notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	return appendResults(m.out, "cuts", b.String())
}

// appendResults writes one section of the results table file in dir.
func appendResults(dir, name, text string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("powercut: results dir: %w", err)
	}
	p := filepath.Join(dir, "results-"+name+".md")
	if err := os.WriteFile(p, []byte(text+"\n"), 0o644); err != nil {
		return fmt.Errorf("powercut: write %s: %w", p, err)
	}
	return nil
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testWriter{}
