package clustertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/testutil"
)

// TestGroupConfigsSetOnAnyBrokerReachTheCoordinator: IncrementalAlterConfigs
// of a GROUP resource sent to a broker that is not the controller is
// forwarded to it; refused values answer INVALID_CONFIG with Kafka's
// message; every broker then describes the group's value
// (DYNAMIC_GROUP_CONFIG, the broker default as its synonym); the group's
// coordinator tells its KIP-848 member the group's heartbeat interval; and
// DELETE brings the broker's back.
func TestGroupConfigsSetOnAnyBrokerReachTheCoordinator(t *testing.T) {
	c := Start(t, Options{Brokers: 3})
	cl := client(t, c)
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "gc-t"); err != nil {
		t.Fatal(err)
	}
	ctrl := int32(c.Controller())
	other := (ctrl + 1) % 3
	const g = "gc-group"
	alter := func(node int32, name string, op kmsg.IncrementalAlterConfigOp, value string) kmsg.IncrementalAlterConfigsResponseResource {
		t.Helper()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, g
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Op, cfg.Value = name, op, kmsg.StringPtr(value)
		res.Configs = append(res.Configs, cfg)
		req.Resources = append(req.Resources, res)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(rctx, cl.Broker(int(node)))
		if err != nil || len(resp.Resources) != 1 {
			t.Fatalf("IncrementalAlterConfigs on broker %d: %v %+v", node, err, resp)
		}
		return resp.Resources[0]
	}
	if r := alter(other, "consumer.heartbeat.interval.ms", kmsg.IncrementalAlterConfigOpSet, "1000"); r.ErrorCode != kerr.InvalidConfig.Code ||
		r.ErrorMessage == nil || *r.ErrorMessage != "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive." {
		t.Fatalf("heartbeat 1000: %+v, want INVALID_CONFIG with Kafka's message", r)
	}
	if r := alter(other, "foo", kmsg.IncrementalAlterConfigOpSet, "1"); r.ErrorCode != kerr.InvalidConfig.Code {
		t.Fatalf("unknown config: %+v", r)
	}
	// Hostile or unsupported resources each get their own error, and none
	// is written: the same group twice, APPEND, a SET without a value, an
	// empty group id, a topic config that does not parse.
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	for _, rs := range []struct {
		typ  kmsg.ConfigResourceType
		name string
		op   kmsg.IncrementalAlterConfigOp
		val  *string
	}{
		{kmsg.ConfigResourceTypeGroupConfig, "twice", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("6000")},
		{kmsg.ConfigResourceTypeGroupConfig, "twice", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("7000")},
		{kmsg.ConfigResourceTypeGroupConfig, "append", kmsg.IncrementalAlterConfigOpAppend, kmsg.StringPtr("6000")},
		{kmsg.ConfigResourceTypeGroupConfig, "nil-value", kmsg.IncrementalAlterConfigOpSet, nil},
		{kmsg.ConfigResourceTypeGroupConfig, "", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("6000")},
		{kmsg.ConfigResourceTypeTopic, "gc-t", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("x")},
	} {
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = rs.typ, rs.name
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Op, cfg.Value = "consumer.heartbeat.interval.ms", rs.op, rs.val
		if rs.typ == kmsg.ConfigResourceTypeTopic {
			cfg.Name = "retention.ms"
		}
		res.Configs = append(res.Configs, cfg)
		req.Resources = append(req.Resources, res)
	}
	resp, err := req.RequestWith(ctx, cl.Broker(int(other)))
	if err != nil || len(resp.Resources) != 6 {
		t.Fatalf("hostile IncrementalAlterConfigs: %v %+v", err, resp)
	}
	for i, want := range []*kerr.Error{kerr.InvalidRequest, kerr.InvalidRequest, kerr.InvalidConfig, kerr.InvalidConfig, kerr.InvalidConfig, kerr.InvalidConfig} {
		if got := resp.Resources[i].ErrorCode; got != want.Code || resp.Resources[i].ErrorMessage == nil {
			t.Errorf("resource %d (%q): %v, want %v with a message", i, resp.Resources[i].ResourceName, kerr.ErrorForCode(got), want)
		}
	}
	if r := alter(other, "consumer.heartbeat.interval.ms", kmsg.IncrementalAlterConfigOpSet, "6000"); r.ErrorCode != 0 {
		t.Fatalf("heartbeat 6000 on broker %d (controller %d): %v", other, ctrl, kerr.ErrorForCode(r.ErrorCode))
	}
	for node := range int32(3) {
		req := kmsg.NewPtrDescribeConfigsRequest()
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, g
		req.Resources, req.IncludeSynonyms = append(req.Resources, res), true
		// The client may not have learned every broker yet ("unknown
		// broker" right after the start: failed once).
		var resp *kmsg.DescribeConfigsResponse
		testutil.WaitFor(t, 10*time.Second, func() error {
			var err error
			resp, err = req.RequestWith(ctx, cl.Broker(int(node)))
			return err
		})
		if len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("DescribeConfigs on %d: %+v", node, resp)
		}
		got := map[string]string{}
		for _, rc := range resp.Resources[0].Configs {
			got[rc.Name] = fmt.Sprintf("%s %v %d synonyms", *rc.Value, rc.Source, len(rc.ConfigSynonyms))
		}
		if got["consumer.heartbeat.interval.ms"] != "6000 GROUP_CONFIG 2 synonyms" || got["consumer.session.timeout.ms"] != "45000 DEFAULT_CONFIG 1 synonyms" {
			t.Fatalf("broker %d describes %v", node, got)
		}
	}

	// A KIP-848 member of the group is told the group's interval by its
	// coordinator (which reads the file within a second).
	var coord int32
	send := func(id string, epoch int32) (*kmsg.ConsumerGroupHeartbeatResponse, error) {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.MemberEpoch = g, id, epoch
		if epoch == 0 {
			req.RebalanceTimeoutMillis, req.SubscribedTopicNames, req.Topics = 30000, []string{"gc-t"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		}
		return req.RequestWith(ctx, cl.Broker(int(coord)))
	}
	hb := func(id string, epoch int32) *kmsg.ConsumerGroupHeartbeatResponse {
		t.Helper()
		resp, err := send(id, epoch)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("ConsumerGroupHeartbeat: %v %+v", err, resp)
		}
		return resp
	}
	const id = "gc-member-0000000001" // v1: the member names itself (KIP-1082)
	// The join, as a client makes it: the broker a FindCoordinator names may
	// apply the same assignment a moment after the broker that answered, and
	// says NOT_COORDINATOR until then; the client finds it again and retries.
	var epoch int32
	testutil.WaitFor(t, 10*time.Second, func() error {
		coord = findCoordinator(t, cl, g, 0)
		resp, err := send(id, 0)
		switch {
		case err != nil:
			t.Fatalf("ConsumerGroupHeartbeat: %v", err)
		case resp.ErrorCode == kerr.NotCoordinator.Code:
			return fmt.Errorf("broker %d: not yet the coordinator", coord)
		case resp.ErrorCode != 0:
			t.Fatalf("ConsumerGroupHeartbeat: %+v", resp)
		}
		epoch = resp.MemberEpoch
		return nil
	})
	interval := func(want int32) {
		t.Helper()
		testutil.WaitFor(t, 10*time.Second, func() error {
			r := hb(id, epoch)
			epoch = r.MemberEpoch
			if r.HeartbeatIntervalMillis != want {
				return fmt.Errorf("heartbeat interval %d, want %d", r.HeartbeatIntervalMillis, want)
			}
			return nil
		})
	}
	interval(6000)
	if r := alter(other, "consumer.heartbeat.interval.ms", kmsg.IncrementalAlterConfigOpDelete, ""); r.ErrorCode != 0 {
		t.Fatalf("DELETE: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	interval(5000)
}

// TestTopicConfigsAlteredOnAnyBrokerApplyToTheLeader: IncrementalAlterConfigs
// of a topic sent to a broker that is not the controller is forwarded to
// it; the partition's leader applies the new max.message.bytes to its open
// log (a 4 KiB record is refused, MESSAGE_TOO_LARGE), every broker
// describes it, and DELETE brings the default back.
func TestTopicConfigsAlteredOnAnyBrokerApplyToTheLeader(t *testing.T) {
	c := Start(t, Options{Brokers: 3})
	cl := client(t, c, kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "ac-t"); err != nil {
		t.Fatal(err)
	}
	big := &kgo.Record{Topic: "ac-t", Value: make([]byte, 4096)}
	for i := range big.Value {
		big.Value[i] = byte(i*7919 + i>>3) // compression must not shrink it below the limit
	}
	if err := cl.ProduceSync(ctx, big).FirstErr(); err != nil {
		t.Fatal(err)
	}
	other := (int32(c.Controller()) + 1) % 3
	alter := func(op kmsg.IncrementalAlterConfigOp, value *string) {
		t.Helper()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "ac-t"
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Op, cfg.Value = "max.message.bytes", op, value
		res.Configs = append(res.Configs, cfg)
		req.Resources = append(req.Resources, res)
		resp, err := req.RequestWith(ctx, cl.Broker(int(other)))
		if err != nil || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("IncrementalAlterConfigs on broker %d: %v %+v", other, err, resp)
		}
	}
	alter(kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("2048"))
	testutil.WaitFor(t, 10*time.Second, func() error {
		if err := cl.ProduceSync(ctx, big).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
			return fmt.Errorf("a 4 KiB record after max.message.bytes=2048: %v", err)
		}
		return nil
	})
	for node := range 3 {
		one := client(t, c, kgo.SeedBrokers(c.Addrs()[node]))
		rs, err := kadm.NewClient(one).DescribeTopicConfigs(ctx, "ac-t")
		if err != nil {
			t.Fatal(err)
		}
		if v, err := rs.On("ac-t", nil); err != nil || func() string {
			for _, cfg := range v.Configs {
				if cfg.Key == "max.message.bytes" {
					return cfg.MaybeValue()
				}
			}
			return ""
		}() != "2048" {
			t.Fatalf("described: %+v %v", v, err)
		}
	}
	alter(kmsg.IncrementalAlterConfigOpDelete, nil)
	testutil.WaitFor(t, 10*time.Second, func() error {
		return cl.ProduceSync(ctx, big).FirstErr()
	})
}
