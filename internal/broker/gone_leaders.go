package broker

// Metadata right after a broker is killed. A client learns of a kill -9
// first: its connection to the broker reads EOF, and it asks for metadata at
// once. The cluster declares the broker dead about a report interval later
// (docs/cluster.md, "Liveness") and only then moves its partitions, so that
// first answer still names the killed broker as their leader, and some
// clients do not ask again soon: franz-go waits out its metadata min age
// (5 s) and meanwhile retries the dead address, which kept a KIP-848 member
// from consuming for about 5 s after the kill of its coordinator.
//
// So a Metadata answer that names, as a partition's leader, another broker
// whose address now refuses connections (nothing listens there: its process
// is gone) waits for that partition to move, and then names the new leader.
// FindCoordinator answers are not held: held as well, kafkajs (whose
// coordinator then pointed at a broker its pool had dropped) missed its
// session in 2 of 4 runs (docs/conformance.md).
// The wait ends when no broker named is gone any more (the partitions moved,
// or the broker is back on its address) and every live broker acts on the
// assignment that moved them (the new leader serves), when the request is
// abandoned or the broker closes, or after GoneLeaderWait, when the answer
// goes out as it is. A broker that is frozen or slow still accepts connections and is not
// waited for; neither is one whose address cannot be reached at all (the
// probe times out), which the cluster judges by its report TTL.
//
// The probe is a TCP connection to the broker's client address. It is kept
// open, idle (nothing is ever sent on it), and checked at each use with a
// peek that does not wait: a killed process's kernel closes it at once, so
// the first request after a kill sees it closed and dials again, without a
// round trip for every answer while the broker lives. A refused dial is
// reused for probeFresh; one that timed out or failed otherwise (an address
// that cannot be reached) for probeUnreachable, so that answers naming an
// unreachable broker do not each wait out a dial. The probe of an address
// that no listed broker has any more is dropped, its connection closed.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	probeFresh   = 200 * time.Millisecond // a refused dial is reused this long
	probeTimeout = 200 * time.Millisecond // a dial that takes longer proves nothing
	// probeUnreachable: a dial that failed but was not refused is reused
	// this long (the broker counts as not gone meanwhile).
	probeUnreachable = 2 * time.Second
)

// probes holds, by address, the last probe of each broker.
type probes struct {
	mu sync.Mutex // guards m
	m  map[string]probe
}

// probe is a connection kept open to a broker that accepted it, or the time
// a dial was refused or failed otherwise.
type probe struct {
	conn      net.Conn
	refusedAt time.Time
	failedAt  time.Time // a dial failed without a refusal: nothing learnt
}

// gone reports whether the broker's client address refuses connections.
func (b *Broker) gone(bi BrokerInfo) bool {
	addr := probeAddr(bi)
	b.probes.mu.Lock()
	p, ok := b.probes.m[addr]
	switch {
	case ok && p.conn != nil && stillOpen(p.conn):
		b.probes.mu.Unlock()
		return false
	case ok && p.conn != nil:
		p.conn.Close()
		delete(b.probes.m, addr)
	case ok && !p.refusedAt.IsZero() && time.Since(p.refusedAt) < probeFresh:
		b.probes.mu.Unlock()
		return true
	case ok && !p.failedAt.IsZero() && time.Since(p.failedAt) < probeUnreachable:
		b.probes.mu.Unlock()
		return false
	}
	b.probes.mu.Unlock()

	c, err := net.DialTimeout("tcp", addr, probeTimeout)
	refused := errors.Is(err, syscall.ECONNREFUSED)
	b.probes.mu.Lock()
	defer b.probes.mu.Unlock()
	if b.probes.m == nil {
		b.probes.m = map[string]probe{}
	}
	if old, ok := b.probes.m[addr]; ok && old.conn != nil {
		old.conn.Close() // a concurrent probe's; this one is newer
	}
	switch {
	case err == nil:
		b.probes.m[addr] = probe{conn: c}
	case refused:
		b.probes.m[addr] = probe{refusedAt: time.Now()}
	default:
		b.probes.m[addr] = probe{failedAt: time.Now()} // unreachable or slow: nothing learnt
	}
	return refused
}

// probeAddr is the address a broker is probed at: its client address.
func probeAddr(bi BrokerInfo) string {
	return net.JoinHostPort(bi.Host, strconv.Itoa(int(bi.Port)))
}

// pruneProbes drops the probes of addresses that no listed broker has any
// more (a broker removed, or back at another address), closing their
// connections: nothing would ever check them again. Run on each applied
// assignment (AssignmentChanged), the only time the list changes.
func (b *Broker) pruneProbes() {
	b.probes.mu.Lock()
	defer b.probes.mu.Unlock()
	if len(b.probes.m) == 0 {
		return
	}
	addrs := map[string]bool{}
	for _, bi := range b.cfg.Cluster.Brokers() {
		addrs[probeAddr(bi)] = true
	}
	for addr, p := range b.probes.m {
		if !addrs[addr] {
			if p.conn != nil {
				p.conn.Close()
			}
			delete(b.probes.m, addr)
		}
	}
}

// stillOpen reports whether the peer has not closed or reset an idle
// connection, without waiting: a peek finds its end of stream (or reset) if
// it did, and nothing to read if not.
func stillOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var one [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n > 0 || errors.Is(rerr, syscall.EAGAIN)
		return true
	}); err != nil {
		return false
	}
	return open
}

// closeProbes closes the connections the probes keep (Broker close).
func (b *Broker) closeProbes() {
	b.probes.mu.Lock()
	defer b.probes.mu.Unlock()
	for addr, p := range b.probes.m {
		if p.conn != nil {
			p.conn.Close()
		}
		delete(b.probes.m, addr)
	}
}

// goneLeader reports whether a partition in resp is led by another listed
// broker that is gone.
func (b *Broker) goneLeader(resp *kmsg.MetadataResponse) bool {
	listed := map[int32]BrokerInfo{}
	for _, bi := range b.cfg.Cluster.Brokers() {
		listed[bi.NodeID] = bi
	}
	checked := map[int32]bool{}
	for _, t := range resp.Topics {
		if t.IsInternal {
			continue // nominal leaders (internal_topics.go): nothing is read from them
		}
		for _, p := range t.Partitions {
			l := p.Leader
			if l == b.cfg.ID || checked[l] {
				continue
			}
			checked[l] = true
			if bi, ok := listed[l]; ok && b.gone(bi) {
				return true
			}
		}
	}
	return false
}

// awaitLiveLeaders holds a Metadata answer while it names a gone leader
// (see the file comment), for at most GoneLeaderWait, bringing its brokers,
// controller and leaders up to date as the assignment changes; it checks
// again every settledTick, since a broker back on its address (probes are
// reused for probeFresh) or the other brokers applying the move end the wait
// without a new assignment here.
func (b *Broker) awaitLiveLeaders(ctx context.Context, resp *kmsg.MetadataResponse) {
	if !b.goneLeader(resp) {
		return
	}
	b.log.Info("metadata answer waits: a partition leader's address refuses connections", "max_wait", b.cfg.GoneLeaderWait)
	b.awaitApplied(ctx, b.cfg.GoneLeaderWait, settledTick, func() bool { // catch_up.go
		b.refreshMetadata(resp)
		return b.goneLeader(resp) || !b.settled()
	})
}

// settled reports whether every live broker acts on the assignment this
// broker acts on (true for a Cluster that cannot tell): a held Metadata
// answer names the new leaders only once they serve, since a client sent to
// one that has not applied the move yet is refused NOT_LEADER_OR_FOLLOWER,
// and kafkajs rejoins its group on that.
func (b *Broker) settled() bool {
	s, ok := b.cfg.Cluster.(Settler)
	return !ok || s.Settled()
}

// refreshMetadata rewrites the brokers, the controller and the partition
// leaders of resp from the assignment in force.
func (b *Broker) refreshMetadata(resp *kmsg.MetadataResponse) {
	resp.ControllerID = b.cfg.Cluster.ControllerID()
	resp.Brokers = metadataBrokers(b.cfg.Cluster.Brokers())
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic == nil {
			continue
		}
		if t.IsInternal {
			if it, ok := b.internalTopic(*t.Topic); ok {
				*t = b.metadataInternal(it)
			}
			continue
		}
		for j := range t.Partitions {
			setLeader(&t.Partitions[j], b.cfg.Cluster, *t.Topic)
		}
	}
}

// metadataBrokers lists brokers as Metadata answers them.
func metadataBrokers(bs []BrokerInfo) []kmsg.MetadataResponseBroker {
	out := make([]kmsg.MetadataResponseBroker, 0, len(bs))
	for _, bi := range bs {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = bi.NodeID, bi.Host, bi.Port
		if bi.Rack != "" {
			rack := bi.Rack
			mb.Rack = &rack
		}
		out = append(out, mb)
	}
	return out
}

// setLeader fills a partition's leader, epoch and replicas from the
// assignment (LEADER_NOT_AVAILABLE when it names none).
func setLeader(mp *kmsg.MetadataResponseTopicPartition, cl Cluster, topic string) {
	node, epoch, ok := cl.Leader(topic, mp.Partition)
	if !ok {
		mp.ErrorCode = kerr.LeaderNotAvailable.Code
		mp.Leader, mp.LeaderEpoch = -1, -1
		mp.Replicas, mp.ISR = []int32{}, []int32{}
		return
	}
	mp.ErrorCode = 0
	mp.Leader, mp.LeaderEpoch = node, epoch
	mp.Replicas, mp.ISR = []int32{node}, []int32{node}
}
