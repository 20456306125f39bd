package k8slease

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// cutLeases fails every call while *cut is set: this broker is cut off
// from the API server. Only the test goroutine touches cut.
type cutLeases struct {
	coordclient.LeasesGetter
	cut *bool
}

func (c cutLeases) Leases(namespace string) coordclient.LeaseInterface {
	return cutLease{c.LeasesGetter.Leases(namespace), c.cut}
}

type cutLease struct {
	coordclient.LeaseInterface
	cut *bool
}

var errCut = errors.New("dial tcp 10.96.0.1:443: i/o timeout")

func (c cutLease) Get(ctx context.Context, name string, o metav1.GetOptions) (*coordv1.Lease, error) {
	if *c.cut {
		return nil, errCut
	}
	return c.LeaseInterface.Get(ctx, name, o)
}

func (c cutLease) Update(ctx context.Context, l *coordv1.Lease, o metav1.UpdateOptions) (*coordv1.Lease, error) {
	if *c.cut {
		return nil, errCut
	}
	return c.LeaseInterface.Update(ctx, l, o)
}

func (c cutLease) Create(ctx context.Context, l *coordv1.Lease, o metav1.CreateOptions) (*coordv1.Lease, error) {
	if *c.cut {
		return nil, errCut
	}
	return c.LeaseInterface.Create(ctx, l, o)
}

// TestNoTwoLeadersUnderFreezesAndCuts drives three electors through random
// freezes (no ticks at all, as under SIGSTOP) and cuts from the API server,
// on one simulated clock, and checks every Leader answer: no two brokers
// ever lead one epoch, and once a broker has led epoch e, no broker claims
// an older epoch afterwards. Then, with the faults gone, one leader remains.
func TestNoTwoLeadersUnderFreezesAndCuts(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			cs := newClientset(t)
			const n = 3
			type broker struct {
				e           *Elector
				cut         bool
				frozenUntil time.Time
				cutUntil    time.Time
			}
			bs := make([]*broker, n)
			for i := range bs {
				b := &broker{}
				b.e = newElector(t, cutLeases{cs.CoordinationV1(), &b.cut}, "kaas-"+strconv.Itoa(i))
				bs[i] = b
			}
			type claim struct {
				at    time.Time
				id    string
				epoch int64
			}
			var newest claim // the claim of the highest epoch so far
			holderOf := map[int64]string{}
			leadersAt := func(now time.Time, faults bool) {
				for _, b := range bs {
					if faults {
						if now.After(b.cutUntil) {
							b.cut = false
						}
						if rng.IntN(100) == 0 {
							b.frozenUntil = now.Add(time.Duration(rng.IntN(6000)) * time.Millisecond)
						}
						if rng.IntN(100) == 0 {
							b.cut, b.cutUntil = true, now.Add(time.Duration(rng.IntN(5000))*time.Millisecond)
						}
					}
					if now.Before(b.frozenUntil) || rng.IntN(2) == 0 {
						continue
					}
					el, _ := b.e.Tick(context.Background(), now)
					if !el.Leader {
						continue
					}
					id := b.e.o.Identity
					if h, ok := holderOf[el.Epoch]; ok && h != id {
						t.Fatalf("%v: %s and %s both led epoch %d", now.Sub(t0), h, id, el.Epoch)
					}
					holderOf[el.Epoch] = id
					if el.Epoch < newest.epoch {
						t.Fatalf("%v: %s claims epoch %d after %s led epoch %d at %v",
							now.Sub(t0), id, el.Epoch, newest.id, newest.epoch, newest.at.Sub(t0))
					}
					newest = claim{now, id, el.Epoch}
				}
			}
			now := t0
			for range 3000 { // five simulated minutes of faults
				now = now.Add(100 * time.Millisecond)
				leadersAt(now, true)
			}
			for _, b := range bs {
				b.cut, b.frozenUntil = false, time.Time{}
			}
			for range 100 { // ten quiet seconds
				now = now.Add(100 * time.Millisecond)
				leadersAt(now, false)
			}
			if now.Sub(newest.at) > time.Second {
				t.Fatalf("no leader in the last second of quiet; last was %s at epoch %d, %v ago",
					newest.id, newest.epoch, now.Sub(newest.at))
			}
			if newest.epoch < 3 {
				t.Logf("only %d epochs: the faults did not move the role much", newest.epoch)
			}
		})
	}
}
