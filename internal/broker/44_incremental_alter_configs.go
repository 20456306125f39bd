package broker

// IncrementalAlterConfigs, for groups (Kafka's GROUP config resource,
// KIP-848): consumer.session.timeout.ms and consumer.heartbeat.interval.ms
// set on one group. The controller writes the group configs file (one
// writer); another broker forwards the request to it, as Kafka's brokers
// forward to theirs. Topic configs are set when a topic is created (a
// partition's log takes them when it opens) and broker settings are flags:
// altering either answers INVALID_REQUEST saying so.

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/groupconfig"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() {
	register(kmsg.IncrementalAlterConfigs, 0, 1, (*Broker).handleIncrementalAlterConfigs)
}

func (b *Broker) handleIncrementalAlterConfigs(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.IncrementalAlterConfigsRequest)
	controller := b.cfg.Cluster.ControllerID()
	if controller != b.cfg.ID && req.ClientID != peerClientID && hasGroupResource(r) {
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
		case rr.ResourceType == kmsg.ConfigResourceTypeGroupConfig && controller != b.cfg.ID:
			fail(kerr.NotController, "send IncrementalAlterConfigs for groups to the controller")
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
			fail(kerr.InvalidRequest, "kaas sets a topic's configs when it is created: create the topic again with them")
		case rr.ResourceType == kmsg.ConfigResourceTypeBroker || rr.ResourceType == kmsg.ConfigResourceTypeBrokerLogger:
			fail(kerr.InvalidRequest, "a kaas broker takes its settings from its flags and environment")
		default:
			fail(kerr.InvalidRequest, "kaas alters group configs only")
		}
		resp.Resources = append(resp.Resources, res)
	}
	return now(resp)
}

// hasGroupResource reports whether r alters a group's configs.
func hasGroupResource(r *kmsg.IncrementalAlterConfigsRequest) bool {
	for _, rr := range r.Resources {
		if rr.ResourceType == kmsg.ConfigResourceTypeGroupConfig {
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
