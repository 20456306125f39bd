package conformance

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/kafkaref"
	"github.com/kaas-dev/kaas/internal/proctest"
)

// javaETLRecords is how many input records the Java ETL copies, produced
// at a steady pace across the rolling restart.
const javaETLRecords = 900

// TestJavaTransactionalETL: three Java processes (java/Etl.java:
// KafkaConsumer read_committed, a transactional idempotent KafkaProducer,
// sendOffsetsToTransaction) copy a topic while the cluster is disrupted:
// the rolling restart (each broker in turn stopped with SIGTERM and started
// again) in quick mode, every scenario of javaScenarios in long mode. Every
// input record must be in the output exactly once (read_committed). In the
// rolling restart no member may see an error or a rebalance (its listener
// is called) and the group keeps its members: the moves of the group and
// transaction coordinators are invisible to the Java client. In the other
// scenarios errors and rebalances are reported, not failed.
func TestJavaTransactionalETL(t *testing.T) {
	scenarios := []string{"rolling-sigterm"}
	if long() {
		scenarios = javaScenarios
	}
	for _, scenario := range scenarios {
		t.Run(scenario, func(t *testing.T) { runETL(t, scenario) })
	}
}

func runETL(t *testing.T, scenario string) {
	start := time.Now()
	res := result{client: "java-etl", scenario: scenario, untapped: true, note: "did not finish: see the test's log"}
	defer func() {
		if t.Skipped() {
			return
		}
		res.status, res.took = "passed", time.Since(start)
		if t.Failed() {
			res.status = "FAILED"
		}
		record(res)
	}()
	needJava(t)
	cp, _ := javaClasspath()
	dir := filepath.Join(out(), "java-etl-"+scenario)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := javaTarget(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const in, outTopic, group = "java-etl-in", "java-etl-out", "java-etl"
	adm := kadm.NewClient(c.Client())
	defer adm.Close()
	for _, topic := range []string{in, outTopic} {
		if _, err := adm.CreateTopic(ctx, 6, 1, nil, topic); err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
	}

	// The members. Each prints "C n" per committed transaction and "E ..."
	// per error it sees; slot i holds the member running as the i-th.
	var mu sync.Mutex
	commits := make([]int, 3)
	var errs []string
	watching, rebalances := false, 0
	strict := scenario == "rolling-sigterm"
	procs := make([]*etlProc, 3)
	startMember := func(i int, name string) {
		lf, err := os.Create(filepath.Join(dir, fmt.Sprintf("etl-%s.log", name)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := startETLProc(lf, "java", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
			"-cp", cp, "dev.kaas.conformance.Etl", strings.Join(c.Addrs(), ","), in, outTopic, group, "java-etl-"+name)
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
		go func() {
			for line := range p.lines {
				mu.Lock()
				switch {
				case strings.HasPrefix(line, "C "):
					commits[i]++
				case strings.HasPrefix(line, "G "):
					if watching {
						rebalances++
						if strict {
							errs = append(errs, fmt.Sprintf("member %s: a rebalance: %s", name, line[2:]))
						}
					} else {
						t.Logf("member %s: %s", name, line[2:])
					}
				case strings.HasPrefix(line, "E "):
					if watching {
						errs = append(errs, fmt.Sprintf("member %s: %s", name, line[2:]))
					} else {
						t.Logf("while the group forms (not counted): member %s: %s", name, line[2:])
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range 3 {
		startMember(i, fmt.Sprint(i))
	}
	defer func() {
		for _, p := range procs {
			p.stop(45 * time.Second)
		}
	}()

	producer := c.Client(kgo.DefaultProduceTopic(in), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordRetries(100), kgo.RetryTimeout(time.Minute))
	defer producer.Close()
	var produceErr error
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < javaETLRecords && ctx.Err() == nil; i++ {
			producer.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%05d", i)}, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					produceErr = err
					mu.Unlock()
				}
			})
			time.Sleep(20 * time.Millisecond)
		}
		if err := producer.Flush(ctx); err != nil {
			mu.Lock()
			produceErr = err
			mu.Unlock()
		}
	}()

	// Settled: Stable with three members that each hold partitions and
	// have committed a transaction since.
	describe := func() (kadm.DescribedGroup, error) {
		d, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return kadm.DescribedGroup{}, err
		}
		return d[group], d.Error()
	}
	// The members' ids; the rebalance listener's lines tell a new
	// generation.
	shapeOf := func(g kadm.DescribedGroup) string {
		var ids []string
		for _, m := range g.Members {
			ids = append(ids, m.MemberID)
		}
		return strings.Join(slices.Sorted(slices.Values(ids)), ",")
	}
	var before string
	if err := proctest.WaitFor(90*time.Second, func() error {
		g, err := describe()
		if err != nil {
			return err
		}
		if g.State != "Stable" || len(g.Members) != 3 {
			return fmt.Errorf("group %s with %d members", g.State, len(g.Members))
		}
		for _, m := range g.Members {
			if a, ok := m.Assigned.AsConsumer(); !ok || len(a.Topics) == 0 {
				return fmt.Errorf("member %s has no partitions yet", m.MemberID)
			}
		}
		before = shapeOf(g)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	base := append([]int(nil), commits...)
	mu.Unlock()
	if err := proctest.WaitFor(30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for i := range commits {
			if commits[i] == base[i] {
				return fmt.Errorf("member %d has not committed a transaction since the group settled", i)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if g, err := describe(); err != nil || shapeOf(g) != before {
		t.Fatalf("the group changed while settling: %s, then %s (%v)", before, shapeOf(g), err)
	}
	mu.Lock()
	watching = true
	mu.Unlock()

	did := disruptJava(t, ctx, c, adm, group, scenario, javaMembers{
		stop:  func(i int) { procs[i].stop(45 * time.Second) },
		start: startMember,
	})
	<-produced
	if produceErr != nil {
		t.Errorf("the input producer: %v", produceErr)
	}

	// Every input record exactly once in the committed output.
	var got map[string]int
	if err := proctest.WaitFor(90*time.Second, func() error {
		var err error
		got, err = readCommitted(ctx, c, outTopic)
		if err != nil {
			return err
		}
		if len(got) < javaETLRecords {
			return fmt.Errorf("%d of %d input records in the output", len(got), javaETLRecords)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	var dups, missing []string
	for i := range javaETLRecords {
		switch v := fmt.Sprintf("r%05d", i); got[v] {
		case 0:
			missing = append(missing, v)
		case 1:
		default:
			dups = append(dups, fmt.Sprintf("%s×%d", v, got[v]))
		}
	}
	res.dups = len(dups)
	if len(dups) > 0 || len(missing) > 0 {
		t.Errorf("output: %d records twice or more %v, %d missing %v", len(dups), dups[:min(len(dups), 5)], len(missing), missing[:min(len(missing), 5)])
	}
	g, err := describe()
	if err != nil {
		t.Fatal(err)
	}
	if after := shapeOf(g); after != before && strict {
		t.Errorf("the group's members changed through the restarts: %s before, %s after", before, after)
	}
	mu.Lock()
	for _, e := range errs {
		if strict {
			t.Errorf("client error: %s", e)
		} else {
			t.Logf("client error (reported, not failed in %s): %s", scenario, e)
		}
	}
	res.note = fmt.Sprintf("%s; Java consumer (read_committed) + transactional producer with sendOffsetsToTransaction, 3 members: %d of %d records in the output exactly once, %d missing, %d errors, members kept: %v",
		did, javaETLRecords-len(missing)-len(dups), javaETLRecords, len(missing), len(errs), shapeOf(g) == before)
	res.rebalances = rebalances
	t.Logf("%s: %d records copied exactly once; transactions per member %v; %d rebalances, %d errors", scenario, javaETLRecords, commits, rebalances, len(errs))
	mu.Unlock()
}

// javaTarget starts the three brokers the Java ETL, Streams and Connect
// tests run against: kaas, or Apache Kafka with KAAS_CONFORMANCE_TARGET=kafka
// (its brokers' logs in dir either way).
func javaTarget(t *testing.T, dir string) *proctest.Cluster {
	if reference() {
		return kafkaref.Start(t, kafkaref.Options{Dir: filepath.Join(t.TempDir(), "kafka"), LogDir: dir}).Cluster
	}
	return proctest.Start(t, proctest.Options{Brokers: 3, LogDir: dir, Args: []string{"--group-initial-rebalance-delay", "0s"}})
}

// etlProc is one ETL process: its stdout lines arrive on lines, its
// stderr goes to its log.
type etlProc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

func startETLProc(lf *os.File, argv ...string) (*etlProc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	p := &etlProc{cmd: cmd, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer lf.Close()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		fmt.Fprintf(lf, "# exit: %v\n", cmd.Wait())
	}()
	return p, nil
}

// stop sends SIGTERM and waits; past timeout the process group is killed.
func (p *etlProc) stop(timeout time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// readCommitted reads a topic from the start with read_committed until two
// polls in a row bring nothing, counting each value.
func readCommitted(ctx context.Context, c *proctest.Cluster, topic string) (map[string]int, error) {
	cl := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cl.Close()
	counts := map[string]int{}
	for quiet, polls := 0, 0; quiet < 2; polls++ {
		if polls > 120 {
			return nil, fmt.Errorf("reading %s: still not quiet after %d polls", topic, polls)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			counts[string(r.Value)]++
			n++
		})
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return counts, nil
}
