package broker

// Brokers whose process is gone. A client learns of a kill -9 first: its
// connection to the broker reads EOF, and it asks for metadata at once. The
// cluster declares the broker dead a report interval or more later
// (docs/cluster.md, "Liveness") and only then moves its partitions, so that
// first answer named the killed broker as their leader, with no error, and
// some clients do not ask again soon: franz-go waits out its metadata min
// age (5 s) and meanwhile retries the dead address.
//
// Kafka names no leader that is not alive: such a partition is answered
// LEADER_NOT_AVAILABLE with leader -1, and clients treat it as an election
// under way, asking again within a fraction of a second. So does kaas for a
// partition whose leader's client address refuses connections (nothing
// listens there: its process is gone), until the cluster moves it. The
// broker stays listed, as it does in the cluster's view; only its
// partitions lose their leader in the answer.
//
// Each broker is watched from here over an idle TCP connection to its
// client address, on which nothing is ever sent. A killed process's kernel
// closes the connection at once; the watcher then dials again, and a
// refused dial marks the broker gone, re-dialled every goneRedial until it
// accepts again (restarted) or leaves the cluster's list. A broker that is
// frozen or slow still accepts connections and is not gone; one whose
// address cannot be reached at all (the dial times out) is not judged
// here, but by the cluster's liveness reports. A watcher starts at the
// first Metadata answer that names its broker as a leader, so answers
// never wait for a dial.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	goneRedial      = 100 * time.Millisecond // a refused address is dialled again this often
	goneDialTimeout = time.Second            // a dial that takes longer proves nothing
	goneMaxBackoff  = 2 * time.Second        // redials of an unreachable address back off to this
)

// goneWatch holds a watcher per client address of another broker.
type goneWatch struct {
	mu     sync.Mutex // guards w, closed
	w      map[string]*addrWatch
	closed bool // the broker is closing: no watcher starts
}

// addrWatch is what the watcher of one address has seen.
type addrWatch struct {
	gone atomic.Bool // the last dial was refused
}

// goneLeader reports whether the broker node, another than this one, is
// listed at an address that refuses connections. brokers is the cluster's
// list, by node id.
func (b *Broker) goneLeader(node int32, brokers map[int32]BrokerInfo) bool {
	bi, ok := brokers[node]
	if !ok || node == b.cfg.ID {
		return false
	}
	addr := net.JoinHostPort(bi.Host, strconv.Itoa(int(bi.Port)))
	b.goneW.mu.Lock()
	defer b.goneW.mu.Unlock()
	w, ok := b.goneW.w[addr]
	if !ok {
		if b.goneW.closed {
			return false
		}
		if b.goneW.w == nil {
			b.goneW.w = map[string]*addrWatch{}
		}
		w = &addrWatch{}
		b.goneW.w[addr] = w
		b.wg.Add(1)
		go b.watchAddr(node, addr, w)
	}
	return w.gone.Load()
}

// stopGoneWatchers keeps new watchers from starting (Broker close); the
// running ones end with the broker's context.
func (b *Broker) stopGoneWatchers() {
	b.goneW.mu.Lock()
	b.goneW.closed = true
	b.goneW.mu.Unlock()
}

// brokersByID is the cluster's list of brokers by node id.
func (b *Broker) brokersByID() map[int32]BrokerInfo {
	m := map[int32]BrokerInfo{}
	for _, bi := range b.cfg.Cluster.Brokers() {
		m[bi.NodeID] = bi
	}
	return m
}

// listedAt reports whether the cluster lists a broker at addr.
func (b *Broker) listedAt(addr string) bool {
	for _, bi := range b.cfg.Cluster.Brokers() {
		if net.JoinHostPort(bi.Host, strconv.Itoa(int(bi.Port))) == addr {
			return true
		}
	}
	return false
}

// watchAddr keeps w up to date for addr until the broker closes or no
// listed broker has that address; then it forgets the address, so that a
// broker listed there later is watched afresh.
func (b *Broker) watchAddr(node int32, addr string, w *addrWatch) {
	defer b.wg.Done()
	defer func() {
		b.goneW.mu.Lock()
		if b.goneW.w[addr] == w {
			delete(b.goneW.w, addr)
		}
		b.goneW.mu.Unlock()
	}()
	log := b.log.With("peer", node, "addr", addr)
	d := net.Dialer{Timeout: goneDialTimeout}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var wait time.Duration
	for {
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-b.ctx.Done():
				return
			case <-timer.C:
			}
		}
		if b.ctx.Err() != nil || !b.listedAt(addr) {
			return
		}
		c, err := d.DialContext(b.ctx, "tcp", addr)
		switch {
		case err == nil:
			if w.gone.Swap(false) {
				log.Info("broker's address accepts connections again; its partitions are named as their leader")
			}
			held := time.Now()
			awaitClose(b.ctx, c)
			// Dial again at once: a kill is seen at this end of
			// stream. A peer that closes at once (a connection
			// limit) is dialled again only after goneRedial.
			wait = 0
			if time.Since(held) < goneRedial {
				wait = goneRedial
			}
		case errors.Is(err, syscall.ECONNREFUSED):
			if !w.gone.Swap(true) {
				log.Info("broker's address refuses connections; its partitions are answered LEADER_NOT_AVAILABLE until they move")
			}
			wait = goneRedial
		default:
			if b.ctx.Err() != nil {
				return
			}
			// Unreachable or slow: nothing learnt.
			w.gone.Store(false)
			wait = min(2*wait+goneRedial, goneMaxBackoff)
		}
	}
}

// awaitClose returns when the peer closes or resets c (nothing is sent on
// it, so it never answers anything) or ctx ends, and closes c.
func awaitClose(ctx context.Context, c net.Conn) {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	var one [1]byte
	for {
		if _, err := c.Read(one[:]); err != nil {
			break
		}
	}
	c.Close()
}
