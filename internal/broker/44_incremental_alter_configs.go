package broker

// IncrementalAlterConfigs, for topics (their configs, checked as at
// creation) and groups (Kafka's GROUP config resource, KIP-848:
// consumer.session.timeout.ms and consumer.heartbeat.interval.ms set on one
// group). The controller writes the topic's file and the group configs
// file (one writer each); another broker forwards the request to it, as
// Kafka's brokers forward to theirs. The brokers leading the topic's
// partitions apply the new values within a second (maintain). Broker
// settings are flags: altering them answers INVALID_REQUEST saying so.

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/groupconfig"
	"github.com/kaas-dev/kaas/internal/topics"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() {
	register(kmsg.IncrementalAlterConfigs, 0, 1, (*Broker).handleIncrementalAlterConfigs)
}

func (b *Broker) handleIncrementalAlterConfigs(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.IncrementalAlterConfigsRequest)
	controller := b.cfg.Cluster.ControllerID()
	if controller != b.cfg.ID && req.ClientID != peerClientID && forControllerOnly(r) {
		return b.forwardAlterConfigs(ctx, c, r, controller)
	}
	resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	seen := map[kmsg.ConfigResourceType]map[string]int{}
	for _, rr := range r.Resources {
		if seen[rr.ResourceType] == nil {
			seen[rr.ResourceType] = map[string]int{}
		}
		seen[rr.ResourceType][rr.ResourceName]++
	}
	for _, rr := range r.Resources {
		res := kmsg.NewIncrementalAlterConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		fail := func(e *kerr.Error, msg string) {
			res.ErrorCode = e.Code
			res.ErrorMessage = &msg
		}
		switch {
		case seen[rr.ResourceType][rr.ResourceName] > 1:
			fail(kerr.InvalidRequest, "resource named more than once")
		case (rr.ResourceType == kmsg.ConfigResourceTypeGroupConfig || rr.ResourceType == kmsg.ConfigResourceTypeTopic) && controller != b.cfg.ID:
			fail(kerr.NotController, "send IncrementalAlterConfigs for topics and groups to the controller")
		case rr.ResourceType == kmsg.ConfigResourceTypeGroupConfig:
			ops := make([]groupconfig.Op, 0, len(rr.Configs))
			for _, cfg := range rr.Configs {
				op := groupconfig.Op{Name: cfg.Name, Op: int8(cfg.Op)}
				if cfg.Value != nil {
					op.Value = *cfg.Value
				}
				ops = append(ops, op)
			}
			d := b.cfg.Coordinator.ConsumerDefaults()
			err := b.groupConfigs.Alter(rr.ResourceName, ops, groupconfig.BoundsFor(d.SessionTimeout, d.HeartbeatInterval), r.ValidateOnly)
			switch {
			case errors.Is(err, groupconfig.ErrInvalid):
				fail(kerr.InvalidConfig, err.Error())
			case err != nil:
				b.log.Error("altering group configs failed", "group", rr.ResourceName, "err", err)
				fail(kerr.UnknownServerError, clientMessage(kerr.UnknownServerError, err))
			case !r.ValidateOnly:
				c.log.Info("group configs altered", "group", rr.ResourceName, "configs", len(ops))
			}
		case rr.ResourceType == kmsg.ConfigResourceTypeTopic:
			ops := make([]topics.ConfigOp, 0, len(rr.Configs))
			for _, cfg := range rr.Configs {
				ops = append(ops, topics.ConfigOp{Name: cfg.Name, Op: int8(cfg.Op), Value: cfg.Value})
			}
			_, err := b.topics.AlterConfigs(rr.ResourceName, ops, r.ValidateOnly)
			var ce *topics.ConfigError
			switch {
			case errors.Is(err, topics.ErrUnknown):
				fail(kerr.UnknownTopicOrPartition, "This server does not host this topic-partition.")
			case errors.As(err, &ce) && ce.InvalidRequest():
				fail(kerr.InvalidRequest, ce.Error())
			case errors.As(err, &ce):
				fail(kerr.InvalidConfig, ce.Error())
			case err != nil:
				b.log.Error("altering topic configs failed", "topic", rr.ResourceName, "err", err)
				fail(kerr.UnknownServerError, clientMessage(kerr.UnknownServerError, err))
			case !r.ValidateOnly:
				c.log.Info("topic configs altered", "topic", rr.ResourceName, "configs", len(ops))
			}
		case rr.ResourceType == kmsg.ConfigResourceTypeBroker || rr.ResourceType == kmsg.ConfigResourceTypeBrokerLogger:
			fail(kerr.InvalidRequest, "a kaas broker takes its settings from its flags and environment")
		default:
			fail(kerr.InvalidRequest, "kaas alters topic and group configs only")
		}
		resp.Resources = append(resp.Resources, res)
	}
	return now(resp)
}

// forControllerOnly reports whether r alters what only the controller
// writes: a topic's or a group's configs.
func forControllerOnly(r *kmsg.IncrementalAlterConfigsRequest) bool {
	for _, rr := range r.Resources {
		if rr.ResourceType == kmsg.ConfigResourceTypeGroupConfig || rr.ResourceType == kmsg.ConfigResourceTypeTopic {
			return true
		}
	}
	return false
}

// forwardAlterConfigs sends r to the controller and answers with its
// response; when the controller cannot be reached every resource gets
// NOT_CONTROLLER, which clients retry after a metadata refresh.
func (b *Broker) forwardAlterConfigs(ctx context.Context, c *conn, r *kmsg.IncrementalAlterConfigsRequest, controller int32) func() kmsg.Response {
	return func() kmsg.Response {
		resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
		addr, ok := b.brokerAddr(controller)
		var err error
		if ok {
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var got kmsg.Response
			got, err = b.peers.request(fctx, addr, r)
			cancel()
			if err == nil {
				fwd := got.(*kmsg.IncrementalAlterConfigsResponse)
				resp.Resources = fwd.Resources
				return resp
			}
		}
		c.log.Info("IncrementalAlterConfigs not forwarded to the controller", "controller", controller, "err", err)
		for _, rr := range r.Resources {
			res := kmsg.NewIncrementalAlterConfigsResponseResource()
			res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
			res.ErrorCode = kerr.NotController.Code
			resp.Resources = append(resp.Resources, res)
		}
		return resp
	}
}
