package node

import (
	"sort"
	"sync/atomic"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/cluster"
)

// view adapts the applied assignment to broker.Cluster. It is rebuilt on
// every applied assignment (on the runtime goroutine) and read lock-free.
type view struct {
	rt  *cluster.Runtime
	me  int32
	idx atomic.Pointer[index]
}

type leader struct {
	node  int32
	epoch int32
}

type index struct {
	leaders    map[string][]leader // by topic, indexed by partition; node -1 = none
	brokers    []broker.BrokerInfo
	controller int32
	ready      bool
}

func (v *view) update(a *cluster.Assignment) {
	nodes := map[string]int32{}
	ix := &index{leaders: map[string][]leader{}, controller: -1}
	if old := v.idx.Load(); old != nil {
		ix.ready = old.ready // ready stays true: a draining broker still answers
	}
	for _, b := range a.Brokers {
		nodes[b.ID] = b.NodeID
		if b.Health == cluster.Alive {
			ix.brokers = append(ix.brokers, broker.BrokerInfo{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Rack: b.Rack})
		}
		if b.NodeID == v.me && b.Health == cluster.Alive {
			ix.ready = true
		}
	}
	sort.Slice(ix.brokers, func(i, j int) bool { return ix.brokers[i].NodeID < ix.brokers[j].NodeID })
	if id, ok := nodes[a.Controller]; ok {
		ix.controller = id
	}
	for _, p := range a.Partitions {
		ls := ix.leaders[p.Topic]
		for int32(len(ls)) <= p.Partition {
			ls = append(ls, leader{node: -1})
		}
		ls[p.Partition] = leader{node: nodes[p.Broker], epoch: p.Epoch}
		ix.leaders[p.Topic] = ls
	}
	v.idx.Store(ix)
}

func (v *view) Brokers() []broker.BrokerInfo {
	if ix := v.idx.Load(); ix != nil {
		return ix.brokers
	}
	return nil
}

func (v *view) ControllerID() int32 {
	if ix := v.idx.Load(); ix != nil {
		return ix.controller
	}
	return -1
}

func (v *view) Leader(topic string, partition int32) (int32, int32, bool) {
	ix := v.idx.Load()
	if ix == nil {
		return -1, -1, false
	}
	ls := ix.leaders[topic]
	if partition < 0 || int(partition) >= len(ls) || ls[partition].node < 0 {
		return -1, -1, false
	}
	return ls[partition].node, ls[partition].epoch, true
}

// Refresh asks the cluster runtime to look for a newer assignment now
// (broker.Refresher: a client knows of a move this broker has not applied).
func (v *view) Refresh() {
	if v.rt != nil {
		v.rt.Poke()
	}
}

// Settled implements broker.Settler: every live broker acts on the
// assignment this broker acts on, or a newer one.
func (v *view) Settled() bool {
	if v.rt == nil {
		return false
	}
	a := v.rt.Current()
	return a != nil && v.rt.Settled(a)
}

// Ready implements the broker's readiness check: an applied assignment
// lists this broker alive.
func (v *view) Ready() bool {
	ix := v.idx.Load()
	return ix != nil && ix.ready
}
