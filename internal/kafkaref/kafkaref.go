// Package kafkaref runs the reference cluster for tests that compare kaas
// with Apache Kafka: Kafka 4.4.0, three KRaft nodes on 127.0.0.1, each a
// combined broker and controller, as OS processes that a test can kill -9,
// SIGTERM, SIGSTOP, SIGCONT and restart one by one.
//
// scripts/kafka-reference.sh owns the facts about Kafka (the pinned jars,
// every node's configuration, the formatting of its storage, the JVM's
// command line); this package allocates the ports, has the script set the
// nodes up, and runs each node's process through proctest (which owns
// signals, crash detection and cleanup). It imports no kaas package but
// proctest.
package kafkaref

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/proctest"
)

// Version is the pinned Apache Kafka release (scripts/kafka-reference.sh).
const Version = "4.4.0"

// DeadAfter is how long the controller waits for a silent broker before it
// fences it (broker.session.timeout.ms in the script's configuration: the
// same 3 s as kaas's --dead-after).
const DeadAfter = 3 * time.Second

// ready is the line a node logs when it serves clients.
const ready = "Kafka Server started"

// script is scripts/kafka-reference.sh of this module.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "kafka-reference.sh")
}

var (
	fetchOnce sync.Once
	fetchErr  error
)

// Available fetches Kafka's jars once per test binary (Maven; minutes the
// first time on a machine, nothing once cached) and reports why the
// reference cluster cannot run, or nil.
func Available() error {
	fetchOnce.Do(func() {
		for _, tool := range []string{"java", "bash"} {
			if _, err := exec.LookPath(tool); err != nil {
				fetchErr = fmt.Errorf("kafkaref: %s: %w", tool, err)
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "bash", script(), "fetch").CombinedOutput(); err != nil {
			fetchErr = fmt.Errorf("kafkaref: fetch Kafka %s: %v\n%s", Version, err, out)
		}
	})
	return fetchErr
}

// Options shape a reference cluster.
type Options struct {
	Dir    string // the nodes' data and configuration; default t.TempDir()
	LogDir string // broker-<id>.log; default Dir
	// Advertise is the client address each node tells clients (a wire
	// tap's); default its own listener.
	Advertise []string
	Heap      string // each JVM's heap; default the script's (512m)
}

// Cluster is the three Kafka nodes; the proctest cluster drives their
// processes (Broker(id).Kill, Terminate, Stop, Cont, Start).
type Cluster struct {
	*proctest.Cluster
	Dir string
}

// Start sets up and starts three nodes and waits until each serves
// clients and the metadata lists all three. Cleanup kills every process.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.LogDir == "" {
		o.LogDir = o.Dir
	}
	if len(o.Advertise) != 0 && len(o.Advertise) != 3 {
		t.Fatalf("kafkaref: %d advertised addresses for 3 nodes", len(o.Advertise))
	}
	var internal, controller []string
	for range 3 {
		internal = append(internal, strconv.Itoa(proctest.FreePort(t)))
		controller = append(controller, strconv.Itoa(proctest.FreePort(t)))
	}
	env := []string{"KAFKA_REF_INTERNAL_PORTS=" + strings.Join(internal, ","),
		"KAFKA_REF_CONTROLLER_PORTS=" + strings.Join(controller, ",")}
	if o.Heap != "" {
		env = append(env, "KAFKA_REF_HEAP="+o.Heap)
	}
	pc := proctest.New(t, proctest.Options{
		Brokers: 3, DeadAfter: DeadAfter, LogDir: o.LogDir, DataDir: o.Dir,
		ReadyTimeout: 90 * time.Second, Ready: ready, TermStatus: 143, Env: env,
		Command: func(id int32) []string { return []string{"bash", script(), "node", o.Dir, strconv.Itoa(int(id))} },
	})
	var clientPorts []string
	for _, b := range pc.Brokers {
		clientPorts = append(clientPorts, b.Addr[strings.LastIndex(b.Addr, ":")+1:])
	}
	setupEnv := append(append(os.Environ(), env...), "KAFKA_REF_PORTS="+strings.Join(clientPorts, ","))
	if len(o.Advertise) > 0 {
		setupEnv = append(setupEnv, "KAFKA_REF_ADVERTISE="+strings.Join(o.Advertise, ","))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script(), "setup", o.Dir)
	cmd.Env = setupEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kafkaref: setup: %v\n%s", err, out)
	}
	c := &Cluster{Cluster: pc, Dir: o.Dir}
	if err := pc.StartAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.waitBrokers(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitBrokers waits until Metadata lists the three brokers.
func (c *Cluster) waitBrokers(timeout time.Duration) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.ClientID("kafkaref"))
	if err != nil {
		return err
	}
	defer cl.Close()
	return proctest.WaitFor(timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("kafkaref: metadata: %w", err)
		}
		if len(resp.Brokers) != len(c.Brokers) {
			return fmt.Errorf("kafkaref: metadata lists %d brokers", len(resp.Brokers))
		}
		return nil
	})
}

// Controller is the node that leads the KRaft quorum (DescribeQuorum of
// __cluster_metadata, which a broker forwards to the controllers): Kafka's
// Metadata names a random broker as controller, not the active one.
func Controller(ctx context.Context, cl *kgo.Client) (int32, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	t := kmsg.NewDescribeQuorumRequestTopic()
	t.Topic = "__cluster_metadata"
	p := kmsg.NewDescribeQuorumRequestTopicPartition()
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, fmt.Errorf("kafkaref: DescribeQuorum: %w", err)
	}
	if resp.ErrorCode != 0 {
		return -1, fmt.Errorf("kafkaref: DescribeQuorum: error %d", resp.ErrorCode)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return -1, errors.New("kafkaref: DescribeQuorum: no partition in the answer")
	}
	qp := resp.Topics[0].Partitions[0]
	if qp.ErrorCode != 0 || qp.LeaderID < 0 {
		return -1, fmt.Errorf("kafkaref: DescribeQuorum: error %d, leader %d", qp.ErrorCode, qp.LeaderID)
	}
	return qp.LeaderID, nil
}

// Classpath is the Java classpath of Kafka's jars (the broker, the tools
// and Connect's runtime), fetched first when missing.
func Classpath(ctx context.Context) (string, error) {
	if err := Available(); err != nil {
		return "", err
	}
	cp, err := exec.CommandContext(ctx, "bash", script(), "classpath").Output()
	if err != nil {
		return "", fmt.Errorf("kafkaref: classpath: %w", err)
	}
	return strings.TrimSpace(string(cp)), nil
}

// Tool runs one of Kafka's command-line tools by its main class (the class
// the distribution's script runs: kafka-topics.sh is
// org.apache.kafka.tools.TopicCommand) with stdin, and returns what it
// printed on standard output. A non-zero exit is an error carrying both
// outputs. The JVM is sized for a 2-core machine: a small heap and the
// client compiler, so a tool answers in about a second.
func Tool(ctx context.Context, stdin, class string, args ...string) (string, error) {
	cp, err := Classpath(ctx)
	if err != nil {
		return "", err
	}
	argv := append([]string{"-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-cp", cp, class}, args...)
	cmd := exec.CommandContext(ctx, "java", argv...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kafkaref: %s %s: %w\nstdout:\n%s\nstderr:\n%s",
			class, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}
