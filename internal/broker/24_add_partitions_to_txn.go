package broker

// AddPartitionsToTxn. v0-v3 carry one transaction (clients);
// v4+ batch transactions and may only verify (KIP-890, broker to broker).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/txn"
	"github.com/kaas-dev/kaas/internal/wire"
)

type addPartitionsResult struct {
	topic     string
	partition int32
	code      int16
}

// addPartitions serves one transaction of the request.
func (b *Broker) addPartitions(ctx context.Context, version int16, id string, pid int64, epoch int16, verify bool, topics map[string][]int32, order []string) []addPartitionsResult {
	var out []addPartitionsResult
	var tps []txn.TP
	bad := false
	for _, t := range order {
		tp, known := b.topics.Get(t)
		for _, p := range topics[t] {
			if !known || p < 0 || p >= tp.Partitions {
				bad = true
				out = append(out, addPartitionsResult{t, p, kerr.UnknownTopicOrPartition.Code})
				continue
			}
			tps = append(tps, txn.TP{Topic: t, Partition: p})
			out = append(out, addPartitionsResult{t, p, 0})
		}
	}
	setAll := func(code int16) {
		for i := range out {
			if out[i].code == 0 {
				out[i].code = code
			}
		}
	}
	if bad { // Kafka adds nothing when any partition is unknown
		setAll(kerr.OperationNotAttempted.Code)
		return out
	}
	if verify {
		in, err := b.txn.Verify(id, pid, epoch, tps)
		if err != nil {
			setAll(txnError(err, true).Code)
			return out
		}
		for i := range out {
			if !in[txn.TP{Topic: out[i].topic, Partition: out[i].partition}] {
				out[i].code = kerr.TransactionAbortable.Code
			}
		}
		return out
	}
	if err := b.txn.AddPartitions(ctx, id, pid, epoch, tps); err != nil {
		setAll(txnError(err, version >= 2).Code)
	}
	return out
}

func init() { register(kmsg.AddPartitionsToTxn, 0, 5, (*Broker).handleAddPartitionsToTxn) }

func (b *Broker) handleAddPartitionsToTxn(ctx context.Context, c *conn, req wire.Request) func() kmsg.Response {
	r := req.Body.(*kmsg.AddPartitionsToTxnRequest)
	return func() kmsg.Response {
		resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		if r.Version <= 3 {
			topics, order := map[string][]int32{}, []string{}
			for _, t := range r.Topics {
				if _, ok := topics[t.Topic]; !ok {
					order = append(order, t.Topic)
				}
				topics[t.Topic] = append(topics[t.Topic], t.Partitions...)
			}
			res := b.addPartitions(ctx, r.Version, r.TransactionalID, r.ProducerID, r.ProducerEpoch, false, topics, order)
			for _, x := range res {
				if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != x.topic {
					rt := kmsg.NewAddPartitionsToTxnResponseTopic()
					rt.Topic = x.topic
					resp.Topics = append(resp.Topics, rt)
				}
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = x.partition, x.code
				rt := &resp.Topics[len(resp.Topics)-1]
				rt.Partitions = append(rt.Partitions, rp)
			}
			return resp
		}
		for _, tr := range r.Transactions {
			topics, order := map[string][]int32{}, []string{}
			for _, t := range tr.Topics {
				if _, ok := topics[t.Topic]; !ok {
					order = append(order, t.Topic)
				}
				topics[t.Topic] = append(topics[t.Topic], t.Partitions...)
			}
			res := b.addPartitions(ctx, r.Version, tr.TransactionalID, tr.ProducerID, tr.ProducerEpoch, tr.VerifyOnly, topics, order)
			rt := kmsg.NewAddPartitionsToTxnResponseTransaction()
			rt.TransactionalID = tr.TransactionalID
			for _, x := range res {
				if n := len(rt.Topics); n == 0 || rt.Topics[n-1].Topic != x.topic {
					tt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
					tt.Topic = x.topic
					rt.Topics = append(rt.Topics, tt)
				}
				tp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
				tp.Partition, tp.ErrorCode = x.partition, x.code
				tt := &rt.Topics[len(rt.Topics)-1]
				tt.Partitions = append(tt.Partitions, tp)
			}
			resp.Transactions = append(resp.Transactions, rt)
		}
		return resp
	}
}
