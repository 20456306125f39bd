package k8slease

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kaas-dev/kaas/internal/cluster"
)

const (
	ns   = "kaas"
	name = "kaas-controller"
	ttl  = 3 * time.Second
)

var (
	t0       = time.Unix(1_800_000_000, 0)
	leaseGVR = coordv1.SchemeGroupVersion.WithResource("leases")
)

// newClientset returns a fake clientset that, unlike the stock one, assigns
// a fresh resourceVersion on every write and refuses an Update whose
// resourceVersion is not the stored one, as the API server does. Reactors
// run under the Fake's lock, so rv needs no lock of its own.
func newClientset(t *testing.T) *fake.Clientset {
	t.Helper()
	cs := fake.NewSimpleClientset()
	tracker := cs.Tracker()
	var rv int64
	cs.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.CreateAction).GetObject().(*coordv1.Lease).DeepCopy()
		rv++
		l.ResourceVersion = strconv.FormatInt(rv, 10)
		if err := tracker.Create(leaseGVR, l, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, l, nil
	})
	cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordv1.Lease).DeepCopy()
		cur, err := tracker.Get(leaseGVR, a.GetNamespace(), l.Name)
		if err != nil {
			return true, nil, err
		}
		if cur.(*coordv1.Lease).ResourceVersion != l.ResourceVersion {
			return true, nil, apierrors.NewConflict(leaseGVR.GroupResource(), l.Name,
				errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		rv++
		l.ResourceVersion = strconv.FormatInt(rv, 10)
		if err := tracker.Update(leaseGVR, l, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, l, nil
	})
	return cs
}

func newElector(t *testing.T, leases coordclient.LeasesGetter, id string) *Elector {
	t.Helper()
	e, err := New(Options{Leases: leases, Namespace: ns, Name: name, Identity: id, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func tick(t *testing.T, e *Elector, now time.Time) cluster.Election {
	t.Helper()
	el, err := e.Tick(context.Background(), now)
	if err != nil {
		t.Fatalf("%s: tick at %v: %v", e.o.Identity, now.Sub(t0), err)
	}
	return el
}

func getLease(t *testing.T, cs *fake.Clientset) *coordv1.Lease {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestFirstBrokerCreatesLeaseAndOthersFollow(t *testing.T) {
	cs := newClientset(t)
	a, b := newElector(t, cs.CoordinationV1(), "kaas-0"), newElector(t, cs.CoordinationV1(), "kaas-1")
	if el := tick(t, a, t0); !el.Leader || el.Epoch != 1 || el.Holder != "kaas-0" {
		t.Fatalf("a = %+v, want leader at epoch 1", el)
	}
	if el := tick(t, b, t0); el.Leader || el.Epoch != 1 || el.Holder != "kaas-0" {
		t.Fatalf("b = %+v, want follower of kaas-0 at epoch 1", el)
	}
	l := getLease(t, cs)
	if holder(l) != "kaas-0" || transitions(l) != 1 || *l.Spec.LeaseDurationSeconds != 3 {
		t.Fatalf("lease spec = %+v", l.Spec)
	}
}

func TestLeaderRenewsAndKeepsFollowersOff(t *testing.T) {
	cs := newClientset(t)
	a, b := newElector(t, cs.CoordinationV1(), "kaas-0"), newElector(t, cs.CoordinationV1(), "kaas-1")
	tick(t, a, t0)
	first := getLease(t, cs)
	// Ten TTLs of the runtime's cadence: the leader ticks every 200ms, the
	// follower every 400ms.
	for ms := 200; ms <= 30_000; ms += 200 {
		if el := tick(t, a, at(ms)); !el.Leader || el.Epoch != 1 {
			t.Fatalf("leader lost the role at %dms: %+v", ms, el)
		}
		if ms%400 == 0 {
			if el := tick(t, b, at(ms)); el.Leader || el.Holder != "kaas-0" || el.Epoch != 1 {
				t.Fatalf("follower at %dms: %+v", ms, el)
			}
		}
	}
	last := getLease(t, cs)
	if !last.Spec.RenewTime.After(first.Spec.RenewTime.Time) || last.ResourceVersion == first.ResourceVersion {
		t.Fatalf("lease not renewed: renewTime %v → %v, rv %s → %s",
			first.Spec.RenewTime, last.Spec.RenewTime, first.ResourceVersion, last.ResourceVersion)
	}
	if transitions(last) != 1 {
		t.Fatalf("renewals changed leaseTransitions to %d", transitions(last))
	}
}

func TestLeaderDoesNoIOBetweenRenewals(t *testing.T) {
	cs := newClientset(t)
	a := newElector(t, cs.CoordinationV1(), "kaas-0")
	tick(t, a, t0)
	n := len(cs.Actions())
	for ms := 100; ms < 1000; ms += 100 { // RenewEvery = TTL/3 = 1s
		tick(t, a, at(ms))
	}
	if got := len(cs.Actions()) - n; got != 0 {
		t.Fatalf("%d API calls between renewals, want 0", got)
	}
	tick(t, a, at(1000))
	if got := len(cs.Actions()) - n; got != 1 {
		t.Fatalf("%d API calls for one renewal, want 1", got)
	}
}

func TestTakeoverAfterTTLWithHigherEpoch(t *testing.T) {
	cs := newClientset(t)
	a, b := newElector(t, cs.CoordinationV1(), "kaas-0"), newElector(t, cs.CoordinationV1(), "kaas-1")
	tick(t, a, t0)
	tick(t, b, at(100)) // b first sees the lease at 100ms; a stops ticking (killed or frozen)
	for ms := 500; ms < 3100; ms += 400 {
		if el := tick(t, b, at(ms)); el.Leader {
			t.Fatalf("took over at %dms, before the lease expired by b's clock (TTL from 100ms)", ms)
		}
	}
	el := tick(t, b, at(3100))
	if !el.Leader || el.Epoch != 2 || el.Holder != "kaas-1" {
		t.Fatalf("b = %+v, want leader at epoch 2", el)
	}
	if l := getLease(t, cs); holder(l) != "kaas-1" || transitions(l) != 2 {
		t.Fatalf("lease holder %q transitions %d", holder(l), transitions(l))
	}
	// The frozen holder resumes: its renewal conflicts and it steps down.
	el = tick(t, a, at(3200))
	if el.Leader || el.Epoch != 2 || el.Holder != "kaas-1" {
		t.Fatalf("resumed old holder = %+v, want follower at epoch 2", el)
	}
	if el := tick(t, b, at(3300)); !el.Leader || el.Epoch != 2 {
		t.Fatalf("new holder = %+v", el)
	}
}

func TestResignLetsAFollowerTakeOverAtOnce(t *testing.T) {
	cs := newClientset(t)
	a, b := newElector(t, cs.CoordinationV1(), "kaas-0"), newElector(t, cs.CoordinationV1(), "kaas-1")
	tick(t, a, t0)
	tick(t, b, at(100))
	if err := a.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l := getLease(t, cs); holder(l) != "" || transitions(l) != 1 {
		t.Fatalf("after resign: holder %q transitions %d", holder(l), transitions(l))
	}
	if el := tick(t, b, at(200)); !el.Leader || el.Epoch != 2 {
		t.Fatalf("b = %+v, want leader at epoch 2 right after the resignation", el)
	}
	if el := tick(t, a, at(300)); el.Leader || el.Holder != "kaas-1" || el.Epoch != 2 {
		t.Fatalf("resigned a = %+v", el)
	}
	if err := a.Resign(context.Background()); err != nil { // not leading: nothing to do
		t.Fatal(err)
	}
	if l := getLease(t, cs); holder(l) != "kaas-1" {
		t.Fatalf("a follower's Resign changed the holder to %q", holder(l))
	}
}

func TestLeaderStepsDownOnHigherTransitions(t *testing.T) {
	cs := newClientset(t)
	a := newElector(t, cs.CoordinationV1(), "kaas-0")
	tick(t, a, t0)
	// Another holder took the lease (say, after a partition a's clock did
	// not notice) and moved the epoch on.
	l := getLease(t, cs)
	other, five := "kaas-2", int32(5)
	l.Spec.HolderIdentity, l.Spec.LeaseTransitions = &other, &five
	if _, err := cs.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	el := tick(t, a, at(1000))
	if el.Leader || el.Epoch != 5 || el.Holder != "kaas-2" {
		t.Fatalf("a = %+v, want follower of kaas-2 at epoch 5", el)
	}
}

func TestLeaderKeepsRoleWhenOnlyMetadataChanged(t *testing.T) {
	cs := newClientset(t)
	a := newElector(t, cs.CoordinationV1(), "kaas-0")
	tick(t, a, t0)
	l := getLease(t, cs)
	l.Labels = map[string]string{"team": "data"} // kubectl label: a new resourceVersion
	if _, err := cs.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if el := tick(t, a, at(1000)); !el.Leader || el.Epoch != 1 { // conflict, re-read, still ours
		t.Fatalf("a = %+v", el)
	}
	if el := tick(t, a, at(1200)); !el.Leader || el.Epoch != 1 {
		t.Fatalf("a = %+v", el)
	}
	if l := getLease(t, cs); !l.Spec.RenewTime.Time.Equal(at(1200)) {
		t.Fatalf("renewTime = %v, want the 1200ms renewal", l.Spec.RenewTime)
	}
}

func TestLeaderStepsDownWhenAPIServerUnreachable(t *testing.T) {
	cs := newClientset(t)
	var (
		mu   sync.Mutex
		down bool // guarded by mu
	)
	cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return true, nil, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
		}
		return false, nil, nil
	})
	a := newElector(t, cs.CoordinationV1(), "kaas-0")
	tick(t, a, t0)
	mu.Lock()
	down = true
	mu.Unlock()
	steppedDown := -1
	for ms := 200; ms <= 3000; ms += 200 {
		el, err := a.Tick(context.Background(), at(ms))
		if ms >= 1000 && err == nil && el.Leader {
			// a renewal was due and failed, yet no error: wrong
			t.Fatalf("tick at %dms: no error while the API server is down", ms)
		}
		if !el.Leader {
			steppedDown = ms
			break
		}
	}
	if steppedDown < 0 || steppedDown >= 3000 {
		t.Fatalf("stepped down at %dms, want before the TTL (3000ms) ends", steppedDown)
	}
	// Back again: nobody took the lease, so this broker takes it back with
	// a new epoch (its earlier term may have left writes behind).
	mu.Lock()
	down = false
	mu.Unlock()
	if el := tick(t, a, at(3200)); !el.Leader || el.Epoch != 2 {
		t.Fatalf("after recovery: %+v, want leader at epoch 2", el)
	}
}

func TestRestartedBrokerTakesBackItsOwnLease(t *testing.T) {
	cs := newClientset(t)
	old := newElector(t, cs.CoordinationV1(), "kaas-0")
	tick(t, old, t0) // then kill -9: the pod comes back with the same name
	restarted := newElector(t, cs.CoordinationV1(), "kaas-0")
	if el := tick(t, restarted, at(500)); !el.Leader || el.Epoch != 2 {
		t.Fatalf("restarted = %+v, want leader at epoch 2 without waiting for the TTL", el)
	}
}

func TestEpochFloorFromTheVolume(t *testing.T) {
	cs := newClientset(t)
	e, err := New(Options{Leases: cs.CoordinationV1(), Namespace: ns, Name: name, Identity: "kaas-0", TTL: ttl,
		EpochFloor: func() int64 { return 12 }})
	if err != nil {
		t.Fatal(err)
	}
	if el := tick(t, e, t0); !el.Leader || el.Epoch != 13 {
		t.Fatalf("el = %+v, want epoch 13 above assignment.json's 12", el)
	}
	if l := getLease(t, cs); transitions(l) != 13 {
		t.Fatalf("leaseTransitions = %d", transitions(l))
	}
}

func TestLeaseDeletedUnderTheLeader(t *testing.T) {
	cs := newClientset(t)
	a := newElector(t, cs.CoordinationV1(), "kaas-0")
	tick(t, a, t0)
	if err := cs.CoordinationV1().Leases(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if el := tick(t, a, at(1000)); el.Leader {
		t.Fatalf("still leader after the lease was deleted: %+v", el)
	}
	if el := tick(t, a, at(1400)); !el.Leader || el.Epoch != 2 {
		t.Fatalf("recreated: %+v, want epoch 2 (never back to 1)", el)
	}
}

// barrier holds every caller until n have arrived, once.
type barrier struct {
	mu   sync.Mutex
	n    int
	open chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, open: make(chan struct{})} }

func (b *barrier) arrive() {
	b.mu.Lock()
	b.n--
	if b.n == 0 {
		close(b.open)
	}
	b.mu.Unlock()
	<-b.open
}

// race makes n fresh electors (kaas-1..n), runs setup on each, then lets
// them Tick at once with every Get held until all have read the Lease, so
// that they all write against the same resourceVersion.
func race(t *testing.T, cs *fake.Clientset, n int, setup func(*Elector), now time.Time) []cluster.Election {
	t.Helper()
	gate := &switchable{}
	es := make([]*Elector, n)
	for i := range n {
		es[i] = newElector(t, gate.wrap(cs.CoordinationV1()), "kaas-"+strconv.Itoa(i+1))
		if setup != nil {
			setup(es[i])
		}
	}
	gate.arm(newBarrier(n))
	els := make([]cluster.Election, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { els[i], errs[i] = es[i].Tick(context.Background(), now) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("racer %d: %v", i, err)
		}
	}
	return els
}

func winners(els []cluster.Election) (n int, epoch int64) {
	for _, el := range els {
		if el.Leader {
			n++
			epoch = el.Epoch
		}
	}
	return n, epoch
}

func TestRacingElectorsCannotBothWin(t *testing.T) {
	for round := range 20 {
		t.Run("released/"+strconv.Itoa(round), func(t *testing.T) {
			cs := newClientset(t)
			a := newElector(t, cs.CoordinationV1(), "kaas-0")
			tick(t, a, t0)
			if err := a.Resign(context.Background()); err != nil {
				t.Fatal(err)
			}
			els := race(t, cs, 3, nil, at(100))
			if n, epoch := winners(els); n != 1 || epoch != 2 {
				t.Fatalf("%d winners at epoch %d, want exactly one at 2: %+v", n, epoch, els)
			}
			if l := getLease(t, cs); transitions(l) != 2 {
				t.Fatalf("leaseTransitions = %d, want 2", transitions(l))
			}
		})
		t.Run("expired/"+strconv.Itoa(round), func(t *testing.T) {
			cs := newClientset(t)
			a := newElector(t, cs.CoordinationV1(), "kaas-0")
			tick(t, a, t0)
			// Each racer saw the lease at t0, then kaas-0 died; all race at t0+TTL.
			els := race(t, cs, 2, func(e *Elector) { tick(t, e, t0) }, t0.Add(ttl))
			if n, epoch := winners(els); n != 1 || epoch != 2 {
				t.Fatalf("%d winners at epoch %d, want exactly one at 2: %+v", n, epoch, els)
			}
		})
	}
}

// switchable gates Gets only once armed.
type switchable struct {
	mu sync.Mutex
	b  *barrier
}

func (s *switchable) arm(b *barrier) { s.mu.Lock(); s.b = b; s.mu.Unlock() }

func (s *switchable) wrap(g coordclient.LeasesGetter) coordclient.LeasesGetter {
	return switchGetter{g, s}
}

type switchGetter struct {
	coordclient.LeasesGetter
	s *switchable
}

func (g switchGetter) Leases(namespace string) coordclient.LeaseInterface {
	return switchLease{g.LeasesGetter.Leases(namespace), g.s}
}

type switchLease struct {
	coordclient.LeaseInterface
	s *switchable
}

func (g switchLease) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordv1.Lease, error) {
	l, err := g.LeaseInterface.Get(ctx, name, opts)
	g.s.mu.Lock()
	b := g.s.b
	g.s.mu.Unlock()
	if b != nil {
		b.arrive()
	}
	return l, err
}

// TestStockFakeLetsTwoWin shows why newClientset adds its reactor: the stock
// fake applies every Update, so a race "won" on it proves nothing.
func TestStockFakeLetsTwoWin(t *testing.T) {
	cs := fake.NewSimpleClientset()
	a := newElector(t, cs.CoordinationV1(), "kaas-0")
	tick(t, a, t0)
	if err := a.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := winners(race(t, cs, 2, nil, at(100))); n != 2 {
		t.Fatalf("%d winners on the stock fake; if it now enforces resourceVersion, the reactor can go", n)
	}
}
