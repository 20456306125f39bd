package broker

// WriteTxnMarkers, from transaction coordinators: append the
// marker to each partition this broker leads. A kaas coordinator also sends
// group markers as the pseudo-topic "__kaas_group:<group>" (see peers.go).

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/txn"
	"github.com/kaas-dev/kaas/internal/wire"
)

func init() { register(kmsg.WriteTxnMarkers, 0, 1, (*Broker).handleWriteTxnMarkers) }

func (b *Broker) handleWriteTxnMarkers(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.WriteTxnMarkersRequest)
	return func() kmsg.Response {
		resp := r.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
		for _, m := range r.Markers {
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for _, t := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = t.Topic
				var codes map[int32]int16
				if g, ok := strings.CutPrefix(t.Topic, groupMarkerTopic); ok {
					code := int16(0)
					if err := b.coord.EndTxnOffsets(ctx, g, m.ProducerID, m.Committed); err != nil {
						code = coordError(err).Code
					}
					codes = map[int32]int16{}
					for _, p := range t.Partitions {
						codes[p] = code
					}
				} else {
					var tps []txn.TP
					for _, p := range t.Partitions {
						tps = append(tps, txn.TP{Topic: t.Topic, Partition: p})
					}
					errs := b.writeMarkers(m.ProducerID, m.ProducerEpoch, m.Committed, tps)
					codes = map[int32]int16{}
					for _, p := range t.Partitions {
						if err := errs[txn.TP{Topic: t.Topic, Partition: p}]; err != nil {
							codes[p] = storageError(err).Code
						}
					}
				}
				for _, p := range t.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition, rp.ErrorCode = p, codes[p]
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			resp.Markers = append(resp.Markers, rm)
		}
		return resp
	}
}
