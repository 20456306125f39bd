package kafkatools

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/clustertest"
	"github.com/kaas-dev/kaas/internal/kafkaref"
)

// Main classes of the tools, as the distribution's scripts run them.
const (
	topicsTool       = "org.apache.kafka.tools.TopicCommand"                        // kafka-topics.sh
	groupsTool       = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand" // kafka-consumer-groups.sh
	producerTool     = "org.apache.kafka.tools.ConsoleProducer"                     // kafka-console-producer.sh
	consumerTool     = "org.apache.kafka.tools.consumer.ConsoleConsumer"            // kafka-console-consumer.sh
	transactionsTool = "org.apache.kafka.tools.TransactionsCommand"                 // kafka-transactions.sh
	configsTool      = "org.apache.kafka.tools.ConfigCommand"                       // kafka-configs.sh
)

func need(t *testing.T) {
	t.Helper()
	if err := kafkaref.Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Kafka's tools are missing in CI (scripts/test.sh fetches them): %v", err)
		}
		t.Skipf("Kafka's tools are not available: %v", err)
	}
}

// tool runs a tool against the cluster and returns its standard output.
func tool(t *testing.T, c *clustertest.Cluster, stdin, class string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := kafkaref.Tool(ctx, stdin, class, append([]string{"--bootstrap-server", c.Seeds()}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s:\n%s", class[strings.LastIndex(class, ".")+1:], strings.Join(args, " "), out)
	return out
}

// table parses a tool's column output (a header line of upper-case names,
// then rows separated by runs of blanks) into maps by column name; header
// lines that open with the given first column start a table.
func table(t *testing.T, out, first string) []map[string]string {
	t.Helper()
	var cols []string
	var rows []map[string]string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == first {
			cols = f
			continue
		}
		if cols == nil || len(f) != len(cols) {
			continue
		}
		row := map[string]string{}
		for i, c := range cols {
			row[c] = f[i]
		}
		rows = append(rows, row)
	}
	return rows
}

func lines(out string) []string {
	var l []string
	for _, s := range strings.Split(strings.TrimSpace(out), "\n") {
		if s = strings.TrimSpace(s); s != "" {
			l = append(l, s)
		}
	}
	sort.Strings(l)
	return l
}

func start(t *testing.T) (*clustertest.Cluster, *kgo.Client) {
	t.Helper()
	need(t)
	c := clustertest.Start(t, clustertest.Options{Brokers: 2})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, cl
}

// TestKafkaTopics: kafka-topics creates, lists (with the internal topics,
// and without them when excluded), describes, adds partitions to and
// deletes a topic, and says so as it does on Kafka.
func TestKafkaTopics(t *testing.T) {
	c, _ := start(t)
	out := tool(t, c, "", topicsTool, "--create", "--topic", "orders", "--partitions", "3", "--config", "retention.ms=3600000")
	if !strings.Contains(out, "Created topic orders.") {
		t.Fatalf("create: %q", out)
	}
	tool(t, c, "", topicsTool, "--create", "--topic", "audit", "--partitions", "1")
	// As on Kafka, the internal topics are listed unless excluded.
	if got := lines(tool(t, c, "", topicsTool, "--list")); !slices.Equal(got, []string{"__consumer_offsets", "__transaction_state", "audit", "orders"}) {
		t.Fatalf("list: %q, want the internal topics, audit and orders", got)
	}
	if got := lines(tool(t, c, "", topicsTool, "--list", "--exclude-internal")); !slices.Equal(got, []string{"audit", "orders"}) {
		t.Fatalf("list --exclude-internal: %q, want audit and orders", got)
	}
	describe := func(want int) {
		t.Helper()
		out := tool(t, c, "", topicsTool, "--describe", "--topic", "orders")
		if !regexp.MustCompile(fmt.Sprintf(`Topic: orders\s+TopicId: \S+\s+PartitionCount: %d\s+ReplicationFactor: 1\s+Configs: .*retention.ms=3600000`, want)).MatchString(out) {
			t.Fatalf("describe: no summary line with %d partitions and retention.ms=3600000:\n%s", want, out)
		}
		leaders := regexp.MustCompile(`Partition: (\d+)\s+Leader: (\d+)\s+Replicas: (\d+)\s+Isr: (\d+)`).FindAllStringSubmatch(out, -1)
		if len(leaders) != want {
			t.Fatalf("describe: %d partition lines, want %d:\n%s", len(leaders), want, out)
		}
		for _, m := range leaders {
			if m[2] != m[3] || m[2] != m[4] || (m[2] != "0" && m[2] != "1") {
				t.Fatalf("partition %s: leader %s, replicas %s, isr %s; want one broker of 0, 1 in all three", m[1], m[2], m[3], m[4])
			}
		}
	}
	describe(3)
	tool(t, c, "", topicsTool, "--alter", "--topic", "orders", "--partitions", "5")
	describe(5)
	tool(t, c, "", topicsTool, "--delete", "--topic", "audit")
	if got := lines(tool(t, c, "", topicsTool, "--list", "--exclude-internal")); !slices.Equal(got, []string{"orders"}) {
		t.Fatalf("list after delete: %q, want orders", got)
	}
}

// TestKafkaConsoleProducerAndConsumer: what kafka-console-producer reads
// on its input, kafka-console-consumer prints, keys included.
func TestKafkaConsoleProducerAndConsumer(t *testing.T) {
	c, _ := start(t)
	tool(t, c, "", topicsTool, "--create", "--topic", "lines", "--partitions", "2")
	var in []string
	for i := range 30 {
		in = append(in, fmt.Sprintf("k%d:value %d", i%4, i))
	}
	tool(t, c, strings.Join(in, "\n")+"\n", producerTool, "--topic", "lines",
		"--reader-property", "parse.key=true", "--reader-property", "key.separator=:")
	out := tool(t, c, "", consumerTool, "--topic", "lines", "--from-beginning", "--max-messages", "30",
		"--formatter-property", "print.key=true", "--formatter-property", "key.separator=:")
	sort.Strings(in)
	if got := lines(out); !slices.Equal(got, in) {
		t.Fatalf("consumed %q\nwant %q", got, in)
	}
}

// TestKafkaConsumerGroups: kafka-consumer-groups lists a group, describes
// its members, partitions and lag while a member consumes, resets its
// offsets (--to-offset, --to-earliest: a new member reads from there),
// deletes offsets of one partition and deletes the group.
func TestKafkaConsumerGroups(t *testing.T) {
	c, cl := start(t)
	ctx := context.Background()
	tool(t, c, "", topicsTool, "--create", "--topic", "events", "--partitions", "2")
	for i := range 40 {
		cl.Produce(ctx, &kgo.Record{Topic: "events", Partition: int32(i % 2), Value: []byte(fmt.Sprint(i))}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A member that consumes everything and commits, then stays.
	m, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.ConsumerGroup("etl"), kgo.ConsumeTopics("events"),
		kgo.ClientID("etl-member"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for n := 0; n < 40; {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		fs := m.PollFetches(pctx)
		expired := pctx.Err()
		cancel()
		if expired != nil {
			t.Fatalf("consumed %d of 40 in 30s: %v", n, fs.Errors())
		}
		n += len(fs.Records())
		if err := m.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := lines(tool(t, c, "", groupsTool, "--list")); !slices.Contains(got, "etl") {
		t.Fatalf("list: %q has no etl", got)
	}
	rows := table(t, tool(t, c, "", groupsTool, "--describe", "--group", "etl"), "GROUP")
	if len(rows) != 2 {
		t.Fatalf("describe: %d partition rows, want 2", len(rows))
	}
	for _, r := range rows {
		if r["TOPIC"] != "events" || r["CURRENT-OFFSET"] != "20" || r["LOG-END-OFFSET"] != "20" || r["LAG"] != "0" ||
			r["CLIENT-ID"] != "etl-member" || !strings.HasPrefix(r["CONSUMER-ID"], "etl-member-") {
			t.Fatalf("describe row %v: want events at 20 of 20, lag 0, owned by etl-member", r)
		}
	}
	members := table(t, tool(t, c, "", groupsTool, "--describe", "--group", "etl", "--members"), "GROUP")
	if len(members) != 1 || members[0]["CLIENT-ID"] != "etl-member" || members[0]["#PARTITIONS"] != "2" {
		t.Fatalf("describe --members: %v, want etl-member with 2 partitions", members)
	}
	state := table(t, tool(t, c, "", groupsTool, "--describe", "--group", "etl", "--state"), "GROUP")
	if len(state) != 1 || state[0]["STATE"] != "Stable" || state[0]["#MEMBERS"] != "1" {
		t.Fatalf("describe --state: %v, want Stable with 1 member", state)
	}

	// Offsets of a group with members cannot be reset: the member leaves first.
	m.Close()
	reset := table(t, tool(t, c, "", groupsTool, "--group", "etl", "--reset-offsets", "--to-offset", "5", "--topic", "events", "--execute"), "GROUP")
	if len(reset) != 2 || reset[0]["NEW-OFFSET"] != "5" || reset[1]["NEW-OFFSET"] != "5" {
		t.Fatalf("reset-offsets: %v, want both partitions at 5", reset)
	}
	rows = table(t, tool(t, c, "", groupsTool, "--describe", "--group", "etl"), "GROUP")
	for _, r := range rows {
		if r["CURRENT-OFFSET"] != "5" || r["LAG"] != "15" || r["CONSUMER-ID"] != "-" {
			t.Fatalf("describe after reset %v: want offset 5, lag 15, no member", r)
		}
	}
	// What a member of the group reads next follows the reset.
	if first := firstOffsets(t, c, "etl", "events", 2); first[0] != 5 || first[1] != 5 {
		t.Fatalf("after --to-offset 5 a member of etl starts at %v, want 5 on both partitions", first)
	}
	reset = table(t, tool(t, c, "", groupsTool, "--group", "etl", "--reset-offsets", "--to-earliest", "--all-topics", "--execute"), "GROUP")
	if len(reset) != 2 || reset[0]["NEW-OFFSET"] != "0" || reset[1]["NEW-OFFSET"] != "0" {
		t.Fatalf("reset-offsets --to-earliest: %v, want both partitions at 0", reset)
	}
	if first := firstOffsets(t, c, "etl", "events", 2); first[0] != 0 || first[1] != 0 {
		t.Fatalf("after --to-earliest a member of etl starts at %v, want 0 on both partitions", first)
	}
	out := tool(t, c, "", groupsTool, "--group", "etl", "--delete-offsets", "--topic", "events:0")
	if !strings.Contains(out, "Request succeeded for deleting offsets from group etl.") || len(table(t, out, "TOPIC")) != 1 || table(t, out, "TOPIC")[0]["STATUS"] != "Successful" {
		t.Fatalf("delete-offsets: %q", out)
	}
	rows = table(t, tool(t, c, "", groupsTool, "--describe", "--group", "etl"), "GROUP")
	if len(rows) != 1 || rows[0]["PARTITION"] != "1" {
		t.Fatalf("describe after delete-offsets: %v, want partition 1 only", rows)
	}
	out = tool(t, c, "", groupsTool, "--delete", "--group", "etl")
	if !strings.Contains(out, "Deletion of requested consumer groups ('etl') was successful.") {
		t.Fatalf("delete: %q", out)
	}
	if got := lines(tool(t, c, "", groupsTool, "--list")); slices.Contains(got, "etl") {
		t.Fatalf("list after delete: %q still has etl", got)
	}
}

// firstOffsets joins group as a new member of topic's parts partitions,
// with no commit of its own and a reset to the end, so that what it reads
// first is the group's committed offset; it returns the first offset read
// per partition and leaves the group.
func firstOffsets(t *testing.T, c *clustertest.Cluster, group, topic string, parts int) map[int32]int64 {
	t.Helper()
	m, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	first := map[int32]int64{}
	for len(first) < parts {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		fs := m.PollFetches(ctx)
		expired := ctx.Err()
		cancel()
		if expired != nil {
			t.Fatalf("a new member of %s read %v in 30s: %v", group, first, fs.Errors())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := first[r.Partition]; !ok {
				first[r.Partition] = r.Offset
			}
		})
	}
	return first
}

// TestKafkaTransactions: kafka-transactions lists an open transaction and
// describes it (producer id and epoch, state, partitions), then shows it
// committed.
func TestKafkaTransactions(t *testing.T) {
	c, _ := start(t)
	ctx := context.Background()
	tool(t, c, "", topicsTool, "--create", "--topic", "payments", "--partitions", "2")
	p, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.TransactionalID("payments-tx"), kgo.DefaultProduceTopic("payments"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	list := table(t, tool(t, c, "", transactionsTool, "list"), "TransactionalId")
	if len(list) != 1 || list[0]["TransactionalId"] != "payments-tx" || list[0]["TransactionState"] != "Ongoing" {
		t.Fatalf("list: %v, want payments-tx Ongoing", list)
	}
	out := tool(t, c, "", transactionsTool, "describe", "--transactional-id", "payments-tx")
	if !strings.Contains(out, "payments-tx") || !strings.Contains(out, "Ongoing") || !strings.Contains(out, "payments-1") {
		t.Fatalf("describe: %q, want payments-tx Ongoing on payments-1", out)
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	list = table(t, tool(t, c, "", transactionsTool, "list"), "TransactionalId")
	if len(list) != 1 || list[0]["TransactionState"] != "CompleteCommit" {
		t.Fatalf("list after commit: %v, want CompleteCommit", list)
	}
}

// TestKafkaConfigs: kafka-configs describes a topic's configs as set at
// creation, alters them (--add-config, --delete-config), and sets,
// describes and deletes a group's configs (KIP-848's GROUP resource), with
// the output Kafka 4.4 prints.
func TestKafkaConfigs(t *testing.T) {
	c, _ := start(t)
	tool(t, c, "", topicsTool, "--create", "--topic", "logs", "--partitions", "1", "--config", "cleanup.policy=compact")
	out := tool(t, c, "", configsTool, "--describe", "--entity-type", "topics", "--entity-name", "logs")
	if !strings.Contains(out, "Dynamic configs for topic logs are:") || !strings.Contains(out, "cleanup.policy=compact") {
		t.Fatalf("describe: %q, want cleanup.policy=compact", out)
	}
	topic := []string{"--entity-type", "topics", "--entity-name", "logs"}
	out = tool(t, c, "", configsTool, append([]string{"--alter", "--add-config", "retention.ms=1000,max.message.bytes=2048"}, topic...)...)
	if !strings.Contains(out, "Completed updating config for topic logs.") {
		t.Fatalf("alter topic: %q", out)
	}
	tool(t, c, "", configsTool, append([]string{"--alter", "--delete-config", "max.message.bytes"}, topic...)...)
	out = tool(t, c, "", configsTool, append([]string{"--describe"}, topic...)...)
	if !strings.Contains(out, "retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000") ||
		!strings.Contains(out, "cleanup.policy=compact") || strings.Contains(out, "max.message.bytes") {
		t.Fatalf("describe after altering the topic: %q", out)
	}

	group := []string{"--entity-type", "groups", "--entity-name", "billing"}
	out = tool(t, c, "", configsTool, append([]string{"--alter", "--add-config", "consumer.heartbeat.interval.ms=6000,consumer.session.timeout.ms=50000"}, group...)...)
	if !strings.Contains(out, "Completed updating config for group billing.") {
		t.Fatalf("alter: %q", out)
	}
	out = tool(t, c, "", configsTool, append([]string{"--describe"}, group...)...)
	for _, want := range []string{"Dynamic configs for group billing are:",
		"consumer.heartbeat.interval.ms=6000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.heartbeat.interval.ms=6000, DEFAULT_CONFIG:group.consumer.heartbeat.interval.ms=5000}",
		"consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe group: %q, want %q", out, want)
		}
	}
	tool(t, c, "", configsTool, append([]string{"--alter", "--delete-config", "consumer.session.timeout.ms"}, group...)...)
	out = tool(t, c, "", configsTool, append([]string{"--describe", "--all"}, group...)...)
	if !strings.Contains(out, "All configs for group billing are:") || !strings.Contains(out, "consumer.session.timeout.ms=45000 sensitive=false synonyms={DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}") ||
		!strings.Contains(out, "consumer.heartbeat.interval.ms=6000") {
		t.Fatalf("describe --all after deleting the session timeout: %q", out)
	}
}
