package broker

// DescribeConfigs, for topics (the configs set on the topic and
// the defaults kaas acts on), brokers (the settings of this broker, read
// only) and groups (the configs kaas acts on, set on the group or the
// broker's default: as Kafka, a group that does not exist has the
// defaults). Other resource types answer INVALID_REQUEST.

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/groupconfig"
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
			t, ok := b.topics.Fresh(rr.ResourceName) // as the controller left it, even just now
			if !ok {
				t, ok = b.internalTopic(rr.ResourceName)
			}
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
		case kmsg.ConfigResourceTypeGroupConfig:
			if err := b.describeGroupConfigs(r, rr, &res); err != nil {
				b.log.Error("reading group configs failed", "group", rr.ResourceName, "err", err)
				res.ErrorCode = kerr.UnknownServerError.Code
			}
			resp.Resources = append(resp.Resources, res)
			continue
		default:
			res.ErrorCode = kerr.InvalidRequest.Code
			msg := "kaas describes topic, broker and group configs only"
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

// describeGroupConfigs fills res with a group's configs as Kafka shows them:
// each of the group configs kaas acts on, DYNAMIC_GROUP_CONFIG when set on
// the group, else DEFAULT_CONFIG; the synonyms name the broker's
// group.consumer.* default.
func (b *Broker) describeGroupConfigs(r *kmsg.DescribeConfigsRequest, rr kmsg.DescribeConfigsRequestResource, res *kmsg.DescribeConfigsResponseResource) error {
	set, err := b.groupConfigs.Get(rr.ResourceName)
	if err != nil {
		return err
	}
	d := b.cfg.Coordinator.ConsumerDefaults()
	defaults := map[string]string{
		groupconfig.SessionTimeout:    strconv.FormatInt(d.SessionTimeout.Milliseconds(), 10),
		groupconfig.HeartbeatInterval: strconv.FormatInt(d.HeartbeatInterval.Milliseconds(), 10),
	}
	for _, name := range groupconfig.Names() {
		if rr.ConfigNames != nil && !slices.Contains(rr.ConfigNames, name) {
			continue
		}
		rc := kmsg.NewDescribeConfigsResponseResourceConfig()
		def := kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{Name: "group." + name, Value: kmsg.StringPtr(defaults[name]),
			Source: kmsg.ConfigSourceDefaultConfig}
		rc.Name, rc.Value, rc.Source, rc.IsDefault = name, kmsg.StringPtr(defaults[name]), kmsg.ConfigSourceDefaultConfig, true
		var syn []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
		if v, ok := set[name]; ok {
			rc.Value, rc.Source, rc.IsDefault = kmsg.StringPtr(v), kmsg.ConfigSourceGroupConfig, false
			syn = append(syn, kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{Name: name, Value: kmsg.StringPtr(v), Source: rc.Source})
		}
		if r.Version >= 1 && r.IncludeSynonyms {
			rc.ConfigSynonyms = append(syn, def)
		}
		if r.Version >= 3 {
			rc.ConfigType = kmsg.ConfigTypeInt
		}
		res.Configs = append(res.Configs, rc)
	}
	return nil
}
