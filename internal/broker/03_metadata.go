package broker

// Metadata. A null topic list (v1+) or an empty one at v0
// means every topic; v10+ may name topics by id.

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/topics"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.Metadata, 0, 12, (*Broker).handleMetadata) }

func (b *Broker) handleMetadata(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	resp := b.metadata(c, req.Body.(*kmsg.MetadataRequest))
	return func() kmsg.Response {
		b.awaitLiveLeaders(ctx, resp) // gone_leaders.go
		return resp
	}
}

func (b *Broker) metadata(c *conn, r *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	cid := b.clusterID
	resp.ClusterID = &cid
	resp.ControllerID = b.cfg.Cluster.ControllerID()
	resp.Brokers = metadataBrokers(b.cfg.Cluster.Brokers())
	all := r.Topics == nil || (r.Version == 0 && len(r.Topics) == 0)
	if all {
		for _, t := range b.topics.Listed() {
			resp.Topics = append(resp.Topics, b.metadataTopic(t))
		}
		for _, n := range internalNames {
			t, _ := b.internalTopic(n)
			resp.Topics = append(resp.Topics, b.metadataInternal(t))
		}
		return resp
	}
	autoCreate := b.cfg.AutoCreateTopics && (r.Version < 4 || r.AllowAutoTopicCreation)
	for _, rt := range r.Topics {
		var t *topics.Topic
		var ok bool
		if rt.Topic == nil || *rt.Topic == "" {
			if rt.TopicID == ([16]byte{}) {
				mt := kmsg.NewMetadataResponseTopic()
				mt.ErrorCode = kerr.InvalidTopicException.Code
				resp.Topics = append(resp.Topics, mt)
				continue
			}
			if it, internal := b.internalTopicByID(rt.TopicID); internal {
				resp.Topics = append(resp.Topics, b.metadataInternal(it))
				continue
			}
			if t, ok = b.topics.ByID(rt.TopicID); !ok {
				mt := kmsg.NewMetadataResponseTopic()
				mt.TopicID = rt.TopicID
				mt.ErrorCode = kerr.UnknownTopicID.Code
				resp.Topics = append(resp.Topics, mt)
				continue
			}
			resp.Topics = append(resp.Topics, b.metadataTopic(t))
			continue
		}
		name := *rt.Topic
		if it, internal := b.internalTopic(name); internal {
			resp.Topics = append(resp.Topics, b.metadataInternal(it))
			continue
		}
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = &name
		if err := topics.ValidateName(name); err != nil {
			mt.ErrorCode = kerr.InvalidTopicException.Code
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		if t, ok = b.topics.Get(name); !ok && autoCreate {
			var err error
			t, err = b.autoCreate(name)
			if err != nil {
				c.log.Warn("auto-creating topic failed", "topic", name, "err", err)
			}
			ok = t != nil
			if ok {
				// Kafka answers the creating request with
				// LEADER_NOT_AVAILABLE; clients retry at once.
				mt.ErrorCode = kerr.LeaderNotAvailable.Code
				mt.TopicID = t.ID
				resp.Topics = append(resp.Topics, mt)
				continue
			}
		}
		if !ok {
			mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, b.metadataTopic(t))
	}
	return resp
}

// autoCreate creates a topic with the broker defaults; a concurrent creation
// by another broker counts as success.
func (b *Broker) autoCreate(name string) (*topics.Topic, error) {
	t, err := b.topics.Create(name, b.cfg.DefaultPartitions, nil, false)
	if errors.Is(err, topics.ErrExists) {
		t, ok := b.topics.Get(name)
		if ok {
			return t, nil
		}
	}
	if err == nil {
		b.log.Info("topic auto-created", "topic", name, "partitions", t.Partitions)
	}
	return t, err
}

func (b *Broker) metadataTopic(t *topics.Topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic = &name
	mt.TopicID = t.ID
	for i := int32(0); i < t.Partitions; i++ {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = i
		setLeader(&mp, b.cfg.Cluster, t.Name)
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}
