package broker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCreateTopicsRefusesConfigsOutsideKafkaBounds is the regression test for
// CreateTopics accepting segment.bytes=1 (and 0): every batch then rolled a
// segment, and the broker ran out of file descriptors. Like Kafka, the broker
// answers INVALID_CONFIG with ConfigDef's message, for real and validate-only
// requests, and registers nothing.
func TestCreateTopicsRefusesConfigsOutsideKafkaBounds(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	ctx := context.Background()
	for _, tc := range []struct{ key, value, want string }{
		{"segment.bytes", "1", "Invalid value 1 for configuration segment.bytes: Value must be at least 1048576"},
		{"segment.bytes", "0", "Invalid value 0 for configuration segment.bytes: Value must be at least 1048576"},
		{"segment.ms", "0", "Invalid value 0 for configuration segment.ms: Value must be at least 1"},
		{"max.message.bytes", "-1", "Invalid value -1 for configuration max.message.bytes: Value must be at least 0"},
		{"retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"},
		{"min.insync.replicas", "0", "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"},
		{"cleanup.policy", "shred", "Invalid value shred for configuration cleanup.policy: String must be one of: compact, delete"},
		{"no.such.config", "1", "Unknown topic config name: no.such.config"},
	} {
		for _, validateOnly := range []bool{false, true} {
			req := kmsg.NewPtrCreateTopicsRequest()
			req.ValidateOnly = validateOnly
			req.TimeoutMillis = 5000
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "bounds", 1, -1
			cfg := kmsg.NewCreateTopicsRequestTopicConfig()
			cfg.Name, cfg.Value = tc.key, kmsg.StringPtr(tc.value)
			rt.Configs = append(rt.Configs, cfg)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				t.Fatal(err)
			}
			st := resp.Topics[0]
			if err := kerr.ErrorForCode(st.ErrorCode); err != kerr.InvalidConfig {
				t.Errorf("%s=%s validateOnly=%v: %v, want INVALID_CONFIG", tc.key, tc.value, validateOnly, err)
				continue
			}
			if got := kmsgString(st.ErrorMessage); got != tc.want {
				t.Errorf("%s=%s: message %q, want %q", tc.key, tc.value, got, tc.want)
			}
		}
	}
	if _, ok := b.topics.Get("bounds"); ok {
		t.Fatal("a topic with a refused config was registered")
	}
	// The smallest segment Kafka allows works.
	createTopic(t, cl, "smallest", 1, map[string]*string{"segment.bytes": kadm.StringPtr("1048576")})
	produceN(t, cl, "smallest", 10)
	consume(t, b, "smallest", 10)
}

// TestBrokerTopicDefaultsAreCheckedWithKafkaBounds: the topic defaults a
// broker is configured with pass the same Kafka bounds as topic configs, and
// a refusal names the broker config (log.segment.bytes, ...).
func TestBrokerTopicDefaultsAreCheckedWithKafkaBounds(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.DefaultSegmentBytes = 1 }, "Invalid value 1 for configuration log.segment.bytes: Value must be at least 1048576"},
		{func(c *Config) { c.DefaultSegmentBytes = 1 << 31 }, "Invalid value 2147483648 for configuration log.segment.bytes: Not a number of type INT"},
		{func(c *Config) { c.DefaultRetentionMs = -2 }, "Invalid value -2 for configuration log.retention.ms: Value must be at least -1"},
	} {
		cfg := Config{}
		cfg.setDefaults()
		tc.mod(&cfg)
		err := cfg.validateTopicDefaults()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	cfg := Config{}
	cfg.setDefaults()
	if err := cfg.validateTopicDefaults(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
}

// TestTopicNameOf249CharactersWorksEndToEnd is the regression test for topic
// names of 229-249 characters failing with UNKNOWN_SERVER_ERROR: a temporary
// file named after the topic passed the file system's 255-byte limit. Kafka
// allows 249 characters; create, produce, fetch, add partitions, restart and
// delete work at that length.
func TestTopicNameOf249CharactersWorksEndToEnd(t *testing.T) {
	dir := t.TempDir()
	name := strings.Repeat("L", 249)
	b := startBroker(t, dir, nil)
	cl := client(t, b)
	createTopic(t, cl, name, 2, nil)
	produceN(t, cl, name, 40)
	if got := consume(t, b, name, 40); len(got) != 40 {
		t.Fatalf("consumed %d records", len(got))
	}
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreatePartitions(ctx, 1, name); err != nil {
		t.Fatalf("create partitions: %v", err)
	}

	// Restart: everything reads back, and appends continue.
	cl.Close()
	stop(t, b)
	b = startBroker(t, dir, nil)
	cl = client(t, b)
	if n := b.topics.All(); len(n) != 1 || n[0].Partitions != 3 {
		t.Fatalf("after restart the registry holds %+v", n)
	}
	produceN(t, cl, name, 10)
	if got := consume(t, b, name, 50); len(got) != 50 {
		t.Fatalf("after restart: consumed %d records", len(got))
	}

	adm := kadm.NewClient(cl)
	resp, err := adm.DeleteTopics(ctx, name)
	if err != nil || resp[name].Err != nil {
		t.Fatalf("delete: %v %v", err, resp[name].Err)
	}
	if _, ok := b.topics.Get(name); ok {
		t.Fatal("the deleted topic is still registered")
	}
	resp, _ = adm.DeleteTopics(ctx, name)
	if err := resp[name].Err; !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("second delete: %v", err)
	}
}

// TestDeletingA249CharacterTopicRemovesItsData: the data of a deleted topic
// with a name of 223-249 characters stayed on the volume, and a topic
// created again under that name inherited its records. The broker moves the
// topic directory aside as "<name>-<32-hex id>" before removing it, a name
// longer than 255 bytes (broker.go, removeTopicData).
func TestDeletingA249CharacterTopicRemovesItsData(t *testing.T) {
	dir := t.TempDir()
	name := strings.Repeat("D", 249)
	b := startBroker(t, dir, nil)
	cl := client(t, b)
	createTopic(t, cl, name, 1, nil)
	produceN(t, cl, name, 5)
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	resp, err := adm.DeleteTopics(ctx, name)
	if err != nil || resp[name].Err != nil {
		t.Fatalf("delete: %v %v", err, resp[name].Err)
	}
	if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
		t.Errorf("data of the deleted topic is still on the volume: %v", err)
	}
	// Created again under the same name, it starts empty.
	createTopic(t, cl, name, 1, nil)
	offs, err := adm.ListEndOffsets(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Offset != 0 {
			t.Errorf("re-created topic: partition %d ends at %d (%v)", o.Partition, o.Offset, o.Err)
		}
	})
}

func kmsgString(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
