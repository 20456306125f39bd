package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/storage"
	"github.com/kaas-dev/kaas/internal/txn"
)

// peers holds one franz-go client per other broker, each seeded with that
// broker's address only, for broker-to-broker requests (transaction
// markers). Guarded by mu.
type peers struct {
	mu      sync.Mutex
	clients map[string]*kgo.Client
}

// peerClientID is the client id of broker-to-broker requests: a request
// forwarded to the controller that finds no controller there is answered
// NOT_CONTROLLER, never forwarded again.
const peerClientID = "kaas-peer"

func (p *peers) request(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	p.mu.Lock()
	if p.clients == nil {
		p.clients = map[string]*kgo.Client{}
	}
	cl, ok := p.clients[addr]
	if !ok {
		var err error
		cl, err = kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.DialTimeout(3*time.Second), kgo.ClientID(peerClientID))
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		p.clients[addr] = cl
	}
	p.mu.Unlock()
	return cl.SeedBrokers()[0].Request(ctx, req)
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cl := range p.clients {
		cl.Close()
	}
	p.clients = nil
}

// brokerAddr returns the address of node id from the cluster view.
func (b *Broker) brokerAddr(node int32) (string, bool) {
	for _, bi := range b.cfg.Cluster.Brokers() {
		if bi.NodeID == node {
			return net.JoinHostPort(bi.Host, strconv.Itoa(int(bi.Port))), true
		}
	}
	return "", false
}

// groupMarkerTopic prefixes the pseudo-topic that carries a group's
// transaction marker in a kaas WriteTxnMarkers request: Apache Kafka sends
// markers for offsets to __consumer_offsets partitions; kaas has one offsets
// file per group, so its markers name the group. The prefix cannot collide
// with a topic: ':' is not allowed in topic names.
const groupMarkerTopic = "__kaas_group:"

// retryMarkers runs attempt until it succeeds, ctx ends, or 30 s pass,
// backing off between tries (leaders and coordinators move during
// failover; markers must land eventually).
func retryMarkers(ctx context.Context, what string, attempt func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// Partitions implements txn.Markers: each partition's leader appends the
// marker and syncs it.
func (b *Broker) Partitions(ctx context.Context, pid int64, epoch int16, commit bool, tps []txn.TP) error {
	remaining := append([]txn.TP(nil), tps...)
	return retryMarkers(ctx, "partition markers", func(ctx context.Context) error {
		byLeader := map[int32][]txn.TP{}
		for _, tp := range remaining {
			node, _, ok := b.cfg.Cluster.Leader(tp.Topic, tp.Partition)
			if !ok {
				if _, known := b.topics.Get(tp.Topic); !known {
					continue // the topic was deleted: nothing to mark
				}
				node = -1
			}
			byLeader[node] = append(byLeader[node], tp)
		}
		var failed []txn.TP
		var firstErr error
		for node, tps := range byLeader {
			var errs map[txn.TP]error
			var err error
			switch {
			case node < 0:
				err = errNoLeader
			case node == b.cfg.ID:
				errs = b.writeMarkers(pid, epoch, commit, tps)
			default:
				errs, err = b.remoteMarkers(ctx, node, pid, epoch, commit, tps)
			}
			if err != nil {
				failed = append(failed, tps...)
				firstErr = cmp(firstErr, err)
				continue
			}
			for _, tp := range tps {
				if e := errs[tp]; e != nil {
					if errors.Is(e, errUnknownTopic) {
						continue // deleted since
					}
					failed = append(failed, tp)
					firstErr = cmp(firstErr, e)
				}
			}
		}
		remaining = failed
		return firstErr
	})
}

func cmp(first, err error) error {
	if first == nil {
		return err
	}
	return first
}

// writeMarkers appends markers to partitions this broker leads and syncs.
func (b *Broker) writeMarkers(pid int64, epoch int16, commit bool, tps []txn.TP) map[txn.TP]error {
	errs := map[txn.TP]error{}
	type written struct {
		p    *partition
		cuts uint64
	}
	var synced []written
	for _, tp := range tps {
		p, err := b.partitionFor(tp.Topic, tp.Partition)
		if err != nil {
			errs[tp] = err
			continue
		}
		cuts := p.log.Cuts()
		if _, err := p.log.AppendMarker(pid, epoch, commit, 0); err != nil {
			errs[tp] = err
			continue
		}
		synced = append(synced, written{p, cuts})
	}
	for _, w := range synced {
		err := w.p.log.Sync()
		if err == nil && w.p.log.Cuts() != w.cuts {
			err = storage.ErrCut // the marker may be gone: write it again
		}
		if err != nil {
			errs[txn.TP{Topic: w.p.topic, Partition: w.p.index}] = err
		}
	}
	return errs
}

func (b *Broker) remoteMarkers(ctx context.Context, node int32, pid int64, epoch int16, commit bool, tps []txn.TP) (map[txn.TP]error, error) {
	addr, ok := b.brokerAddr(node)
	if !ok {
		return nil, fmt.Errorf("broker %d: no address", node)
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed = pid, epoch, commit
	byTopic := map[string][]int32{}
	for _, tp := range tps {
		byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
	}
	for t, ps := range byTopic {
		mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		mt.Topic, mt.Partitions = t, ps
		m.Topics = append(m.Topics, mt)
	}
	req.Markers = append(req.Markers, m)
	resp, err := b.peers.request(ctx, addr, req)
	if err != nil {
		return nil, err
	}
	errs := map[txn.TP]error{}
	for _, rm := range resp.(*kmsg.WriteTxnMarkersResponse).Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					errs[txn.TP{Topic: rt.Topic, Partition: rp.Partition}] = kerr.ErrorForCode(rp.ErrorCode)
				}
			}
		}
	}
	return errs, nil
}

// Groups implements txn.Markers: each group's coordinator commits or drops
// the producer's staged offsets.
func (b *Broker) Groups(ctx context.Context, pid int64, epoch int16, commit bool, groups []string) error {
	remaining := append([]string(nil), groups...)
	return retryMarkers(ctx, "group markers", func(ctx context.Context) error {
		var failed []string
		var firstErr error
		for _, g := range remaining {
			cb, err := b.coord.FindGroup(g)
			if err == nil {
				if cb.NodeID == b.cfg.ID {
					err = b.coord.EndTxnOffsets(ctx, g, pid, commit)
				} else {
					err = b.remoteGroupMarker(ctx, cb.NodeID, pid, epoch, commit, g)
				}
			}
			if err != nil {
				failed = append(failed, g)
				firstErr = cmp(firstErr, err)
			}
		}
		remaining = failed
		return firstErr
	})
}

func (b *Broker) remoteGroupMarker(ctx context.Context, node int32, pid int64, epoch int16, commit bool, group string) error {
	addr, ok := b.brokerAddr(node)
	if !ok {
		return fmt.Errorf("broker %d: no address", node)
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed = pid, epoch, commit
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = groupMarkerTopic+group, []int32{0}
	m.Topics = append(m.Topics, mt)
	req.Markers = append(req.Markers, m)
	resp, err := b.peers.request(ctx, addr, req)
	if err != nil {
		return err
	}
	for _, rm := range resp.(*kmsg.WriteTxnMarkersResponse).Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					return kerr.ErrorForCode(rp.ErrorCode)
				}
			}
		}
	}
	return nil
}
