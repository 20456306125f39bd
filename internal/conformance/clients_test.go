package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A member is one consumer of the group: a goroutine for the Go clients, a
// process for the others. stop asks it to leave as its client does on a
// clean shutdown and waits for it to end by itself; kill ends it at once.
type member interface {
	stop(timeout time.Duration) error
	kill()
}

// A driver starts members of one client. need skips the test when the
// client is missing (fails in CI, where scripts/test.sh installs it).
type driver struct {
	name   string
	static bool // members rejoin with their instance ids (KIP-345)
	// quiesce: stop members only when they have consumed everything
	// acknowledged. kcat drops a record polled after SIGTERM although
	// librdkafka already stored its offset (kcat's consume_cb returns early
	// when !conf.run), which would commit a record it never printed.
	quiesce bool
	// consumer848: the members speak the KIP-848 consumer protocol (the
	// group is described with ConsumerGroupDescribe).
	consumer848 bool
	need        func(t *testing.T)
	start       func(r *run, id int, slot string) (member, error)
}

var drivers = []driver{
	{name: "franz-go-range", need: noNeed, start: franz(kgo.RangeBalancer())},
	{name: "franz-go-cooperative", need: noNeed, start: franz(kgo.CooperativeStickyBalancer())},
	{name: "franz-go-static", static: true, need: noNeed, start: franz(kgo.CooperativeStickyBalancer())},
	// KIP-848: the coordinator assigns (uniform), members reconcile.
	{name: "franz-go-848", consumer848: true, need: noNeed, start: franz(kgo.CooperativeStickyBalancer(), kgo.ServerSideBalancer())},
	{name: "sarama", need: noNeed, start: startSarama},
	{name: "kafka-go", need: noNeed, start: startKafkaGo},
	{name: "kafka-python", need: needPython("kafka"), start: startPython(kafkaPythonMember)},
	{name: "confluent-kafka-python", need: needPython("confluent_kafka"), start: startPython(confluentMember)},
	// librdkafka 2.16 with group.protocol=consumer (KIP-848), from a
	// virtual environment the suite makes.
	{name: "confluent-kafka-python-848", consumer848: true, need: needConfluentVenv, start: startConfluent848},
	{name: "kcat", quiesce: true, need: needKcat, start: startKcat},
	{name: "kafkajs", need: needKafkajs, start: startKafkajs},
	// Apache Kafka's Java client 4.4 (java/, built by the suite with
	// Maven): the classic protocol with its default assignors, and
	// group.protocol=consumer (KIP-848).
	{name: "java", need: needJava, start: startJava("classic")},
	{name: "java-848", consumer848: true, need: needJava, start: startJava("consumer")},
}

func noNeed(*testing.T) {}

func missing(t *testing.T, what string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing in CI (scripts/test.sh installs it): %v", what, err)
	}
	t.Skipf("%s not installed (scripts/test.sh installs it): %v", what, err)
}

const python = "/usr/bin/python3" // Debian's, where the python3-* packages live

func needPython(module string) func(t *testing.T) {
	return func(t *testing.T) {
		if out, err := exec.Command(python, "-c", "import "+module).CombinedOutput(); err != nil {
			missing(t, "python module "+module, fmt.Errorf("%v: %s", err, out))
		}
	}
}

func needKcat(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		missing(t, "kcat", err)
	}
}

// ---- franz-go ----

type goMember struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (m *goMember) stop(timeout time.Duration) error {
	m.cancel()
	select {
	case <-m.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("still running %v after it was told to stop", timeout)
	}
}

func (m *goMember) kill() { _ = m.stop(10 * time.Second) }

func memberLog(r *run, id int) (*os.File, error) {
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(r.dir, fmt.Sprintf("member-%d.log", id)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

// franz: commits synchronously what each poll returned, rebalances blocked
// while a poll is processed.
func franz(bal kgo.GroupBalancer, extra ...kgo.Opt) func(r *run, id int, slot string) (member, error) {
	return func(r *run, id int, slot string) (member, error) {
		lf, err := memberLog(r, id)
		if err != nil {
			return nil, err
		}
		opts := []kgo.Opt{
			kgo.SeedBrokers(r.c.addrs()...),
			kgo.ClientID(fmt.Sprintf("franz-%d", id)),
			kgo.ConsumerGroup(r.group), kgo.ConsumeTopics(topic),
			kgo.Balancers(bal),
			kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(time.Second),
			kgo.RebalanceTimeout(20 * time.Second),
			kgo.FetchMaxWait(500 * time.Millisecond),
			kgo.RequestTimeoutOverhead(3 * time.Second),
			kgo.WithLogger(kgo.BasicLogger(lf, kgo.LogLevelInfo, func() string { return time.Now().UTC().Format("15:04:05.000 ") })),
		}
		if r.drv.static {
			opts = append(opts, kgo.InstanceID(slot))
		}
		opts = append(opts, extra...)
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			lf.Close()
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		m := &goMember{cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(m.done)
			defer lf.Close()
			defer cl.Close() // leaves the group (dynamic members)
			for ctx.Err() == nil {
				pctx, pcancel := context.WithTimeout(ctx, time.Second)
				fs := cl.PollRecords(pctx, 1000)
				pcancel()
				recs := fs.Records()
				for _, rec := range recs {
					r.got.add(rec.Partition, rec.Offset)
				}
				if len(recs) > 0 {
					cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
					if err := cl.CommitRecords(cctx, recs...); err != nil {
						fmt.Fprintf(lf, "commit: %v\n", err)
					}
					ccancel()
				}
				cl.AllowRebalance()
			}
		}()
		return m, nil
	}
}

// ---- sarama ----

type saramaHandler struct{ r *run }

func (saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for {
		select {
		case msg, ok := <-c.Messages():
			if !ok {
				return nil
			}
			h.r.got.add(msg.Partition, msg.Offset)
			s.MarkMessage(msg, "")
		case <-s.Context().Done():
			return nil
		}
	}
}

var saramaLogOnce sync.Once

func startSarama(r *run, id int, _ string) (member, error) {
	saramaLogOnce.Do(func() {
		if f, err := os.OpenFile(filepath.Join(out(), "sarama.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			sarama.Logger = log.New(f, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
		}
	})
	cfg := sarama.NewConfig()
	cfg.ClientID = fmt.Sprintf("sarama-%d", id)
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = true
	cfg.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = time.Second
	cfg.Consumer.Group.Rebalance.Timeout = 20 * time.Second
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	cfg.Consumer.MaxWaitTime = 500 * time.Millisecond
	cfg.Metadata.Retry.Backoff = 250 * time.Millisecond
	g, err := sarama.NewConsumerGroup(r.c.addrs(), r.group, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &goMember{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		defer g.Close() // commits and leaves
		for ctx.Err() == nil {
			if err := g.Consume(ctx, []string{topic}, saramaHandler{r}); err != nil && ctx.Err() == nil {
				sarama.Logger.Printf("member %d: consume: %v", id, err)
				select {
				case <-ctx.Done():
				case <-time.After(250 * time.Millisecond):
				}
			}
		}
	}()
	return m, nil
}

// ---- segmentio kafka-go ----

func startKafkaGo(r *run, id int, _ string) (member, error) {
	lf, err := memberLog(r, id)
	if err != nil {
		return nil, err
	}
	logf := kafkago.LoggerFunc(func(f string, a ...any) { fmt.Fprintf(lf, time.Now().Format("15:04:05.000 ")+f+"\n", a...) })
	rd := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers: r.c.addrs(), GroupID: r.group, Topic: topic,
		StartOffset:       kafkago.FirstOffset,
		CommitInterval:    0, // synchronous commits
		SessionTimeout:    6 * time.Second,
		HeartbeatInterval: time.Second,
		RebalanceTimeout:  20 * time.Second,
		JoinGroupBackoff:  500 * time.Millisecond,
		MaxWait:           500 * time.Millisecond,
		ReadBackoffMax:    500 * time.Millisecond,
		Logger:            logf, ErrorLogger: logf,
	})
	ctx, cancel := context.WithCancel(context.Background())
	m := &goMember{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		defer lf.Close()
		defer rd.Close() // leaves the group
		// At least once: a record counts as consumed before its offset is
		// committed. ReadMessage commits first and returns the record only
		// if the commit answered, so a commit that landed on a coordinator
		// killed before it could answer loses the record to the reader
		// (at most once; seen in coordinator-kill9).
		for ctx.Err() == nil {
			msg, err := rd.FetchMessage(ctx)
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintf(lf, "fetch: %v\n", err)
				}
				continue
			}
			r.got.add(int32(msg.Partition), msg.Offset)
			if err := rd.CommitMessages(ctx, msg); err != nil && ctx.Err() == nil {
				fmt.Fprintf(lf, "commit: %v\n", err)
			}
		}
	}()
	return m, nil
}

// ---- processes: python, kcat, node ----

// procMember is a client process. It prints "R <partition> <offset>" for
// each record it consumed; everything else goes to its log.
type procMember struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(r *run, id int, env []string, argv ...string) (member, error) {
	lf, err := memberLog(r, id)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(lf, "# %s\n", strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
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
	m := &procMember{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		defer lf.Close()
		readRecords(r, stdout, lf)
		err := cmd.Wait()
		fmt.Fprintf(lf, "# exit: %v\n", err)
	}()
	return m, nil
}

func readRecords(r *run, rd io.Reader, lf io.Writer) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "R" {
			p, err1 := strconv.ParseInt(f[1], 10, 32)
			off, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 == nil && err2 == nil {
				r.got.add(int32(p), off)
				continue
			}
		}
		fmt.Fprintln(lf, line)
	}
}

// stop sends SIGTERM to the client process itself; its handler leaves the
// group and exits.
func (m *procMember) stop(timeout time.Duration) error {
	select {
	case <-m.done:
		return fmt.Errorf("pid %d exited before it was told to stop (see its member log)", m.cmd.Process.Pid)
	default:
	}
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-m.done:
		return nil
	case <-time.After(timeout):
		m.kill()
		return fmt.Errorf("pid %d still running %v after SIGTERM; killed", m.cmd.Process.Pid, timeout)
	}
}

func (m *procMember) kill() {
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
	}
}

func startPython(script string) func(r *run, id int, slot string) (member, error) {
	return func(r *run, id int, slot string) (member, error) {
		return startProc(r, id, []string{"PYTHONUNBUFFERED=1"}, python, "-c", script,
			strings.Join(r.c.addrs(), ","), topic, r.group, fmt.Sprintf("py-%d", id))
	}
}

// kafka-python: poll, print, commit synchronously; SIGTERM ends the loop and
// close() leaves the group.
const kafkaPythonMember = `
import signal, sys
from kafka import KafkaConsumer
bootstrap, topic, group, cid = sys.argv[1:5]
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
c = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), group_id=group, client_id=cid,
                  enable_auto_commit=False, auto_offset_reset="earliest",
                  session_timeout_ms=6000, heartbeat_interval_ms=1000, max_poll_interval_ms=20000,
                  request_timeout_ms=10000, fetch_max_wait_ms=500)
while not stop:
    recs = c.poll(timeout_ms=300)
    n = 0
    for tp, msgs in recs.items():
        for m in msgs:
            sys.stdout.write("R %d %d\n" % (m.partition, m.offset))
            n += 1
    sys.stdout.flush()
    if n:
        try:
            c.commit()
        except Exception as e:
            print("commit: %r" % (e,), file=sys.stderr, flush=True)
c.close(autocommit=False)
print("closed", file=sys.stderr, flush=True)
`

// confluent-kafka-python (librdkafka): consume, print, commit synchronously;
// SIGTERM ends the loop and close() leaves the group.
const confluentMember = `
import signal, sys
from confluent_kafka import Consumer
bootstrap, topic, group, cid = sys.argv[1:5]
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": cid,
              "enable.auto.commit": False, "auto.offset.reset": "earliest",
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 20000,
              "fetch.wait.max.ms": 500, "topic.metadata.refresh.interval.ms": 2000})
c.subscribe([topic])
while not stop:
    msgs = c.consume(num_messages=500, timeout=0.3)
    n = 0
    for m in msgs:
        if m.error():
            print("error: %s" % m.error(), file=sys.stderr, flush=True)
            continue
        sys.stdout.write("R %d %d\n" % (m.partition(), m.offset()))
        n += 1
    sys.stdout.flush()
    if n:
        try:
            c.commit(asynchronous=False)
        except Exception as e:
            print("commit: %r" % (e,), file=sys.stderr, flush=True)
c.close()
print("closed", file=sys.stderr, flush=True)
`

// confluent848Member is confluentMember with the consumer group protocol
// (KIP-848): the coordinator assigns, so the classic protocol's session,
// heartbeat and assignor settings are not allowed.
var confluent848Member = strings.Replace(confluentMember,
	`"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 20000,`,
	`"group.protocol": "consumer", "max.poll.interval.ms": 20000,`, 1)

const confluentVersion = "2.16.1"

var (
	venvOnce sync.Once
	venvDir  string
	venvErr  error
)

// confluentVenv makes a Python virtual environment with confluent-kafka
// (which bundles a librdkafka that speaks KIP-848) in
// internal/conformance/.cache, once; a second run finds it there.
func confluentVenv() (string, error) {
	venvOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		venvDir = filepath.Join(filepath.Dir(file), ".cache", "venv-confluent-kafka-"+confluentVersion)
		py := filepath.Join(venvDir, "bin", "python")
		if exec.Command(py, "-c", "import confluent_kafka").Run() == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if b, err := exec.CommandContext(ctx, python, "-m", "venv", venvDir).CombinedOutput(); err != nil {
			venvErr = fmt.Errorf("python3 -m venv: %v\n%s", err, b)
			return
		}
		if b, err := exec.CommandContext(ctx, filepath.Join(venvDir, "bin", "pip"), "install", "-q",
			"confluent-kafka=="+confluentVersion).CombinedOutput(); err != nil {
			venvErr = fmt.Errorf("pip install confluent-kafka==%s: %v\n%s", confluentVersion, err, b)
		}
	})
	return filepath.Join(venvDir, "bin", "python"), venvErr
}

func needConfluentVenv(t *testing.T) {
	if _, err := confluentVenv(); err != nil {
		missing(t, "confluent-kafka "+confluentVersion+" in a virtual environment", err)
	}
}

func startConfluent848(r *run, id int, _ string) (member, error) {
	py, err := confluentVenv()
	if err != nil {
		return nil, err
	}
	return startProc(r, id, []string{"PYTHONUNBUFFERED=1"}, py, "-c", confluent848Member,
		strings.Join(r.c.addrs(), ","), topic, r.group, fmt.Sprintf("py848-%d", id))
}

// kcat -G: librdkafka's balanced consumer with auto-commit of what it
// printed; SIGTERM makes it close the consumer (commit, leave) and exit.
func startKcat(r *run, id int, _ string) (member, error) {
	return startProc(r, id, nil, "kcat", "-b", strings.Join(r.c.addrs(), ","), "-G", r.group,
		"-X", fmt.Sprintf("client.id=kcat-%d", id),
		"-X", "auto.offset.reset=earliest",
		"-X", "auto.commit.interval.ms=200",
		"-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=1000",
		"-X", "max.poll.interval.ms=20000", "-X", "fetch.wait.max.ms=500",
		"-X", "topic.metadata.refresh.interval.ms=2000",
		"-u", "-f", `R %p %o\n`, topic)
}

// ---- kafkajs ----

const kafkajsVersion = "2.2.4"

var (
	npmOnce sync.Once
	npmDir  string
	npmErr  error
)

// kafkajsDir installs kafkajs with npm into internal/conformance/.cache/node
// (next to this file), once; a second run finds it there.
func kafkajsDir() (string, error) {
	npmOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		npmDir = filepath.Join(filepath.Dir(file), ".cache", "node")
		pkg := filepath.Join(npmDir, "node_modules", "kafkajs", "package.json")
		if data, err := os.ReadFile(pkg); err == nil && strings.Contains(string(data), `"version": "`+kafkajsVersion+`"`) {
			return
		}
		if _, err := exec.LookPath("npm"); err != nil {
			npmErr = err
			return
		}
		if err := os.MkdirAll(npmDir, 0o755); err != nil {
			npmErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--no-save",
			"--prefix", npmDir, "kafkajs@"+kafkajsVersion)
		if b, err := cmd.CombinedOutput(); err != nil {
			npmErr = fmt.Errorf("npm install kafkajs@%s: %v\n%s", kafkajsVersion, err, b)
		}
	})
	return npmDir, npmErr
}

func needKafkajs(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		missing(t, "node", err)
	}
	if _, err := kafkajsDir(); err != nil {
		missing(t, "kafkajs", err)
	}
}

// kafkajs: eachMessage prints, the runner commits after each batch;
// SIGTERM disconnects (commits, leaves) and exits.
const kafkajsMember = `
const { Kafka, logLevel } = require('kafkajs')
const [bootstrap, topic, group, cid] = process.argv.slice(1)
const kafka = new Kafka({ clientId: cid, brokers: bootstrap.split(','), logLevel: logLevel.WARN,
  retry: { initialRetryTime: 200, retries: 20 } })
const consumer = kafka.consumer({ groupId: group, sessionTimeout: 6000, heartbeatInterval: 1000,
  rebalanceTimeout: 20000, maxWaitTimeInMs: 500, metadataMaxAge: 2000 })
let stopping = false
process.on('SIGTERM', async () => {
  if (stopping) return
  stopping = true
  try { await consumer.disconnect() } catch (e) { console.error('disconnect:', e) }
  console.error('closed')
  process.exit(0)
})
consumer.on(consumer.events.CRASH, e => console.error('crash:', e.payload && e.payload.error))
;(async () => {
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({ eachMessage: async ({ partition, message }) => {
    process.stdout.write('R ' + partition + ' ' + message.offset + '\n')
  } })
})().catch(e => { console.error('fatal:', e); process.exit(2) })
`

func startKafkajs(r *run, id int, _ string) (member, error) {
	dir, err := kafkajsDir()
	if err != nil {
		return nil, err
	}
	return startProc(r, id, []string{"NODE_PATH=" + filepath.Join(dir, "node_modules")},
		"node", "-e", kafkajsMember, "--", strings.Join(r.c.addrs(), ","), topic, r.group, fmt.Sprintf("kafkajs-%d", id))
}

// ---- the Java client ----

var (
	javaOnce sync.Once
	javaCP   string
	javaErr  error
)

// javaClasspath builds the Maven module in java/ (the group member, the
// transactional ETL and the pinned kafka-clients) into internal/conformance/.cache/java, once; a second run
// whose jar is newer than the module's sources finds it there.
func javaClasspath() (string, error) {
	javaOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		mod := filepath.Join(filepath.Dir(file), "java")
		build := filepath.Join(filepath.Dir(file), ".cache", "java")
		jar := filepath.Join(build, "conformance-java.jar")
		javaCP = jar + string(os.PathListSeparator) + filepath.Join(build, "lib", "*")
		sources, _ := filepath.Glob(filepath.Join(mod, "src", "main", "java", "dev", "kaas", "conformance", "*.java"))
		services, _ := filepath.Glob(filepath.Join(mod, "src", "main", "resources", "META-INF", "services", "*"))
		sources = append(sources, services...)
		if fresh(jar, append(sources, filepath.Join(mod, "pom.xml"))...) {
			return
		}
		for _, tool := range []string{"java", "mvn"} {
			if _, err := exec.LookPath(tool); err != nil {
				javaErr = err
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "-f", filepath.Join(mod, "pom.xml"), "package",
			"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+filepath.Join(build, "lib"))
		if b, err := cmd.CombinedOutput(); err != nil {
			javaErr = fmt.Errorf("mvn package (internal/conformance/java): %v\n%s", err, b)
		}
	})
	return javaCP, javaErr
}

// fresh: target exists and is newer than every source.
func fresh(target string, sources ...string) bool {
	ti, err := os.Stat(target)
	if err != nil {
		return false
	}
	for _, s := range sources {
		si, err := os.Stat(s)
		if err != nil || si.ModTime().After(ti.ModTime()) {
			return false
		}
	}
	return true
}

func needJava(t *testing.T) {
	if _, err := javaClasspath(); err != nil {
		missing(t, "the Java driver (a JDK and Maven)", err)
	}
}

// startJava runs dev.kaas.conformance.Member (java/): poll, print, commit
// synchronously; SIGTERM commits, leaves and exits. A small heap and the
// client compiler: members start in about a second on 2 cores.
func startJava(protocol string) func(r *run, id int, slot string) (member, error) {
	return func(r *run, id int, _ string) (member, error) {
		cp, err := javaClasspath()
		if err != nil {
			return nil, err
		}
		return startProc(r, id, nil, "java", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
			"-cp", cp, "dev.kaas.conformance.Member",
			strings.Join(r.c.addrs(), ","), topic, r.group, fmt.Sprintf("java-%d", id), protocol)
	}
}
