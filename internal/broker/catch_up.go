package broker

// Catching up with a client that knows a newer leader epoch. When a
// partition moves, the old leader answers NOT_LEADER_OR_FOLLOWER naming the
// new leader and epoch (KIP-951), and the client goes there at once, often
// before the new leader has applied the assignment (brokers apply it one
// report or poll apart). A request whose current leader epoch is newer than
// the one this broker knows therefore waits, up to catchUpWait, for the
// assignment to arrive (the cluster is asked to look for it now) instead of
// being refused: a refusal costs clients a retry backoff (franz-go waits a
// whole second before retrying a failed OffsetForLeaderEpoch). An epoch that
// does not arrive within the wait is answered as before (UNKNOWN_LEADER_EPOCH
// or NOT_LEADER_OR_FOLLOWER).

import (
	"context"
	"time"
)

// catchUpWait bounds the wait for an assignment a client already knows:
// a few polls of the cluster runtime.
const catchUpWait = 750 * time.Millisecond

// Refresher is implemented by a Cluster that can look for a newer
// assignment at once (node's view pokes the cluster runtime).
type Refresher interface{ Refresh() }

// behind reports whether the client knows a newer epoch of the partition
// than this broker does.
func (b *Broker) behind(topic string, idx, clientEpoch int32) bool {
	if clientEpoch < 0 {
		return false
	}
	_, epoch, ok := b.cfg.Cluster.Leader(topic, idx)
	return !ok || epoch < clientEpoch
}

// ifBehind adds the partition to want (topic → partition → the client's
// epoch, made on first use) when the client knows a newer epoch of it than
// this broker does, and returns want.
func (b *Broker) ifBehind(want map[string]map[int32]int32, topic string, idx, clientEpoch int32) map[string]map[int32]int32 {
	if !b.behind(topic, idx, clientEpoch) {
		return want
	}
	if want == nil {
		want = map[string]map[int32]int32{}
	}
	if want[topic] == nil {
		want[topic] = map[int32]int32{}
	}
	want[topic][idx] = clientEpoch
	return want
}

// catchUp waits until this broker knows each partition's epoch at least as
// new as the client's (want: topic → partition → client epoch), ctx ends,
// the broker closes, or catchUpWait passes. It returns at once when the
// broker is not behind.
func (b *Broker) catchUp(ctx context.Context, want map[string]map[int32]int32) {
	lagging := func() bool {
		for topic, ps := range want {
			for idx, e := range ps {
				if b.behind(topic, idx, e) {
					return true
				}
			}
		}
		return false
	}
	if !lagging() {
		return
	}
	b.awaitApplied(ctx, catchUpWait, 0, lagging)
}

// awaitApplied waits while pending reports true: it checks again after each
// newly applied assignment (and every tick, when tick > 0, for a condition
// that can change without one), asking the cluster to look for a newer
// assignment at once. It ends when pending reports false, after wait, when
// ctx ends or the broker closes.
func (b *Broker) awaitApplied(ctx context.Context, wait, tick time.Duration, pending func() bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var ticks <-chan time.Time
	if tick > 0 {
		t := time.NewTicker(tick)
		defer t.Stop()
		ticks = t.C
	}
	for {
		applied := b.applied.wait() // taken before checking: no change is missed
		if !pending() {
			return
		}
		if r, ok := b.cfg.Cluster.(Refresher); ok {
			r.Refresh()
		}
		select {
		case <-applied:
		case <-ticks:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		case <-b.closing:
			return
		}
	}
}
