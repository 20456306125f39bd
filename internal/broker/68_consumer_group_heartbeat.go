package broker

// ConsumerGroupHeartbeat (KIP-848) and ConsumerGroupDescribe. The group's
// state machine is internal/cgroup behind coord's shell (docs/cgroup.md);
// here the request becomes its input and its answer the response. A group
// coordinated elsewhere answers NOT_COORDINATOR; a classic group with
// members answers GROUP_ID_NOT_FOUND ("not a consumer group").

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/coord"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() {
	register(kmsg.ConsumerGroupHeartbeat, 0, 1, (*Broker).handleConsumerGroupHeartbeat)
	register(kmsg.ConsumerGroupDescribe, 0, 1, (*Broker).handleConsumerGroupDescribe)
}

// consumerImage is the topics consumer groups assign: every topic of the
// registry with its id and partition count.
// It is made again only when the registry changed (topics.Registry.Gen):
// a group hashes its subscribed topics only for a new image, and a
// heartbeat of a 100-member group must not rebuild every topic's entry.
func (b *Broker) consumerImage() *cgroup.Image {
	gen := b.topics.Gen() // before All: a change in between makes the next call build again
	b.imageMu.Lock()
	defer b.imageMu.Unlock()
	if b.image != nil && b.imageGen == gen {
		return b.image
	}
	all := b.topics.All()
	ts := make([]cgroup.Topic, 0, len(all))
	for _, t := range all {
		ts = append(ts, cgroup.Topic{Name: t.Name, ID: cgroup.TopicID(t.ID), Partitions: t.Partitions})
	}
	b.image, b.imageGen = cgroup.NewImage(ts...), gen
	return b.image
}

func (b *Broker) handleConsumerGroupHeartbeat(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.ConsumerGroupHeartbeatRequest)
	resp := r.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	fail := func(e *kerr.Error, msg string) func() kmsg.Response {
		resp.ErrorCode = e.Code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		return now(resp) // member epoch 0 and no member id, as Kafka answers errors
	}
	if r.Group == "" {
		return fail(kerr.InvalidRequest, "GroupId can't be empty.") // as Kafka 4.4: not INVALID_GROUP_ID
	}
	in := cgroup.HeartbeatInput{Version: r.Version, MemberID: r.MemberID, MemberEpoch: r.MemberEpoch,
		InstanceID: r.InstanceID, RackID: r.RackID, RebalanceTimeoutMs: r.RebalanceTimeoutMillis,
		SubscribedTopicNames: r.SubscribedTopicNames, SubscribedTopicRegex: r.SubscribedTopicRegex,
		ServerAssignor: r.ServerAssignor, OwnedSent: r.Topics != nil,
		ClientID: req.ClientID, ClientHost: c.clientHost()}
	for _, t := range r.Topics {
		in.OwnedTopicPartitions = append(in.OwnedTopicPartitions, cgroup.TopicPartitions{Topic: cgroup.TopicID(t.TopicID), Partitions: t.Partitions})
	}
	if in.OwnedSent && in.OwnedTopicPartitions == nil {
		in.OwnedTopicPartitions = []cgroup.TopicPartitions{}
	}
	res, err := b.coord.ConsumerHeartbeat(ctx, r.Group, in)
	switch {
	case errors.Is(err, coord.ErrNotConsumerGroup):
		return fail(kerr.GroupIDNotFound, "Group "+r.Group+" is not a consumer group.")
	case err != nil:
		e := coordError(err)
		return fail(e, clientMessage(e, err))
	case res.Err != cgroup.ErrNone:
		return fail(kerr.ErrorForCode(int16(res.Err)).(*kerr.Error), res.ErrMessage)
	}
	resp.MemberID = &res.MemberID
	resp.MemberEpoch = res.MemberEpoch
	resp.HeartbeatIntervalMillis = res.HeartbeatIntervalMs
	if res.HasAssignment {
		a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		a.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
		for _, t := range res.Assignment {
			at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			at.TopicID, at.Partitions = t.Topic, t.Partitions
			a.Topics = append(a.Topics, at)
		}
		resp.Assignment = &a
	}
	return now(resp)
}

func (b *Broker) handleConsumerGroupDescribe(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.ConsumerGroupDescribeRequest)
	resp := r.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	im := b.consumerImage()
	assignment := func(tps []cgroup.TopicPartitions) kmsg.Assignment {
		a := kmsg.Assignment{TopicPartitions: []kmsg.AssignmentTopicPartition{}}
		for _, t := range tps {
			at := kmsg.AssignmentTopicPartition{TopicID: t.Topic, Partitions: t.Partitions}
			if topic, ok := im.ByID(t.Topic); ok {
				at.Topic = topic.Name
			}
			a.TopicPartitions = append(a.TopicPartitions, at)
		}
		return a
	}
	for _, g := range r.Groups {
		dg := kmsg.NewConsumerGroupDescribeResponseGroup()
		dg.Group = g
		dg.AuthorizedOperations = -2147483648
		d, err := b.coord.ConsumerDescribe(g)
		switch {
		case errors.Is(err, coord.ErrNotConsumerGroup):
			dg.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "Group " + g + " is not a consumer group."
			dg.ErrorMessage = &msg
		case errors.Is(err, coord.ErrGroupNotFound):
			dg.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "Group " + g + " not found."
			dg.ErrorMessage = &msg
		case err != nil:
			dg.ErrorCode = coordError(err).Code
		default:
			dg.State, dg.Epoch, dg.AssignmentEpoch, dg.AssignorName = d.State, d.GroupEpoch, d.AssignmentEpoch, d.Assignor
			for _, m := range d.Members {
				dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
				dm.MemberID, dm.MemberEpoch, dm.ClientID, dm.ClientHost = m.MemberID, m.MemberEpoch, m.ClientID, m.ClientHost
				if m.InstanceID != "" {
					dm.InstanceID = &m.InstanceID
				}
				if m.RackID != "" {
					dm.RackID = &m.RackID
				}
				dm.SubscribedTopics = m.SubscribedTopicNames
				if dm.SubscribedTopics == nil {
					dm.SubscribedTopics = []string{}
				}
				// Kafka 4.4 sends "" for a member without a regex, not null.
				dm.SubscribedTopicRegex = &m.SubscribedTopicRegex
				dm.Assignment, dm.TargetAssignment = assignment(m.Assignment), assignment(m.TargetAssignment)
				dm.MemberType = 1 // the consumer protocol
				if m.Classic {
					dm.MemberType = 0
				}
				dg.Members = append(dg.Members, dm)
			}
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return now(resp)
}
