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
