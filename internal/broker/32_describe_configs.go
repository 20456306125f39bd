package broker

// DescribeConfigs, for topics (the configs set on the topic and
// the defaults kaas acts on) and brokers (the settings of this broker, read
// only). Other resource types answer INVALID_REQUEST.

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

// brokerConfigs lists this broker's settings: its own, and the topic
// defaults under their broker names (log.segment.bytes, ...).
func (b *Broker) brokerConfigs() []topicConfig {
	static := int8(kmsg.ConfigSourceStaticBrokerConfig)
	out := []topicConfig{
		{"auto.create.topics.enable", strconv.FormatBool(b.cfg.AutoCreateTopics), static},
		{"broker.id", strconv.Itoa(int(b.cfg.ID)), static},
		{"num.partitions", strconv.Itoa(int(b.cfg.DefaultPartitions)), static},
		{"socket.request.max.bytes", strconv.Itoa(int(b.cfg.MaxFrame)), static},
	}
	for _, d := range b.cfg.topicDefaults() {
		out = append(out, topicConfig{d.brokerName, d.value, static})
	}
	slices.SortFunc(out, func(a, b topicConfig) int { return strings.Compare(a.name, b.name) })
	return out
}

func init() { register(kmsg.DescribeConfigs, 0, 4, (*Broker).handleDescribeConfigs) }

func (b *Broker) handleDescribeConfigs(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.DescribeConfigsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range r.Resources {
		res := kmsg.NewDescribeConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		var cfgs []topicConfig
		readOnly := false
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			t, ok := b.topics.Get(rr.ResourceName)
			if !ok {
				res.ErrorCode = kerr.UnknownTopicOrPartition.Code
				resp.Resources = append(resp.Resources, res)
				continue
			}
			cfgs = b.topicConfigs(t)
		case kmsg.ConfigResourceTypeBroker:
			if rr.ResourceName != "" && rr.ResourceName != strconv.Itoa(int(b.cfg.ID)) {
				res.ErrorCode = kerr.InvalidRequest.Code
				msg := "describe a broker's configs on that broker"
				res.ErrorMessage = &msg
				resp.Resources = append(resp.Resources, res)
				continue
			}
			cfgs, readOnly = b.brokerConfigs(), true
		default:
			res.ErrorCode = kerr.InvalidRequest.Code
			msg := "kaas describes topic and broker configs only"
			res.ErrorMessage = &msg
			resp.Resources = append(resp.Resources, res)
			continue
		}
		for _, cfg := range cfgs {
			if rr.ConfigNames != nil && !slices.Contains(rr.ConfigNames, cfg.name) {
				continue
			}
			rc := kmsg.NewDescribeConfigsResponseResourceConfig()
			v := cfg.value
			rc.Name, rc.Value, rc.ReadOnly = cfg.name, &v, readOnly
			rc.Source = kmsg.ConfigSource(cfg.source)
			rc.IsDefault = cfg.source == int8(kmsg.ConfigSourceDefaultConfig)
			if r.Version >= 1 && r.IncludeSynonyms {
				rc.ConfigSynonyms = append(rc.ConfigSynonyms, kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{
					Name: cfg.name, Value: &v, Source: rc.Source})
			}
			res.Configs = append(res.Configs, rc)
		}
		resp.Resources = append(resp.Resources, res)
	}
	return now(resp)
}
