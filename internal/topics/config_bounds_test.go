package topics

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigsOutsideKafkaBoundsAreRefused is the regression test for
// segment.bytes=1 being accepted: every batch then rolled a segment and the
// broker ran out of descriptors. Every config kaas accepts is checked with the
// bound of Kafka 4.x's LogConfig, and refused with ConfigDef's wording.
func TestConfigsOutsideKafkaBoundsAreRefused(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{"segment.bytes", "1", "Invalid value 1 for configuration segment.bytes: Value must be at least 1048576"},
		{"segment.bytes", "0", "Invalid value 0 for configuration segment.bytes: Value must be at least 1048576"},
		{"segment.bytes", "1048575", "Value must be at least 1048576"},
		{"segment.bytes", "2147483648", "Invalid value 2147483648 for configuration segment.bytes: Not a number of type INT"},
		{"segment.ms", "0", "Invalid value 0 for configuration segment.ms: Value must be at least 1"},
		{"segment.jitter.ms", "-1", "Value must be at least 0"},
		{"segment.index.bytes", "3", "Invalid value 3 for configuration segment.index.bytes: Value must be at least 4"},
		{"max.message.bytes", "-1", "Invalid value -1 for configuration max.message.bytes: Value must be at least 0"},
		{"retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"},
		{"retention.ms", "soon", "Invalid value soon for configuration retention.ms: Not a number of type LONG"},
		{"retention.bytes", "1.5", "Not a number of type LONG"},
		{"min.insync.replicas", "0", "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"},
		{"flush.messages", "0", "Value must be at least 1"},
		{"flush.ms", "-1", "Value must be at least 0"},
		{"index.interval.bytes", "-1", "Value must be at least 0"},
		{"delete.retention.ms", "-1", "Value must be at least 0"},
		{"file.delete.delay.ms", "-1", "Value must be at least 0"},
		{"min.compaction.lag.ms", "-1", "Value must be at least 0"},
		{"max.compaction.lag.ms", "0", "Value must be at least 1"},
		{"message.timestamp.before.max.ms", "-1", "Value must be at least 0"},
		{"message.timestamp.after.max.ms", "-1", "Value must be at least 0"},
		{"message.timestamp.difference.max.ms", "-1", "Value must be at least 0"},
		{"local.retention.ms", "-3", "Value must be at least -2"},
		{"local.retention.bytes", "-3", "Value must be at least -2"},
		{"min.cleanable.dirty.ratio", "1.5", "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"},
		{"min.cleanable.dirty.ratio", "-0.1", "Value must be at least 0"},
		{"min.cleanable.dirty.ratio", "half", "Not a number of type DOUBLE"},
		{"min.cleanable.dirty.ratio", "NaN", "Not a number of type DOUBLE"},
		{"cleanup.policy", "shred", "Invalid value shred for configuration cleanup.policy: String must be one of: compact, delete"},
		{"cleanup.policy", "delete,", "String must be one of: compact, delete"},
		{"message.timestamp.type", "Now", "String must be one of: CreateTime, LogAppendTime"},
		{"compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"},
		{"preallocate", "yes", "Invalid value yes for configuration preallocate: Expected value to be either true or false"},
		{"unclean.leader.election.enable", "1", "Expected value to be either true or false"},
		{"message.downconversion.enable", "", "Expected value to be either true or false"},
		{"remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker"},
		{"leader.replication.throttled.replicas", "x", "leader.replication.throttled.replicas must be the literal '*' or a list of replicas"},
		{"follower.replication.throttled.replicas", "0:1,2", "must be the literal '*'"},
		{"no.such.config", "1", "Unknown topic config name: no.such.config"},
	} {
		err := ValidateConfigs(map[string]string{tc.key: tc.value})
		var ce *ConfigError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) {
			t.Errorf("%s=%q: got %v, want an invalid config error", tc.key, tc.value, err)
			continue
		}
		if !strings.Contains(ce.Error(), tc.want) {
			t.Errorf("%s=%q: message %q does not say %q", tc.key, tc.value, ce.Error(), tc.want)
		}
		if ce.Name != tc.key {
			t.Errorf("%s=%q: error names %q", tc.key, tc.value, ce.Name)
		}
	}
	// Kafka's cross-config rule (LogConfig.validateValues).
	err := ValidateConfigs(map[string]string{"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)") {
		t.Errorf("min > max compaction lag: %v", err)
	}
}

// TestConfigsAtKafkaBoundsAreAccepted: the bounds themselves, Kafka's
// sentinels (-1 forever, -2 for local retention) and the value forms Kafka's
// parser takes (surrounding spaces, any case for booleans) are accepted.
func TestConfigsAtKafkaBoundsAreAccepted(t *testing.T) {
	for _, cfg := range []map[string]string{
		{"segment.bytes": "1048576", "segment.ms": "1", "segment.index.bytes": "4", "segment.jitter.ms": "0"},
		{"segment.bytes": "2147483647", "max.message.bytes": "0", "retention.ms": "-1", "retention.bytes": "-9223372036854775808"},
		{"min.insync.replicas": "1", "flush.messages": "1", "flush.ms": "0", "index.interval.bytes": "0"},
		{"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5", "delete.retention.ms": "0", "file.delete.delay.ms": "0"},
		{"local.retention.ms": "-2", "local.retention.bytes": "-2", "min.cleanable.dirty.ratio": "0", "remote.storage.enable": "false"},
		{"min.cleanable.dirty.ratio": "1", "cleanup.policy": "compact, delete", "compression.type": "producer"},
		{"cleanup.policy": "", "preallocate": "TRUE", "unclean.leader.election.enable": " false "},
		{"segment.bytes": " 1048576 ", "message.timestamp.type": "LogAppendTime", "message.downconversion.enable": "true"},
		{"leader.replication.throttled.replicas": "*", "follower.replication.throttled.replicas": "0:1, 1:2"},
		{"leader.replication.throttled.replicas": ""},
	} {
		if err := ValidateConfigs(cfg); err != nil {
			t.Errorf("%v: %v", cfg, err)
		}
	}
}

// TestCreateStoresConfigsAsKafkaParsesThem: a value Kafka accepts with
// surrounding spaces is stored trimmed, so that readers of the topic file
// (which parse strictly) see the value that was validated.
func TestCreateStoresConfigsAsKafkaParsesThem(t *testing.T) {
	r, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := r.Create("spaced", 1, map[string]string{"segment.bytes": " 2097152 ", "message.timestamp.type": " LogAppendTime"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := tp.Int64("segment.bytes", 0); got != 2097152 {
		t.Fatalf("segment.bytes read back as %d", got)
	}
	if got := tp.String("message.timestamp.type", ""); got != "LogAppendTime" {
		t.Fatalf("message.timestamp.type read back as %q", got)
	}
}

// TestCreateRefusesOutOfBoundsConfigsAndWritesNothing: Create (with and
// without validateOnly) refuses before anything reaches the volume.
func TestCreateRefusesOutOfBoundsConfigsAndWritesNothing(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, validateOnly := range []bool{true, false} {
		_, err := r.Create("tiny", 1, map[string]string{"segment.bytes": "1"}, validateOnly)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Name != "segment.bytes" {
			t.Fatalf("validateOnly=%v: %v", validateOnly, err)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "__cluster", "topics"))
	if len(ents) != 0 {
		t.Fatalf("%d files written for refused topics", len(ents))
	}
}

// TestTopicWithAnOutOfBoundsConfigFromBeforeStaysReadable: a topic file an
// older kaas wrote with segment.bytes=1 is still served (with a warning), so
// that its data stays reachable.
func TestTopicWithAnOutOfBoundsConfigFromBeforeStaysReadable(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "__cluster", "topics"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := `{"name":"old","id":"00112233445566778899aabbccddeeff","partitions":1,"configs":{"segment.bytes":"1"}}`
	if err := os.WriteFile(filepath.Join(dir, "__cluster", "topics", "old.json"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tp, ok := r.Get("old"); !ok || tp.Int64("segment.bytes", 0) != 1 {
		t.Fatalf("old topic: %+v %v", tp, ok)
	}
}
