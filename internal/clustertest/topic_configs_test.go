package clustertest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAlteredTopicConfigIsDescribedAtOnceByEveryBroker is the regression
// test for a broker that is not the controller describing a topic's configs
// as they were before an IncrementalAlterConfigs that had already answered:
// it served its cached copy of the topic until its next registry refresh (up
// to a second later), so kafka-configs --describe right after --alter could
// still print a config just deleted (kafkatools.TestKafkaConfigs failed so
// in CI). As on Kafka, an alter that has answered is what every broker
// describes next.
func TestAlteredTopicConfigIsDescribedAtOnceByEveryBroker(t *testing.T) {
	c := Start(t, Options{Brokers: 2})
	cl := client(t, c)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "tc-t"); err != nil {
		t.Fatal(err)
	}
	ctrl := c.Controller()
	describe := func(node int) map[string]string {
		t.Helper()
		req := kmsg.NewPtrDescribeConfigsRequest()
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "tc-t"
		req.Resources = append(req.Resources, res)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(rctx, cl.Broker(node))
		if err != nil || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("DescribeConfigs on broker %d: %v %+v", node, err, resp)
		}
		dynamic := map[string]string{}
		for _, cfg := range resp.Resources[0].Configs {
			if cfg.Source == kmsg.ConfigSourceDynamicTopicConfig && cfg.Value != nil {
				dynamic[cfg.Name] = *cfg.Value
			}
		}
		return dynamic
	}
	alter := func(op kmsg.IncrementalAlterConfigOp, name, value string) {
		t.Helper()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "tc-t"
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Op, cfg.Value = name, op, kmsg.StringPtr(value)
		res.Configs = append(res.Configs, cfg)
		req.Resources = append(req.Resources, res)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(rctx, cl.Broker(ctrl))
		if err != nil || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("IncrementalAlterConfigs %s=%s: %v %+v", name, value, err, resp)
		}
	}
	// Every broker has the topic cached before the alters.
	for node := range 2 {
		if got := describe(node); got["cleanup.policy"] != "compact" {
			t.Fatalf("broker %d describes %v before any alter, want cleanup.policy=compact", node, got)
		}
	}
	for i := range 5 {
		ms := strconv.Itoa(1000 * (i + 1))
		alter(kmsg.IncrementalAlterConfigOpSet, "retention.ms", ms)
		alter(kmsg.IncrementalAlterConfigOpSet, "max.message.bytes", "2048")
		alter(kmsg.IncrementalAlterConfigOpDelete, "max.message.bytes", "")
		for node := range 2 {
			got := describe(node)
			if got["retention.ms"] != ms || got["cleanup.policy"] != "compact" || got["max.message.bytes"] != "" {
				t.Fatalf("round %d: broker %d (controller %d) describes %v, want retention.ms=%s, cleanup.policy=compact and no max.message.bytes", i, node, ctrl, got, ms)
			}
		}
	}
}

// TestTopicCreatedOnOneBrokerIsListedAtOnceByAnother is the regression
// test for a broker listing every topic (a Metadata request for all, as
// kafka-topics --list and kadm's ListTopics send) without a topic another
// broker had just created: it listed its registry as last re-read, up to a
// second earlier (kafkatools.TestKafkaTopics failed so in CI). As on Kafka,
// a create or a delete that has answered is what every broker lists next.
func TestTopicCreatedOnOneBrokerIsListedAtOnceByAnother(t *testing.T) {
	c := Start(t, Options{Brokers: 2})
	cl := client(t, c)
	ctx := context.Background()
	list := func(node int) map[string]bool {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest() // Topics nil: all of them
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(rctx, cl.Broker(node))
		if err != nil {
			t.Fatalf("Metadata on broker %d: %v", node, err)
		}
		names := map[string]bool{}
		for _, tp := range resp.Topics {
			if tp.Topic != nil && tp.ErrorCode == 0 {
				names[*tp.Topic] = true
			}
		}
		return names
	}
	for i := range 10 {
		on, other := i%2, (i+1)%2
		name := "listed-" + strconv.Itoa(i)
		list(other) // the other broker has just listed: its registry is fresh
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
		req.Topics = append(req.Topics, rt)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := req.RequestWith(rctx, cl.Broker(on))
		cancel()
		if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
			t.Fatalf("CreateTopics %s on broker %d: %v %+v", name, on, err, resp)
		}
		if got := list(other); !got[name] {
			t.Fatalf("broker %d lists %v right after broker %d created %s", other, got, on, name)
		}
		del := kmsg.NewPtrDeleteTopicsRequest()
		dt := kmsg.NewDeleteTopicsRequestTopic()
		dt.Topic = kmsg.StringPtr(name)
		del.Topics = append(del.Topics, dt)
		del.TopicNames = append(del.TopicNames, name)
		rctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		dresp, err := del.RequestWith(rctx, cl.Broker(on))
		cancel()
		if err != nil || len(dresp.Topics) != 1 || dresp.Topics[0].ErrorCode != 0 {
			t.Fatalf("DeleteTopics %s on broker %d: %v %+v", name, on, err, dresp)
		}
		if got := list(other); got[name] {
			t.Fatalf("broker %d still lists %s right after broker %d deleted it", other, name, on)
		}
	}
}
