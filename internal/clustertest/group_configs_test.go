package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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
	// empty group id, a topic.
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
		{kmsg.ConfigResourceTypeTopic, "gc-t", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("1000")},
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
	for i, want := range []*kerr.Error{kerr.InvalidRequest, kerr.InvalidRequest, kerr.InvalidConfig, kerr.InvalidConfig, kerr.InvalidConfig, kerr.InvalidRequest} {
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
		resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
		if err != nil || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("DescribeConfigs on %d: %v %+v", node, err, resp)
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
	coord := findCoordinator(t, cl, g, 0)
	hb := func(id string, epoch int32) *kmsg.ConsumerGroupHeartbeatResponse {
		t.Helper()
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.MemberEpoch = g, id, epoch
		if epoch == 0 {
			req.RebalanceTimeoutMillis, req.SubscribedTopicNames, req.Topics = 30000, []string{"gc-t"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		}
		resp, err := req.RequestWith(ctx, cl.Broker(int(coord)))
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("ConsumerGroupHeartbeat: %v %+v", err, resp)
		}
		return resp
	}
	const id = "gc-member-0000000001" // v1: the member names itself (KIP-1082)
	epoch := hb(id, 0).MemberEpoch
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
