package broker

// DeleteTopics: (v6 names topics by name or id). Deleting a
// topic removes its registry file, then its data on the volume.

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/topics"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.DeleteTopics, 0, 6, (*Broker).handleDeleteTopics) }

func (b *Broker) handleDeleteTopics(_ context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.DeleteTopicsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if r.Version < 6 {
		for i := range r.TopicNames {
			targets = append(targets, target{name: &r.TopicNames[i]})
		}
	} else {
		for _, t := range r.Topics {
			targets = append(targets, target{name: t.Topic, id: t.TopicID})
		}
	}
	for _, tg := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = tg.name, tg.id
		var t *topics.Topic
		var ok bool
		_, byName := b.internalTopic(ptrString(tg.name))
		_, byID := b.internalTopicByID(tg.id)
		switch {
		case byName || byID:
			st.ErrorCode = kerr.TopicDeletionDisabled.Code
			if r.Version >= 5 {
				msg := "kaas keeps committed offsets and transactions in files on the volume, not in its internal topics: they cannot be deleted"
				st.ErrorMessage = &msg
			}
		case tg.name != nil && *tg.name != "":
			t, ok = b.topics.Get(*tg.name)
			if ok && tg.id != ([16]byte{}) && t.ID != tg.id {
				ok = false
			}
			if !ok {
				st.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
		case tg.id != ([16]byte{}):
			t, ok = b.topics.ByID(tg.id)
			if !ok {
				st.ErrorCode = kerr.UnknownTopicID.Code
			}
		default:
			st.ErrorCode = kerr.InvalidRequest.Code
		}
		if ok {
			name := t.Name
			st.Topic, st.TopicID = &name, t.ID
			if _, err := b.topics.Delete(t.Name); err != nil {
				c.log.Warn("deleting topic failed", "topic", t.Name, "err", err)
				st.ErrorCode = kerr.UnknownServerError.Code
				if errors.Is(err, topics.ErrUnknown) {
					st.ErrorCode = kerr.UnknownTopicOrPartition.Code
				}
			} else {
				b.log.Info("topic deleted", "topic", t.Name, "id", t.ID.String())
				b.cfg.TopicsChanged()
				if err := b.removeTopicData(t); err != nil {
					b.log.Warn("removing deleted topic's data failed", "topic", t.Name, "err", err)
				}
				b.purgeTopicOffsets(t.Name)
			}
		}
		if st.ErrorCode != 0 {
			msg := kerr.ErrorForCode(st.ErrorCode).Error()
			st.ErrorMessage = &msg
		}
		resp.Topics = append(resp.Topics, st)
	}
	return now(resp)
}
