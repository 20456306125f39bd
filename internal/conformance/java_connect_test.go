package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kaas-dev/kaas/internal/kafkaref"
	"github.com/kaas-dev/kaas/internal/proctest"
)

// connectPerTask is how many values each source task writes, one every
// 20 ms: 50 s, longer than the broker restarts (slower on Kafka) and the
// worker stop.
const connectPerTask = 2500

// connectWorker is one Connect worker process and its REST address.
type connectWorker struct {
	proc *etlProc
	rest string // http://127.0.0.1:port
	id   string // its worker id in the status answers: 127.0.0.1:port
}

// connectStatus is GET /connectors/NAME/status.
type connectStatus struct {
	Connector struct {
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
	} `json:"connector"`
	Tasks []struct {
		ID       int    `json:"id"`
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
	} `json:"tasks"`
}

// TestKafkaConnectDistributed: two Kafka Connect 4.4 workers in
// distributed mode (the "connect" group protocol; config, offset and status
// topics that Connect creates compacted) run a source connector
// (java/SeqSource.java: two tasks writing numbered values) and a sink
// connector (java/PrintSink.java: two tasks printing what they are given).
// While they run, each kaas broker in turn is stopped with SIGTERM and
// restarted: no task may fail. Then one worker is stopped with SIGTERM: its
// connectors and tasks move to the other worker and run there, the sources
// resume from their committed offsets, and every value reaches the topic
// and the sink (Connect is at least once: repeats are counted, not failed).
// Long mode, on kaas and on the reference (KAAS_CONFORMANCE_TARGET=kafka);
// the workers run on the reference cluster's jars.
func TestKafkaConnectDistributed(t *testing.T) {
	if !long() {
		t.Skip("long mode: KAAS_CONFORMANCE=long (scripts/conformance.sh)")
	}
	needJava(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	refCP, err := kafkaref.Classpath(ctx)
	if err != nil {
		missing(t, "Kafka Connect's runtime (the reference cluster's jars)", err)
	}
	start := time.Now()
	res := result{client: "java-connect", scenario: "rolling-sigterm, worker stop", untapped: true, rebalances: -1,
		note: "did not finish: see the test's log"}
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
	cp, _ := javaClasspath()
	jar := strings.SplitN(cp, string(os.PathListSeparator), 2)[0]
	dir := filepath.Join(out(), "java-connect")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := javaTarget(t, dir)
	const topic, source, sink = "connect-seq", "seq-source", "print-sink"
	adm := kadm.NewClient(c.Client())
	defer adm.Close()
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	logConf := filepath.Join(dir, "log4j2.properties")
	if err := os.WriteFile(logConf, []byte(strings.Join([]string{
		"status = error",
		"appender.console.type = Console",
		"appender.console.name = STDERR",
		"appender.console.target = SYSTEM_ERR",
		"appender.console.layout.type = PatternLayout",
		"appender.console.layout.pattern = [%d] %p %m (%c)%n",
		"rootLogger.level = INFO",
		"rootLogger.appenderRef.console.ref = STDERR",
	}, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	sunk := map[string]int{}
	var resumed []string // "task n" of each source task started after the first
	var workers []*connectWorker
	for i := range 2 {
		port := proctest.FreePort(t)
		props := filepath.Join(dir, fmt.Sprintf("worker-%d.properties", i))
		if err := os.WriteFile(props, []byte(strings.Join([]string{
			"bootstrap.servers=" + strings.Join(c.Addrs(), ","),
			"group.id=kaas-connect",
			"key.converter=org.apache.kafka.connect.storage.StringConverter",
			"value.converter=org.apache.kafka.connect.storage.StringConverter",
			"config.storage.topic=connect-configs",
			"offset.storage.topic=connect-offsets",
			"status.storage.topic=connect-status",
			"config.storage.replication.factor=1",
			"offset.storage.replication.factor=1",
			"status.storage.replication.factor=1",
			"offset.storage.partitions=5",
			"status.storage.partitions=3",
			fmt.Sprintf("listeners=http://127.0.0.1:%d", port),
			"rest.advertised.host.name=127.0.0.1",
			fmt.Sprintf("rest.advertised.port=%d", port),
			"offset.flush.interval.ms=1000",
			// A departed worker's tasks are reassigned at once (the default
			// holds them 5 minutes for the worker to come back).
			"scheduled.rebalance.max.delay.ms=0",
			"session.timeout.ms=6000",
			"heartbeat.interval.ms=1000",
			"plugin.discovery=service_load",
		}, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		lf, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := startETLProc(lf, "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dlog4j2.configurationFile="+logConf, "-cp", jar+string(os.PathListSeparator)+refCP,
			"org.apache.kafka.connect.cli.ConnectDistributed", props)
		if err != nil {
			t.Fatal(err)
		}
		w := &connectWorker{proc: p, rest: fmt.Sprintf("http://127.0.0.1:%d", port), id: fmt.Sprintf("127.0.0.1:%d", port)}
		workers = append(workers, w)
		go func() {
			for line := range p.lines {
				mu.Lock()
				if v, ok := strings.CutPrefix(line, "R "); ok {
					sunk[v]++
				} else if v, ok := strings.CutPrefix(line, "T source "); ok {
					resumed = append(resumed, v)
				}
				mu.Unlock()
			}
		}()
	}
	defer func() {
		for _, w := range workers {
			w.proc.stop(45 * time.Second)
		}
	}()

	rest := func(w *connectWorker, method, path string, body any, into any) error {
		var rd *strings.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = strings.NewReader(string(b))
		} else {
			rd = strings.NewReader("")
		}
		req, err := http.NewRequestWithContext(ctx, method, w.rest+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			var e struct {
				Message string `json:"message"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&e)
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, e.Message)
		}
		if into != nil {
			return json.NewDecoder(resp.Body).Decode(into)
		}
		return nil
	}
	for _, w := range workers {
		if err := proctest.WaitFor(90*time.Second, func() error { return rest(w, "GET", "/connectors", nil, nil) }); err != nil {
			t.Fatalf("worker %s never served its REST API: %v", w.id, err)
		}
	}
	connectors := map[string]map[string]string{
		source: {"connector.class": "dev.kaas.conformance.SeqSource", "tasks.max": "2", "topic": topic,
			"count": fmt.Sprint(connectPerTask)},
		sink: {"connector.class": "dev.kaas.conformance.PrintSink", "tasks.max": "2", "topics": topic},
	}
	for name, cfg := range connectors {
		if err := proctest.WaitFor(30*time.Second, func() error {
			return rest(workers[0], "PUT", "/connectors/"+name+"/config", cfg, nil)
		}); err != nil {
			t.Fatal(err)
		}
	}

	// running: both connectors RUNNING with two RUNNING tasks each, asked
	// of worker w; where maps each worker id to the tasks it runs.
	running := func(w *connectWorker) (map[string]int, error) {
		where := map[string]int{}
		for name := range connectors {
			var st connectStatus
			if err := rest(w, "GET", "/connectors/"+name+"/status", nil, &st); err != nil {
				return nil, err
			}
			if st.Connector.State != "RUNNING" || len(st.Tasks) != 2 {
				return nil, fmt.Errorf("%s is %s with %d tasks", name, st.Connector.State, len(st.Tasks))
			}
			for _, tk := range st.Tasks {
				if tk.State == "FAILED" {
					return nil, fmt.Errorf("%s task %d FAILED on %s: %s", name, tk.ID, tk.WorkerID, firstLine(tk.Trace))
				}
				if tk.State != "RUNNING" {
					return nil, fmt.Errorf("%s task %d is %s", name, tk.ID, tk.State)
				}
				where[tk.WorkerID]++
			}
		}
		return where, nil
	}
	if err := proctest.WaitFor(90*time.Second, func() error {
		where, err := running(workers[1])
		if err != nil {
			return err
		}
		if where[workers[0].id] == 0 || where[workers[1].id] == 0 {
			return fmt.Errorf("tasks not spread over both workers yet: %v", where)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sinkCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(sunk)
	}
	if err := proctest.WaitFor(30*time.Second, func() error {
		if n := sinkCount(); n < 50 {
			return fmt.Errorf("the sink has seen %d values", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The brokers restart one by one under the running connectors.
	if err := c.RollingRestart(30*time.Second, 3*time.Second, func(b *proctest.Broker) {
		if _, err := running(workers[1]); err != nil {
			t.Errorf("after broker %d restarted: %v", b.ID, err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	atStop := sinkCount()
	if atStop >= 2*connectPerTask {
		t.Fatalf("the sources finished before the worker stopped (%d values): the move is not exercised", atStop)
	}
	mu.Lock()
	startsBefore := len(resumed)
	mu.Unlock()

	// Worker 0 stops: everything runs on worker 1.
	stopped := time.Now()
	workers[0].proc.stop(45 * time.Second)
	var moved time.Duration
	if err := proctest.WaitFor(60*time.Second, func() error {
		where, err := running(workers[1])
		if err != nil {
			return err
		}
		if where[workers[1].id] != 4 {
			return fmt.Errorf("tasks by worker: %v", where)
		}
		moved = time.Since(stopped)
		return nil
	}); err != nil {
		t.Fatalf("the stopped worker's tasks did not move: %v", err)
	}

	// A source task that moved resumed after its committed offset.
	mu.Lock()
	moves := resumed[startsBefore:]
	mu.Unlock()
	resumedAt := ""
	for _, m := range moves {
		var task, n int
		if _, err := fmt.Sscanf(m, "%d starts at %d", &task, &n); err == nil && n > 1 {
			resumedAt += fmt.Sprintf(" t%d at %d", task, n)
		}
	}
	if resumedAt == "" {
		t.Errorf("no source task resumed from a committed offset after the worker stopped (starts: %v)", moves)
	}

	// Every value reaches the sink; the topic holds each at least once.
	total := 2 * connectPerTask
	if err := proctest.WaitFor(90*time.Second, func() error {
		if n := sinkCount(); n < total {
			return fmt.Errorf("the sink has seen %d of %d values", n, total)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	inTopic, err := readCommitted(ctx, c, topic)
	if err != nil {
		t.Fatal(err)
	}
	topicDups, sinkDups := 0, 0
	for task := range 2 {
		for n := 1; n <= connectPerTask; n++ {
			v := fmt.Sprintf("t%d-%05d", task, n)
			if inTopic[v] == 0 {
				t.Errorf("%s never reached the topic", v)
			}
			topicDups += max(0, inTopic[v]-1)
			mu.Lock()
			if sunk[v] == 0 {
				t.Errorf("%s never reached the sink", v)
			}
			sinkDups += max(0, sunk[v]-1)
			mu.Unlock()
		}
	}
	res.dups = sinkDups
	res.note = fmt.Sprintf("2 Connect workers, a source and a sink connector with 2 tasks each: no task failed through the broker restarts; "+
		"worker stopped after %d values sunk, its tasks running on the other worker %v later, sources resumed at their committed offsets (%s); %d values, repeated in the topic %d times, in the sink %d times",
		atStop, moved.Round(100*time.Millisecond), strings.TrimSpace(resumedAt), total, topicDups, sinkDups)
	t.Log(res.note)
}

// firstLine is the first line of a stack trace.
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
