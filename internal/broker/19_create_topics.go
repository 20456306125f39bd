package broker

// CreateTopics. Replication factor -1 or 1 only: the shared
// volume is the replication. Any broker may create (the registry's exclusive
// create settles races between brokers).

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/topics"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.CreateTopics, 0, 7, (*Broker).handleCreateTopics) }

func (b *Broker) handleCreateTopics(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.CreateTopicsRequest)
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	var created []*topics.Topic
	seen := map[string]int{}
	for _, rt := range r.Topics {
		seen[rt.Topic]++
	}
	for _, rt := range r.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		fail := func(code *kerr.Error, msg string) {
			st.ErrorCode = code.Code
			st.ErrorMessage = &msg
			st.NumPartitions, st.ReplicationFactor = -1, -1
			c.log.Info("CreateTopics refused", "topic", rt.Topic, "error", code.Message, "why", msg)
		}
		if seen[rt.Topic] > 1 {
			fail(kerr.InvalidRequest, "topic named more than once in one request")
			resp.Topics = append(resp.Topics, st)
			continue
		}
		if _, internal := b.internalTopic(rt.Topic); internal {
			fail(kerr.TopicAlreadyExists, "Topic '"+rt.Topic+"' already exists.")
			resp.Topics = append(resp.Topics, st)
			continue
		}
		n := rt.NumPartitions
		if len(rt.ReplicaAssignment) > 0 {
			if n != -1 || rt.ReplicationFactor != -1 {
				fail(kerr.InvalidRequest, "replica assignment given with a partition count or replication factor")
				resp.Topics = append(resp.Topics, st)
				continue
			}
			n = int32(len(rt.ReplicaAssignment))
		}
		if n == -1 {
			n = b.cfg.DefaultPartitions
		}
		if rt.ReplicationFactor != -1 && rt.ReplicationFactor != 1 {
			fail(kerr.InvalidReplicationFactor, fmt.Sprintf("replication factor %d: kaas brokers share one volume, use 1 or -1", rt.ReplicationFactor))
			resp.Topics = append(resp.Topics, st)
			continue
		}
		configs := map[string]string{}
		for _, cfg := range rt.Configs {
			if cfg.Value == nil {
				continue
			}
			configs[cfg.Name] = *cfg.Value
		}
		if len(configs) == 0 {
			configs = nil
		}
		t, err := b.topics.Create(rt.Topic, n, configs, r.ValidateOnly)
		if err != nil {
			switch {
			case errors.Is(err, topics.ErrExists):
				fail(kerr.TopicAlreadyExists, err.Error())
			case errors.Is(err, topics.ErrInvalidName):
				fail(kerr.InvalidTopicException, err.Error())
			case errors.Is(err, topics.ErrInvalidCount):
				fail(kerr.InvalidPartitions, err.Error())
			case errors.Is(err, topics.ErrInvalidConfig):
				// Kafka's own words ("Invalid value 1 for configuration
				// segment.bytes: Value must be at least 1048576").
				msg := err.Error()
				if ce := (*topics.ConfigError)(nil); errors.As(err, &ce) {
					msg = ce.Error()
				}
				fail(kerr.InvalidConfig, msg)
			case volumeFailure(err):
				// A full, read-only or failing volume: Kafka's answer for
				// a log dir it cannot write.
				b.log.Error("creating topic failed: the volume refused the write", "topic", rt.Topic, "err", err)
				fail(kerr.KafkaStorageError, clientMessage(kerr.KafkaStorageError, err))
			default:
				b.log.Error("creating topic failed", "topic", rt.Topic, "err", err)
				fail(kerr.UnknownServerError, clientMessage(kerr.UnknownServerError, err)) // no volume paths to clients
			}
			resp.Topics = append(resp.Topics, st)
			continue
		}
		if !r.ValidateOnly {
			b.log.Info("topic created", "topic", t.Name, "partitions", t.Partitions, "id", t.ID.String())
			st.TopicID = t.ID
			created = append(created, t)
		}
		st.NumPartitions, st.ReplicationFactor = t.Partitions, 1
		st.Configs = b.describeTopicConfigs(t)
		resp.Topics = append(resp.Topics, st)
	}
	if len(created) == 0 {
		return now(resp)
	}
	b.cfg.TopicsChanged()
	// Like Kafka, answer once the new partitions have leaders (bounded by the
	// request's timeout), so that a client may produce at once.
	timeout := min(time.Duration(r.TimeoutMillis)*time.Millisecond, 10*time.Second)
	return func() kmsg.Response {
		if err := b.waitForLeaders(ctx, created, timeout); err != nil {
			c.log.Info("CreateTopics answered before every partition had a leader", "err", err)
		}
		return resp
	}
}

// describeTopicConfigs lists the configs kaas acts on, with their source.
func (b *Broker) describeTopicConfigs(t *topics.Topic) []kmsg.CreateTopicsResponseTopicConfig {
	var out []kmsg.CreateTopicsResponseTopicConfig
	for _, d := range b.topicConfigs(t) {
		cfg := kmsg.NewCreateTopicsResponseTopicConfig()
		cfg.Name, cfg.Source = d.name, d.source
		v := d.value
		cfg.Value = &v
		out = append(out, cfg)
	}
	return out
}

type topicConfig struct {
	name, value string
	source      int8 // kmsg.ConfigSource
}

// topicDefault is the broker's default for a topic config kaas acts on,
// with the broker config Kafka names it by.
type topicDefault struct {
	name, brokerName, value string
}

// topicDefaults lists the defaults of the topic configs kaas acts on: the
// one place that pairs them with Config's fields and Kafka's broker names.
func (c *Config) topicDefaults() []topicDefault {
	return []topicDefault{
		{"cleanup.policy", "log.cleanup.policy", "delete"},
		{"max.message.bytes", "message.max.bytes", strconv.Itoa(int(c.DefaultMaxMessageBytes))},
		{"message.timestamp.type", "log.message.timestamp.type", "CreateTime"},
		{"retention.bytes", "log.retention.bytes", strconv.FormatInt(c.DefaultRetentionBytes, 10)},
		{"retention.ms", "log.retention.ms", strconv.FormatInt(c.DefaultRetentionMs, 10)},
		{"segment.bytes", "log.segment.bytes", strconv.FormatInt(c.DefaultSegmentBytes, 10)},
	}
}

// validateTopicDefaults checks the broker's topic defaults with the bounds of
// the topic configs they stand for, and names the broker config in the
// error ("Invalid value 1 for configuration log.segment.bytes: ..."), as a
// Kafka broker refuses to start with such a value. Call after setDefaults.
func (c *Config) validateTopicDefaults() error {
	for _, d := range c.topicDefaults() {
		err := topics.ValidateConfig(d.name, d.value)
		if err == nil {
			continue
		}
		if ce := (*topics.ConfigError)(nil); errors.As(err, &ce) {
			named := *ce
			named.Name = d.brokerName
			err = &named
		}
		return fmt.Errorf("broker: topic default: %w", err)
	}
	return nil
}

// topicConfigs is a topic's effective configs: every config set on it, and
// the defaults of the configs kaas acts on.
func (b *Broker) topicConfigs(t *topics.Topic) []topicConfig {
	var out []topicConfig
	defaults := map[string]bool{}
	for _, d := range b.cfg.topicDefaults() {
		defaults[d.name] = true
		v, src := d.value, int8(kmsg.ConfigSourceDefaultConfig)
		if set, ok := t.Configs[d.name]; ok {
			v, src = set, int8(kmsg.ConfigSourceDynamicTopicConfig)
		}
		out = append(out, topicConfig{d.name, v, src})
	}
	for name, v := range t.Configs {
		if !defaults[name] {
			out = append(out, topicConfig{name, v, int8(kmsg.ConfigSourceDynamicTopicConfig)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
