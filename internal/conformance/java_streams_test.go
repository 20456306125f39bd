package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/proctest"
)

// streamsRecords is how many input records the Streams application counts,
// over streamsKeys keys, produced at a steady pace across the restart.
const (
	streamsRecords = 600
	streamsKeys    = 12
)

// TestJavaStreamsExactlyOnce: three instances of a Kafka Streams
// application (java/Counts.java: exactly_once_v2, a repartition topic and a
// counting state store with its changelog, all created by Streams) count
// values per key while the cluster is disrupted, in each scenario of
// javaScenarios (java_disrupt_test.go):
//
//   - rolling-sigterm: each of the three brokers in turn is stopped with
//     SIGTERM and started again. No instance may leave RUNNING: the moves of
//     the group and transaction coordinators are invisible to Streams.
//   - coordinator-kill9, controller-kill9, sigstop-coordinator, membership
//     (an instance replaced by a new one): state changes are reported, not
//     failed.
//
// In every scenario each key's committed output must be 1, 2, ..., n in order, each
// once (a count applied twice, lost, or read from an aborted transaction
// breaks it), and no stream thread may die. Long mode (a JVM per instance
// and 40 s of traffic per scenario), on kaas and on the reference.
func TestJavaStreamsExactlyOnce(t *testing.T) {
	if !long() {
		t.Skip("long mode: KAAS_CONFORMANCE=long (scripts/conformance.sh)")
	}
	for _, scenario := range javaScenarios {
		t.Run(scenario, func(t *testing.T) { runStreams(t, scenario) })
	}
}

func runStreams(t *testing.T, scenario string) {
	start := time.Now()
	res := result{client: "java-streams", scenario: scenario, untapped: true, note: "did not finish: see the test's log"}
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
	dir := filepath.Join(out(), "java-streams-"+scenario)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := javaTarget(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const in, outTopic, app = "streams-in", "streams-out", "streams-counts"
	adm := kadm.NewClient(c.Client())
	defer adm.Close()
	for _, topic := range []string{in, outTopic} {
		if _, err := adm.CreateTopic(ctx, 6, 1, nil, topic); err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
	}

	var mu sync.Mutex
	state := make([]string, 3)
	var errs []string
	watching, changes := false, 0
	procs := make([]*etlProc, 3)
	startInstance := func(i int, name string) {
		lf, err := os.Create(filepath.Join(dir, fmt.Sprintf("streams-%s.log", name)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := startETLProc(lf, "java", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
			"-cp", cp, "dev.kaas.conformance.Counts", strings.Join(c.Addrs(), ","), in, outTopic, app,
			filepath.Join(dir, "state-"+name), "streams-"+name)
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
		go func() {
			for line := range p.lines {
				mu.Lock()
				switch {
				case strings.HasPrefix(line, "S "):
					state[i] = line[2:]
					if watching && state[i] != "RUNNING" {
						changes++
						if scenario == "rolling-sigterm" {
							errs = append(errs, fmt.Sprintf("instance %s left RUNNING: %s", name, state[i]))
						}
					}
				case strings.HasPrefix(line, "E "):
					if watching {
						errs = append(errs, fmt.Sprintf("instance %s: %s", name, line[2:]))
					} else {
						t.Logf("while the group forms (not counted): instance %s: %s", name, line[2:])
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range 3 {
		startInstance(i, fmt.Sprint(i))
	}
	defer func() {
		for _, p := range procs {
			p.stop(45 * time.Second)
		}
	}()

	// Settled: every instance RUNNING in a Stable group of three that each
	// hold partitions.
	describe := func() (kadm.DescribedGroup, error) {
		d, err := adm.DescribeGroups(ctx, app)
		if err != nil {
			return kadm.DescribedGroup{}, err
		}
		return d[app], d.Error()
	}
	members := func(g kadm.DescribedGroup) string {
		var ids []string
		for _, m := range g.Members {
			ids = append(ids, m.MemberID)
		}
		return strings.Join(slices.Sorted(slices.Values(ids)), ",")
	}
	var before string
	if err := proctest.WaitFor(120*time.Second, func() error {
		mu.Lock()
		for i, s := range state {
			if s != "RUNNING" {
				mu.Unlock()
				return fmt.Errorf("instance %d is %q", i, s)
			}
		}
		mu.Unlock()
		g, err := describe()
		if err != nil {
			return err
		}
		if g.State != "Stable" || len(g.Members) != 3 {
			return fmt.Errorf("group %s with %d members", g.State, len(g.Members))
		}
		before = members(g)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	watching = true
	mu.Unlock()

	producer := c.Client(kgo.DefaultProduceTopic(in), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordRetries(100), kgo.RetryTimeout(time.Minute))
	defer producer.Close()
	var produceErr error
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < streamsRecords && ctx.Err() == nil; i++ {
			v := fmt.Appendf(nil, "k%02d:r%05d", i%streamsKeys, i)
			producer.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					produceErr = err
					mu.Unlock()
				}
			})
			time.Sleep(50 * time.Millisecond)
		}
		if err := producer.Flush(ctx); err != nil {
			mu.Lock()
			produceErr = err
			mu.Unlock()
		}
	}()
	time.Sleep(3 * time.Second)
	did := disruptJava(t, ctx, c, adm, app, scenario, javaMembers{
		stop:  func(i int) { procs[i].stop(45 * time.Second) },
		start: startInstance,
	})
	<-produced
	if produceErr != nil {
		t.Errorf("the input producer: %v", produceErr)
	}

	// Each key's committed counts: 1..n, in order, each once.
	want := streamsRecords / streamsKeys
	var got map[string][]string
	if err := proctest.WaitFor(90*time.Second, func() error {
		var err error
		got, err = readCommittedByKey(ctx, c, outTopic)
		if err != nil {
			return err
		}
		for k := range streamsKeys {
			key := fmt.Sprintf("k%02d", k)
			if n := len(got[key]); n < want {
				return fmt.Errorf("key %s: %d of %d counts in the output", key, n, want)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	exact := true
	for k := range streamsKeys {
		key := fmt.Sprintf("k%02d", k)
		res.dups += max(0, len(got[key])-want)
		for i, v := range got[key] {
			if n, err := strconv.Atoi(v); err != nil || n != i+1 {
				exact = false
				t.Errorf("key %s: count %d is %q, want %d (the counts: %v)", key, i+1, v, i+1, got[key][:min(len(got[key]), i+3)])
				break
			}
		}
		if len(got[key]) != want {
			exact = false
			t.Errorf("key %s: %d counts, want %d", key, len(got[key]), want)
		}
	}
	g, err := describe()
	if err != nil {
		t.Fatal(err)
	}
	if after := members(g); after != before && scenario == "rolling-sigterm" {
		t.Errorf("the group's members changed through the restarts: %s before, %s after", before, after)
	}
	mu.Lock()
	for _, e := range errs {
		t.Errorf("streams: %s", e)
	}
	res.note = fmt.Sprintf("%s; Kafka Streams exactly_once_v2, 3 instances, a repartition topic and a changelog: %d records over %d keys, each key's counts 1..n once: %v; members kept: %v",
		did, streamsRecords, streamsKeys, exact, members(g) == before)
	res.rebalances = changes
	t.Logf("%s: %s; %d state changes away from RUNNING", scenario, res.note, changes)
	mu.Unlock()
}

// readCommittedByKey reads a topic from the start with read_committed until
// two polls in a row bring nothing: each key's values in the order read
// (one key lives in one partition, so in the order written).
func readCommittedByKey(ctx context.Context, c *proctest.Cluster, topic string) (map[string][]string, error) {
	cl := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cl.Close()
	byKey := map[string][]string{}
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
			byKey[string(r.Key)] = append(byKey[string(r.Key)], string(r.Value))
			n++
		})
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return byKey, nil
}
