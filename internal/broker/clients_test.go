package broker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// requireTool skips when a client is missing on a developer machine, and
// fails in CI, where scripts/test.sh installs it.
func requireTool(t *testing.T, name string, check ...string) {
	t.Helper()
	var err error
	if len(check) > 0 {
		err = exec.Command(check[0], check[1:]...).Run()
	} else {
		_, err = exec.LookPath(name)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing in CI (scripts/test.sh installs it): %v", name, err)
		}
		t.Skipf("%s not installed (scripts/test.sh installs it): %v", name, err)
	}
}

func run(t *testing.T, timeout time.Duration, stdin string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func TestKcatProduceConsume(t *testing.T) {
	requireTool(t, "kcat")
	b := startBroker(t, t.TempDir(), nil)
	createTopic(t, client(t, b), "kcat", 2, nil)
	var in strings.Builder
	for i := range 100 {
		fmt.Fprintf(&in, "k%d:v%d\n", i, i)
	}
	run(t, 30*time.Second, in.String(), "kcat", "-b", b.Addr(), "-P", "-t", "kcat", "-K:", "-X", "acks=all", "-z", "lz4")
	out := run(t, 30*time.Second, "", "kcat", "-b", b.Addr(), "-C", "-t", "kcat", "-o", "beginning", "-e", "-q", "-f", "%k=%s\n")
	lines := strings.Fields(out)
	if len(lines) != 100 {
		t.Fatalf("kcat consumed %d records:\n%s", len(lines), out)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	for i := range 100 {
		if !seen[fmt.Sprintf("k%d=v%d", i, i)] {
			t.Fatalf("missing k%d", i)
		}
	}
	// And franz-go reads what librdkafka wrote.
	if got := consume(t, b, "kcat", 100); len(got) != 100 {
		t.Fatalf("franz-go read %d", len(got))
	}
}

const kafkaPythonScript = `
import sys
from kafka import KafkaProducer, KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic
bootstrap = sys.argv[1]
admin = KafkaAdminClient(bootstrap_servers=bootstrap)
admin.create_topics([NewTopic("py", num_partitions=3, replication_factor=1)])
p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
for i in range(200):
    p.send("py", key=str(i % 5).encode(), value=("v%d" % i).encode())
p.flush()
p.close()
c = KafkaConsumer("py", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                  consumer_timeout_ms=5000, enable_auto_commit=False)
vals = sorted(int(m.value[1:]) for m in c)
c.close()
assert vals == list(range(200)), "consumed %d records" % len(vals)
print("ok", len(vals))
`

func TestKafkaPythonProduceConsume(t *testing.T) {
	requireTool(t, "kafka-python", "/usr/bin/python3", "-c", "import kafka")
	b := startBroker(t, t.TempDir(), nil)
	out := run(t, 60*time.Second, "", "/usr/bin/python3", "-c", kafkaPythonScript, b.Addr())
	if !strings.Contains(out, "ok 200") {
		t.Fatalf("kafka-python: %s", out)
	}
}

const confluentTxnScript = `
import sys
from confluent_kafka import Producer, Consumer, TopicPartition
bootstrap = sys.argv[1]
# Seed the input topic.
p = Producer({"bootstrap.servers": bootstrap})
for i in range(30):
    p.produce("ck-in", value=("in-%d" % i).encode(), partition=i % 2)
p.flush(30)
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-group", "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "isolation.level": "read_committed"})
c.subscribe(["ck-in"])
tp = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-tx"})
tp.init_transactions(30)
got = 0
rounds = 0
while got < 30 and rounds < 60:
    rounds += 1
    msgs = c.consume(num_messages=10, timeout=1.0)
    msgs = [m for m in msgs if m.error() is None]
    if not msgs:
        continue
    tp.begin_transaction()
    for m in msgs:
        tp.produce("ck-out", value=m.value().replace(b"in", b"out"))
    offsets = [TopicPartition(m.topic(), m.partition(), m.offset() + 1) for m in msgs]
    tp.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
    tp.commit_transaction(30)
    got += len(msgs)
# One aborted transaction that must stay invisible.
tp.begin_transaction()
tp.produce("ck-out", value=b"aborted")
tp.abort_transaction(30)
c.close()
r = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-reader", "auto.offset.reset": "earliest",
              "isolation.level": "read_committed"})
r.subscribe(["ck-out"])
vals = []
for _ in range(20):
    for m in r.consume(num_messages=100, timeout=0.5):
        if m.error() is None:
            vals.append(m.value().decode())
    if len(vals) >= 30:
        break
r.close()
assert sorted(vals) == sorted("out-%d" % i for i in range(30)), vals
print("ok", got, len(vals))
`

func TestConfluentKafkaPythonTransactions(t *testing.T) {
	requireTool(t, "confluent-kafka-python", "/usr/bin/python3", "-c", "import confluent_kafka")
	b := startGroupBroker(t, t.TempDir(), fastGroups(), nil)
	cl := client(t, b)
	createTopic(t, cl, "ck-in", 2, nil)
	createTopic(t, cl, "ck-out", 2, nil)
	out := run(t, 120*time.Second, "", "/usr/bin/python3", "-c", confluentTxnScript, b.Addr())
	if !strings.Contains(out, "ok 30 30") {
		t.Fatalf("confluent-kafka-python: %s", out)
	}
	// The consumed input offsets were committed in the transactions.
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "ck-group")
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	offs.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != 30 {
		t.Fatalf("committed input offsets add up to %d, want 30", total)
	}
}
