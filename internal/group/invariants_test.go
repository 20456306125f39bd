package group

import (
	"fmt"
	"slices"
	"time"
)

// checkInvariants verifies the group's internal consistency after an input.
func (g *Group) checkInvariants() error {
	if g.out.Joins != nil || g.dirty != nil {
		return fmt.Errorf("per-input scratch left behind")
	}
	if len(g.order) != len(g.members) {
		return fmt.Errorf("order has %d ids, members %d", len(g.order), len(g.members))
	}
	for _, id := range g.order {
		if g.members[id] == nil {
			return fmt.Errorf("order lists unknown member %s", id)
		}
	}
	switch g.state {
	case Empty, Dead:
		if len(g.members) != 0 {
			return fmt.Errorf("%s group has %d members", g.state, len(g.members))
		}
	case CompletingRebalance, Stable:
		if len(g.members) == 0 {
			return fmt.Errorf("%s group has no members", g.state)
		}
		if !g.hasProtocol {
			return fmt.Errorf("%s group has no protocol", g.state)
		}
	}
	if (g.leader == "") != (len(g.members) == 0) {
		return fmt.Errorf("leader %q with %d members", g.leader, len(g.members))
	}
	if g.leader != "" && g.members[g.leader] == nil {
		return fmt.Errorf("leader %s is not a member", g.leader)
	}
	nStatic := 0
	for id, m := range g.members {
		if m.id != id {
			return fmt.Errorf("member %s stored under %s", m.id, id)
		}
		if g.pending[id] {
			return fmt.Errorf("%s is both member and pending", id)
		}
		if m.static() {
			nStatic++
			if g.static[m.instanceID] != id {
				return fmt.Errorf("instance %s maps to %s, not %s", m.instanceID, g.static[m.instanceID], id)
			}
		}
		if m.awaitingJoin() && g.state != PreparingRebalance {
			return fmt.Errorf("member %s has a parked JoinGroup in %s", id, g.state)
		}
		if m.awaitingSync() && g.state != CompletingRebalance {
			return fmt.Errorf("member %s has a parked SyncGroup in %s", id, g.state)
		}
		if m.isNew && !m.awaitingJoin() {
			return fmt.Errorf("new member %s is not joining", id)
		}
		if _, ok := g.timers[TimerKey{Kind: TimerSession, Member: id}]; !ok && !m.awaitingJoin() && !m.awaitingSync() {
			return fmt.Errorf("member %s has no session timer", id)
		}
	}
	if nStatic != len(g.static) {
		return fmt.Errorf("static map has %d entries, %d static members", len(g.static), nStatic)
	}
	for id := range g.pendingSync {
		if g.members[id] == nil {
			return fmt.Errorf("pending sync %s is not a member", id)
		}
		if g.state != CompletingRebalance && g.state != Stable {
			return fmt.Errorf("pending sync in %s", g.state)
		}
	}
	if g.completeNow {
		return fmt.Errorf("completeNow left set")
	}
	for k := range g.timers {
		ok := true
		switch k.Kind {
		case TimerSession:
			ok = g.members[k.Member] != nil
		case TimerPendingMember:
			ok = g.pending[k.Member]
		case TimerRebalanceDelay:
			ok = g.state == PreparingRebalance && g.initialDelay
		case TimerRebalanceTimeout:
			ok = g.state == PreparingRebalance && !g.initialDelay
		case TimerSyncTimeout:
			ok = len(g.pendingSync) > 0
		}
		if !ok {
			return fmt.Errorf("timer %s armed in %s", k, g.state)
		}
	}
	for id := range g.pending {
		if _, ok := g.timers[TimerKey{Kind: TimerPendingMember, Member: id}]; !ok {
			return fmt.Errorf("pending %s has no timer", id)
		}
	}
	if g.state == PreparingRebalance {
		_, d := g.timers[TimerKey{Kind: TimerRebalanceDelay}]
		_, r := g.timers[TimerKey{Kind: TimerRebalanceTimeout}]
		if d == r {
			return fmt.Errorf("PreparingRebalance with delay armed=%v and rebalance timeout armed=%v", d, r)
		}
	}
	if len(g.pendingSync) > 0 {
		if _, ok := g.timers[TimerKey{Kind: TimerSyncTimeout}]; !ok {
			return fmt.Errorf("pending syncs without a sync timer")
		}
	}
	return nil
}

// fakeShell plays the shell: it applies Outputs, holds armed timers and
// tracks parked requests to prove each is answered exactly once.
type fakeShell struct {
	g      *Group
	now    time.Time
	timers map[TimerKey]TimerArm
	open   map[any]string // outstanding request refs → kind
	states []State        // every state entered, in order
	gens   []int32
	errs   []error
}

func newFakeShell(g *Group, now time.Time) *fakeShell {
	return &fakeShell{g: g, now: now, timers: map[TimerKey]TimerArm{}, open: map[any]string{}, states: []State{g.State()}}
}

func (s *fakeShell) errorf(format string, args ...any) {
	s.errs = append(s.errs, fmt.Errorf(format, args...))
}

// request records that a request with ref is in flight.
func (s *fakeShell) request(kind string, ref any) {
	if _, dup := s.open[ref]; dup {
		s.errorf("ref %v reused while outstanding", ref)
	}
	s.open[ref] = kind
}

func (s *fakeShell) answered(kind string, ref any) {
	k, ok := s.open[ref]
	if !ok {
		s.errorf("%s answer for %v which is not outstanding (answered twice?)", kind, ref)
		return
	}
	if k != kind {
		s.errorf("%s answer for a %s request %v", kind, k, ref)
	}
	delete(s.open, ref)
}

// apply performs out and checks the invariants.
func (s *fakeShell) apply(out Output) {
	for _, r := range out.Joins {
		s.answered("join", r.Ref)
	}
	for _, r := range out.Syncs {
		s.answered("sync", r.Ref)
	}
	for _, r := range out.Heartbeats {
		s.answered("heartbeat", r.Ref)
	}
	for _, r := range out.Leaves {
		s.answered("leave", r.Ref)
	}
	seen := map[TimerKey]bool{}
	for _, k := range out.Cancel {
		if seen[k] {
			s.errorf("timer %s twice in one output", k)
		}
		seen[k] = true
		if _, ok := s.timers[k]; !ok {
			s.errorf("cancel of unarmed timer %s", k)
		}
		delete(s.timers, k)
	}
	for _, a := range out.Arm {
		if seen[a.Key] {
			s.errorf("timer %s twice in one output", a.Key)
		}
		seen[a.Key] = true
		if a.At.Before(s.now) {
			s.errorf("timer %s armed in the past", a.Key)
		}
		s.timers[a.Key] = a
	}
	for _, e := range out.Events {
		switch e.Kind {
		case EventBug:
			s.errorf("bug event: %s", e.Reason)
		case EventStateChange:
			last := s.states[len(s.states)-1]
			if e.From != last {
				s.errorf("state change from %s, but the group was %s", e.From, last)
			}
			if !CanTransition(e.From, e.To) {
				s.errorf("illegal transition %s -> %s", e.From, e.To)
			}
			s.states = append(s.states, e.To)
		}
	}
	if g := s.g.Generation(); len(s.gens) > 0 && g < s.gens[len(s.gens)-1] {
		s.errorf("generation went back from %d to %d", s.gens[len(s.gens)-1], g)
	}
	s.gens = append(s.gens, s.g.Generation())
	if st := s.states[len(s.states)-1]; st != s.g.State() {
		s.errorf("events end in %s, group is %s", st, s.g.State())
	}
	armed := s.g.Armed()
	if len(armed) != len(s.timers) {
		s.errorf("shell holds %d timers, group thinks %d", len(s.timers), len(armed))
	}
	for _, a := range armed {
		if s.timers[a.Key] != a {
			s.errorf("shell timer %s = %+v, group %+v", a.Key, s.timers[a.Key], a)
		}
	}
	if err := s.g.checkInvariants(); err != nil {
		s.errorf("invariant: %v", err)
	}
}

// nextDue returns the earliest armed timer due by until.
func (s *fakeShell) nextDue(until time.Time) (TimerArm, bool) {
	var best TimerArm
	found := false
	for _, a := range s.timers {
		if a.At.After(until) {
			continue
		}
		if !found || a.At.Before(best.At) || (a.At.Equal(best.At) && a.Seq < best.Seq) {
			best, found = a, true
		}
	}
	return best, found
}

// advance moves the clock by d, firing due timers in deadline order; each
// firing's outputs go to visit before being applied.
func (s *fakeShell) advance(d time.Duration, visit func(TimerArm, Output)) {
	until := s.now.Add(d)
	for {
		a, ok := s.nextDue(until)
		if !ok {
			break
		}
		if a.At.After(s.now) { // a timer overdue (time ran on without firing) fires now
			s.now = a.At
		}
		delete(s.timers, a.Key)
		out := s.g.Timer(s.now, a.Key, a.Seq)
		if visit != nil {
			visit(a, out)
		}
		s.apply(out)
	}
	s.now = until
}

// fire fires the slot key now, whatever its deadline, and returns the
// Output (not yet applied). It reports false if the shell holds no timer
// in that slot.
func (s *fakeShell) fire(key TimerKey) (Output, bool) {
	a, ok := s.timers[key]
	if !ok {
		return Output{}, false
	}
	delete(s.timers, key)
	return s.g.Timer(s.now, key, a.Seq), true
}

func sortedRefs(m map[any]string) []string {
	var out []string
	for r, k := range m {
		out = append(out, fmt.Sprintf("%s %v", k, r))
	}
	slices.Sort(out)
	return out
}
