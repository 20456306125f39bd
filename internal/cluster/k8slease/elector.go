// Package k8slease is kaas's Kubernetes controller-election backend: a
// cluster.Elector over one coordination.k8s.io/v1 Lease.
//
// It owns nothing but its view of that Lease. It is the only kaas package
// that imports client-go, and only cmd/kaas imports it, so the rest of kaas
// (and its tests) never link Kubernetes code. It must not import the broker,
// node or storage packages.
package k8slease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/kaas-dev/kaas/internal/cluster"
)

// Options configures an Elector.
type Options struct {
	// Leases reaches the API server, e.g. clientset.CoordinationV1().
	Leases    coordclient.LeasesGetter
	Namespace string
	Name      string // the Lease's name, e.g. "kaas-controller"
	// Identity is written to spec.holderIdentity: the broker id ("kaas-0").
	Identity string
	// TTL is how long a holder that stops renewing keeps the role: the
	// runtime's DeadAfter. It is written, rounded up to whole seconds, to
	// spec.leaseDurationSeconds.
	TTL time.Duration
	// RenewEvery is how often the holder writes spec.renewTime; default TTL/3.
	// Between renewals a leading Tick does no I/O.
	RenewEvery time.Duration
	// Timeout bounds the API calls of one Tick or Resign; default TTL/3.
	Timeout time.Duration
	// EpochFloor, if set, returns an epoch that a new holder must exceed
	// (the controllerEpoch of assignment.json), so that a Lease deleted and
	// created afresh cannot restart epochs below what brokers already know.
	EpochFloor func() int64
	Logger     *slog.Logger
}

// Elector elects the controller through one Lease.
//
// The Lease is the record: spec.holderIdentity is the controller's broker
// id, spec.leaseTransitions is the controller epoch, spec.renewTime is
// rewritten by the holder every RenewEvery, and spec.leaseDurationSeconds is
// the TTL. Every write is an Update carrying the resourceVersion last read,
// so the API server applies it only if nobody wrote in between: of several
// brokers racing for one transition exactly one Update succeeds, the others
// get a Conflict and stay followers.
//
// A follower takes the role, with leaseTransitions+1, when the Lease does
// not exist, when holderIdentity is empty (the holder resigned), when it
// names this broker (an earlier incarnation of it), or when the Lease has
// not changed for leaseDurationSeconds by the follower's own clock: it
// remembers when it last saw resourceVersion, holder, transitions or
// renewTime change, and never compares renewTime with its clock.
//
// The holder counts its TTL from the moment it sent its last successful
// renewal, which precedes the moment any follower saw it, so its claim ends
// before any follower's expiry can start. It steps down when a renewal meets
// a Conflict and the Lease shows another holder or a higher epoch, when the
// Lease was deleted, and when renewals keep failing so long that the next
// one could not finish within the TTL (a frozen holder, an unreachable API
// server).
type Elector struct {
	o          Options
	leases     coordclient.LeaseInterface
	log        *slog.Logger
	ttl        time.Duration
	ttlSeconds int32
	renewEvery time.Duration
	timeout    time.Duration

	// Owned by the runtime loop: Tick and Resign are never called concurrently.
	lease     *coordv1.Lease // the last version read or written; nil when none
	seen      observation
	seenAt    time.Time
	leading   bool
	epoch     int64 // my epoch while leading
	lastRenew time.Time
	known     int64
}

// observation is what changes when the holder is alive.
type observation struct {
	rv          string
	holder      string
	transitions int32
	renewNanos  int64
}

// New returns an Elector; no API call is made until the first Tick.
func New(o Options) (*Elector, error) {
	if o.Leases == nil || o.Namespace == "" || o.Name == "" || o.Identity == "" {
		return nil, errors.New("k8slease: Leases, Namespace, Name and Identity are required")
	}
	if o.TTL <= 0 {
		return nil, errors.New("k8slease: TTL must be positive")
	}
	e := &Elector{
		o: o, leases: o.Leases.Leases(o.Namespace), log: o.Logger,
		ttl: o.TTL, ttlSeconds: int32(math.Ceil(o.TTL.Seconds())),
		renewEvery: o.RenewEvery, timeout: o.Timeout,
	}
	if e.renewEvery <= 0 {
		e.renewEvery = o.TTL / 3
	}
	if e.timeout <= 0 {
		e.timeout = o.TTL / 3
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.log = e.log.With("lease", o.Namespace+"/"+o.Name)
	return e, nil
}

var _ cluster.Elector = (*Elector)(nil)

// Tick implements cluster.Elector.
func (e *Elector) Tick(ctx context.Context, now time.Time) (cluster.Election, error) {
	if e.leading {
		return e.renew(ctx, now)
	}
	return e.campaign(ctx, now)
}

// renew keeps the role: one conditional Update every RenewEvery.
func (e *Elector) renew(ctx context.Context, now time.Time) (cluster.Election, error) {
	if now.Sub(e.lastRenew) < e.renewEvery {
		return e.status(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	l := e.lease.DeepCopy()
	l.Spec.RenewTime = micro(now)
	l.Spec.LeaseDurationSeconds = &e.ttlSeconds
	got, err := e.leases.Update(ctx, l, metav1.UpdateOptions{})
	switch {
	case err == nil:
		e.observe(got, now)
		e.lastRenew = now
		return e.status(), nil
	case apierrors.IsNotFound(err):
		e.lease = nil
		e.stepDown("the lease was deleted")
		return e.status(), nil
	case apierrors.IsConflict(err):
		// Someone wrote the Lease since we did: read it.
		cur, gerr := e.leases.Get(ctx, e.o.Name, metav1.GetOptions{})
		if gerr == nil {
			e.observe(cur, now)
			if h := holder(cur); h != e.o.Identity || int64(transitions(cur)) != e.epoch {
				e.stepDown(fmt.Sprintf("the lease is now held by %q at epoch %d", h, transitions(cur)))
				return e.status(), nil
			}
			// Still ours (an edit of its labels, or our own write whose
			// answer was lost): renew on the new version next tick.
			err = nil
		} else {
			err = gerr
		}
	}
	// Not renewed. A later renewal may still succeed, but if it could not
	// finish within the TTL a follower may be taking over: let go now.
	if now.Add(e.timeout).Sub(e.lastRenew) >= e.ttl {
		e.stepDown("lease renewal failing for as long as the lease lasts")
	}
	if err != nil {
		return e.status(), fmt.Errorf("k8slease: renew %s/%s: %w", e.o.Namespace, e.o.Name, err)
	}
	return e.status(), nil
}

// campaign reads the Lease and takes it when it is free or expired.
func (e *Elector) campaign(ctx context.Context, now time.Time) (cluster.Election, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	cur, err := e.leases.Get(ctx, e.o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		e.lease, e.seen, e.seenAt = nil, observation{}, time.Time{}
		return e.create(ctx, now)
	}
	if err != nil {
		return e.status(), fmt.Errorf("k8slease: get %s/%s: %w", e.o.Namespace, e.o.Name, err)
	}
	e.observe(cur, now)
	reason := ""
	switch h := holder(cur); {
	case h == "":
		reason = "lease released"
	case h == e.o.Identity:
		reason = "lease held by this broker's earlier incarnation"
	case now.Sub(e.seenAt) >= leaseDuration(cur, e.ttl):
		reason = "lease expired"
	}
	if reason == "" {
		return e.status(), nil
	}
	next, err := e.nextEpoch()
	if err != nil {
		return e.status(), err
	}
	l := cur.DeepCopy()
	l.Spec.HolderIdentity = &e.o.Identity
	l.Spec.LeaseTransitions = &next
	l.Spec.AcquireTime, l.Spec.RenewTime = micro(now), micro(now)
	l.Spec.LeaseDurationSeconds = &e.ttlSeconds
	got, err := e.leases.Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return e.status(), nil // another broker won this transition; look again next tick
	}
	if err != nil {
		return e.status(), fmt.Errorf("k8slease: take %s/%s at epoch %d: %w", e.o.Namespace, e.o.Name, next, err)
	}
	e.elected(got, now, next, holder(cur), reason)
	return e.status(), nil
}

// create makes the Lease, held by this broker, when none exists.
func (e *Elector) create(ctx context.Context, now time.Time) (cluster.Election, error) {
	next, err := e.nextEpoch()
	if err != nil {
		return e.status(), err
	}
	l := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: e.o.Name, Namespace: e.o.Namespace},
		Spec: coordv1.LeaseSpec{
			HolderIdentity: &e.o.Identity, LeaseDurationSeconds: &e.ttlSeconds,
			AcquireTime: micro(now), RenewTime: micro(now), LeaseTransitions: &next,
		},
	}
	got, err := e.leases.Create(ctx, l, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return e.status(), nil // another broker created it first
	}
	if err != nil {
		return e.status(), fmt.Errorf("k8slease: create %s/%s: %w", e.o.Namespace, e.o.Name, err)
	}
	e.elected(got, now, next, "", "no lease yet")
	return e.status(), nil
}

func (e *Elector) nextEpoch() (int32, error) {
	base := e.known
	if e.o.EpochFloor != nil {
		base = max(base, e.o.EpochFloor())
	}
	if base >= math.MaxInt32 {
		return 0, fmt.Errorf("k8slease: epoch %d cannot grow in leaseTransitions (int32)", base)
	}
	return int32(base + 1), nil
}

func (e *Elector) elected(l *coordv1.Lease, now time.Time, epoch int32, previous, why string) {
	e.observe(l, now)
	e.leading, e.epoch, e.lastRenew = true, int64(epoch), now
	e.known = max(e.known, int64(epoch))
	e.log.Info("elected controller", "epoch", epoch, "previous", previous, "why", why)
}

// observe records l as the latest version, restarting the expiry clock when
// anything a live holder changes has changed.
func (e *Elector) observe(l *coordv1.Lease, now time.Time) {
	e.lease = l
	o := observation{rv: l.ResourceVersion, holder: holder(l), transitions: transitions(l)}
	if l.Spec.RenewTime != nil {
		o.renewNanos = l.Spec.RenewTime.UnixNano()
	}
	if o != e.seen {
		e.seen, e.seenAt = o, now
	}
	e.known = max(e.known, int64(o.transitions))
}

func (e *Elector) status() cluster.Election {
	if e.leading {
		return cluster.Election{Holder: e.o.Identity, Epoch: e.epoch, Leader: true}
	}
	return cluster.Election{Holder: e.seen.holder, Epoch: e.known}
}

func (e *Elector) stepDown(why string) {
	e.log.Warn("stepping down as controller", "epoch", e.epoch, "seen_epoch", e.known, "why", why)
	e.leading = false
}

// Resign implements cluster.Elector: it empties holderIdentity so that a
// follower takes over on its next tick instead of after the TTL.
func (e *Elector) Resign(ctx context.Context) error {
	if !e.leading {
		return nil
	}
	e.leading = false
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	l := e.lease.DeepCopy()
	l.Spec.HolderIdentity = nil
	_, err := e.leases.Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // already replaced
	}
	if err != nil {
		return fmt.Errorf("k8slease: resign %s/%s: %w", e.o.Namespace, e.o.Name, err)
	}
	e.log.Info("resigned as controller", "epoch", e.epoch)
	return nil
}

func holder(l *coordv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func transitions(l *coordv1.Lease) int32 {
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// leaseDuration is the holder's declared TTL, or ours when it declares none.
func leaseDuration(l *coordv1.Lease, def time.Duration) time.Duration {
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		return time.Duration(*d) * time.Second
	}
	return def
}

func micro(t time.Time) *metav1.MicroTime {
	m := metav1.NewMicroTime(t)
	return &m
}
