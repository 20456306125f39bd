package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/clustertest"
)

// TestAdminCommands drives `kaas topics|groups|route|cluster` against a
// three-broker cluster, as an operator would, and checks what they print
// (the --json forms, and the tables where a person reads them).
func TestAdminCommands(t *testing.T) {
	bin := buildKaas(t)
	c := clustertest.Start(t, clustertest.Options{Brokers: 3})
	// runOn runs a command against the brokers at seeds.
	runOn := func(seeds string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "-b", seeds)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kaas %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run := func(args ...string) string {
		t.Helper()
		return runOn(c.Seeds(), args...)
	}
	// decode replaces *v: unmarshalling into old rows would keep the
	// fields the new JSON omits.
	decode := func(out string, v any) {
		t.Helper()
		reflect.ValueOf(v).Elem().SetZero()
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
	}

	if out := run("topics", "create", "orders", "-p", "3", "-c", "retention.ms=60000"); !strings.Contains(out, "created topic orders with 3 partitions") {
		t.Fatalf("create: %s", out)
	}
	run("topics", "create", "audit")
	// Metadata shows a new topic once every broker has read it from the
	// volume (as on Kafka, where metadata propagates after CreateTopics).
	var topics []topicRow
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		decode(run("topics", "list", "--exclude-internal", "--json"), &topics)
		if len(topics) == 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(topics) != 2 || topics[0].Name != "audit" || topics[0].Partitions != 1 || topics[1].Name != "orders" || topics[1].Partitions != 3 {
		t.Fatalf("list: %+v", topics)
	}
	// Without --exclude-internal the internal topics are listed too, marked
	// internal, as kafka-topics --list shows them.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		decode(run("topics", "list", "--json"), &topics)
		if len(topics) == 4 || time.Now().After(deadline) {
			break
		}
	}
	if len(topics) != 4 || topics[0].Name != "__consumer_offsets" || !topics[0].Internal || topics[0].Partitions != 50 ||
		topics[1].Name != "__transaction_state" || !topics[1].Internal || topics[2].Internal {
		t.Fatalf("list with the internal topics: %+v", topics)
	}
	run("topics", "add-partitions", "orders", "-p", "4")
	// The new partition has a leader once the controller has assigned it,
	// and every broker shows it once it has read the topic again from the
	// volume (Kafka's brokers too learn it a moment after the answer): the
	// group below must see 4 partitions from whichever broker it asks.
	for _, addr := range c.Addrs() {
		deadline := time.Now().Add(20 * time.Second)
		for {
			var details []topicDetail
			decode(runOn(addr, "topics", "describe", "orders", "--json"), &details)
			if len(details) != 1 || len(details[0].PartitionsList) < 3 || details[0].Configs["retention.ms"] != "60000" {
				t.Fatalf("describe on %s: %+v", addr, details)
			}
			led := 0
			for _, p := range details[0].PartitionsList {
				if p.Leader >= 0 && p.Leader <= 2 && p.Error == "" {
					led++
				}
			}
			if led == 4 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("broker %s: partitions without a leader: %+v", addr, details[0].PartitionsList)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if out := run("topics", "describe", "orders"); !strings.Contains(out, "Topic: orders") || !strings.Contains(out, "retention.ms=60000") {
		t.Fatalf("describe table: %s", out)
	}
	run("topics", "delete", "audit")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		decode(run("topics", "list", "--exclude-internal", "--json"), &topics)
		if len(topics) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if len(topics) != 1 {
		t.Fatalf("list after delete: %+v", topics)
	}

	// A group with a live member that consumed 10 of 12 records.
	ctx := context.Background()
	p, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 12 {
		if err := p.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 2), Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	m, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"),
		kgo.ClientID("billing-1"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var recs []*kgo.Record
	for len(recs) < 12 {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		fs := m.PollFetches(pctx)
		expired := pctx.Err()
		cancel()
		if expired != nil {
			t.Fatalf("consumed %d of 12", len(recs))
		}
		recs = append(recs, fs.Records()...)
	}
	var commit []*kgo.Record
	for _, r := range recs {
		if r.Partition == 1 || r.Offset < 4 { // all of partition 1, 4 of partition 0's 6
			commit = append(commit, r)
		}
	}
	if err := m.CommitRecords(ctx, commit...); err != nil {
		t.Fatal(err)
	}
	var groups []groupRow
	decode(run("groups", "list", "--json"), &groups)
	if len(groups) != 1 || groups[0].Group != "billing" || groups[0].State != "Stable" {
		t.Fatalf("groups list: %+v", groups)
	}
	var gd []groupDetail
	decode(run("groups", "describe", "billing", "--json"), &gd)
	if len(gd) != 1 || gd[0].State != "Stable" || len(gd[0].Members) != 1 || gd[0].Members[0].ClientID != "billing-1" ||
		len(gd[0].Members[0].Assigned) != 4 || gd[0].TotalLag != 2 {
		t.Fatalf("groups describe: %+v", gd)
	}
	lag := map[int32]lagRow{}
	for _, o := range gd[0].Offsets {
		lag[o.Partition] = o
		if o.Committed >= 0 && o.Lag != o.End-o.Committed {
			t.Errorf("partition %d: lag %d, but end %d - committed %d = %d", o.Partition, o.Lag, o.End, o.Committed, o.End-o.Committed)
		}
	}
	if l := lag[0]; l.Committed != 4 || l.End != 6 || l.Lag != 2 || l.ClientID != "billing-1" {
		t.Fatalf("partition 0: %+v, want committed 4 of 6, lag 2, owned by billing-1", l)
	}
	if out := run("groups", "describe", "billing"); !strings.Contains(out, "CURRENT-OFFSET") || !strings.Contains(out, "billing-1") {
		t.Fatalf("describe table: %s", out)
	}

	m.Close() // leaves: offsets can be reset now
	out := run("groups", "reset-offsets", "billing", "-t", "orders", "--to-earliest")
	if !strings.Contains(out, "dry run") {
		t.Fatalf("reset without --execute: %s", out)
	}
	decode(run("groups", "describe", "billing", "--json"), &gd)
	if gd[0].TotalLag != 2 {
		t.Fatalf("a dry run committed: lag %d", gd[0].TotalLag)
	}
	run("groups", "reset-offsets", "billing", "-t", "orders", "--to-offset", "1", "--execute")
	decode(run("groups", "describe", "billing", "--json"), &gd)
	if gd[0].State != "Empty" || gd[0].TotalLag != 5+5 {
		t.Fatalf("after reset to 1: %+v, want Empty with lag 10", gd[0])
	}
	run("groups", "delete-offsets", "billing", "-t", "orders:0")
	decode(run("groups", "describe", "billing", "--json"), &gd)
	for _, o := range gd[0].Offsets {
		if o.Partition == 0 && o.Committed >= 0 {
			t.Fatalf("partition 0 still committed after delete-offsets: %+v", o)
		}
	}

	// route: asked of the cluster, and read from the volume with why.
	var asked, read []routeRow
	decode(run("route", "billing", "--json"), &asked)
	decode(run("route", "billing", "--json", "--data-dir", c.Dir), &read)
	if len(asked) != 1 || len(read) != 1 || asked[0].NodeID != read[0].NodeID || asked[0].NodeID < 0 ||
		!(strings.HasPrefix(read[0].Why, "hash") || strings.HasPrefix(read[0].Why, "explicit")) {
		t.Fatalf("route: asked %+v, read %+v", asked, read)
	}

	var cl map[string]json.RawMessage
	decode(run("cluster", "--json", "--data-dir", c.Dir), &cl)
	var brokers []brokerRow
	decode(string(cl["brokers"]), &brokers)
	leads, controllers := 0, 0
	for _, b := range brokers {
		leads += b.Leads
		if b.Controller {
			controllers++
		}
		if b.Health != "alive" {
			t.Errorf("cluster: broker %d is %q", b.NodeID, b.Health)
		}
	}
	if len(brokers) != 3 || leads != 4 || controllers != 1 {
		t.Fatalf("cluster: %+v, want 3 brokers leading the 4 partitions, one controller", brokers)
	}

	run("groups", "delete", "billing")
	decode(run("groups", "list", "--json"), &groups)
	if len(groups) != 0 {
		t.Fatalf("groups after delete: %+v", groups)
	}
	if out, err := exec.Command(bin, "groups", "describe", "-b", c.Seeds(), "nope", "--timeout", "10s").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "group nope: GROUP_ID_NOT_FOUND") {
		t.Fatalf("describe of a missing group: %v\n%s", err, out)
	}
}
