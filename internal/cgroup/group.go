package cgroup

import (
	"hash/fnv"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// MemberState is where a member is in its reconciliation (Kafka's names).
type MemberState int8

const (
	// Stable: the member has its target assignment at the target epoch.
	Stable MemberState = iota
	// UnrevokedPartitions: the member must give up partitions before it
	// may move to the next epoch; it keeps its epoch until it does.
	UnrevokedPartitions
	// UnreleasedPartitions: the member is at the target epoch but some of
	// its target partitions are still owned by another member.
	UnreleasedPartitions
)

func (s MemberState) String() string {
	switch s {
	case Stable:
		return "STABLE"
	case UnrevokedPartitions:
		return "UNREVOKED_PARTITIONS"
	case UnreleasedPartitions:
		return "UNRELEASED_PARTITIONS"
	}
	return "UNKNOWN"
}

// member is one member of the group.
type member struct {
	id, instanceID, rackID string
	clientID, clientHost   string
	epoch, prevEpoch       int32
	state                  MemberState
	rebalanceTimeout       time.Duration
	names                  []string       // subscribed topic names (sorted)
	regex                  string         // subscribed regular expression, "" if none
	re                     *regexp.Regexp // regex compiled to match whole names
	assignor               string         // the member's ServerAssignor, "" for the default
	// assigned maps each partition the member owns to the epoch at which it
	// was assigned to it (KIP-1251).
	assigned map[TP]int32
	// revoking are partitions the member must give up before moving on.
	revoking map[TP]struct{}

	sessionDeadline  time.Time
	revokingDeadline time.Time // zero unless the member is UnrevokedPartitions

	// classic is set for a member that speaks the classic protocol
	// (JoinGroup, SyncGroup, Heartbeat) in this consumer group.
	classic *classicMeta
}

// deadlines are the member's session and revocation deadlines, and for a
// classic member the JoinGroup and SyncGroup it owes (zero: none). An
// array, not a slice: NextDeadline runs over every member.
func (m *member) deadlines() [3]time.Time {
	if m.classic != nil {
		return [3]time.Time{m.sessionDeadline, m.classic.joinDeadline, m.classic.syncDeadline}
	}
	return [3]time.Time{m.sessionDeadline, m.revokingDeadline}
}

func (m *member) static() bool { return m.instanceID != "" }

// Group is one KIP-848 consumer group. Create it with New; feed it one
// input at a time.
type Group struct {
	id   string
	cfg  Config // base with the group's own timeouts (SetTimeouts)
	base Config // the broker's settings

	epoch       int32 // group epoch: grows when membership, subscriptions or their topics change
	targetEpoch int32 // the epoch the target assignment was computed for
	target      map[string]map[TP]struct{}
	members     map[string]*member
	static      map[string]string // instance id → member id
	// metaHash is a hash of the subscribed topics (names, ids, partition
	// counts) the group epoch was last computed for.
	metaHash uint64
	// hashImage and hashEpoch are the image (its serial) and epoch
	// metaHash was last checked at (an image is immutable: the broker
	// makes a new one when a topic changes).
	hashImage uint64
	hashEpoch int32
	// soonest is the earliest deadline set since SoonestSet last ran (zero:
	// none), so that a shell whose timer is armed no later than it need
	// not scan every member (NextDeadline) after each heartbeat.
	soonest time.Time
	// enc keeps each member's encoding in the snapshot, encIDs the sorted
	// member ids (AppendSnapshot); invalidate drops them.
	enc    map[string]encodedMember
	encIDs []string
}

// NewGroupEpoch is the epoch of a group no member has joined yet: Kafka
// 4.4 starts a consumer group at 1, so its first member's join moves it to
// 2 (the reference cluster answers a first join with member epoch 2;
// docs/cgroup.md).
const NewGroupEpoch = 1

// New returns an empty group at NewGroupEpoch.
func New(id string, cfg Config) *Group {
	cfg = cfg.WithDefaults()
	return &Group{id: id, cfg: cfg, base: cfg, epoch: NewGroupEpoch, target: map[string]map[TP]struct{}{},
		members: map[string]*member{}, static: map[string]string{}}
}

// unjoined reports whether no member ever joined the group: its epoch
// never moved (a join, a leave or a subscription change moves it).
func (g *Group) unjoined() bool {
	return g.epoch == NewGroupEpoch && g.targetEpoch == 0 && len(g.members) == 0
}

// SetTimeouts applies the group's own consumer.session.timeout.ms and
// consumer.heartbeat.interval.ms (its GROUP configs); 0 keeps the broker's.
// As on Kafka, they take effect at each member's next heartbeat: the
// heartbeat interval it is told, the session deadline that heartbeat sets.
func (g *Group) SetTimeouts(session, heartbeat time.Duration) {
	g.cfg.SessionTimeout, g.cfg.HeartbeatInterval = g.base.SessionTimeout, g.base.HeartbeatInterval
	if session > 0 {
		g.cfg.SessionTimeout = session
	}
	if heartbeat > 0 {
		g.cfg.HeartbeatInterval = heartbeat
	}
}

// ID is the group id.
func (g *Group) ID() string { return g.id }

// Epoch is the group epoch.
func (g *Group) Epoch() int32 { return g.epoch }

// TargetEpoch is the epoch of the target assignment.
func (g *Group) TargetEpoch() int32 { return g.targetEpoch }

// Empty reports whether the group has no members.
func (g *Group) Empty() bool { return len(g.members) == 0 }

// Members is the number of members.
func (g *Group) Members() int { return len(g.members) }

// State is the group state as ListGroups and ConsumerGroupDescribe name it:
// Empty, Assigning (the target lags the group epoch), Reconciling (a member
// has not reached the target epoch) or Stable.
func (g *Group) State() string {
	switch {
	case len(g.members) == 0:
		return "Empty"
	case g.targetEpoch != g.epoch:
		return "Assigning"
	}
	for _, m := range g.members {
		if m.epoch != g.targetEpoch || m.state != Stable {
			return "Reconciling"
		}
	}
	return "Stable"
}

// Output is what an input asks of the shell.
type Output struct {
	// Persist: the durable state changed; write Snapshot before the
	// answer leaves.
	Persist bool
	// Events are log lines worth keeping (members joining, leaving,
	// fenced, epochs moving), in order.
	Events []Event
	// Downgrade: the last consumer-protocol member went and classic members
	// remain; the shell may make the group a classic one (ToClassic).
	Downgrade bool
}

// Event is one thing that happened, for the log.
type Event struct {
	What   string // "member joined", "member left", "member fenced", "session expired", "revocation timed out", "epoch bumped"
	Member string
	Epoch  int32
	Why    string
}

func (o *Output) event(what, member string, epoch int32, why string) {
	o.Events = append(o.Events, Event{What: what, Member: member, Epoch: epoch, Why: why})
}

// setDeadline sets one of a member's deadlines to t (every deadline set
// goes through it; clearing one needs not) and keeps soonest.
func (g *Group) setDeadline(d *time.Time, t time.Time) {
	*d = t
	if g.soonest.IsZero() || t.Before(g.soonest) {
		g.soonest = t
	}
}

// SoonestSet returns the earliest deadline set since the last call (zero
// when none) and forgets it. Deadlines only move by being set, so a timer
// armed for the NextDeadline of an earlier moment fires no later than
// every deadline when it is no later than SoonestSet: the shell re-arms it
// only when that is earlier, and scans again (NextDeadline) when it fires.
// A heartbeat, which moves its member's session deadline later, then costs
// no scan over the members.
func (g *Group) SoonestSet() time.Time {
	t := g.soonest
	g.soonest = time.Time{}
	return t
}

// NextDeadline is the earliest session or revocation deadline (zero when
// there is none): the shell arms one timer for it and calls Expire.
func (g *Group) NextDeadline() time.Time {
	var next time.Time
	for _, m := range g.members {
		for _, d := range m.deadlines() {
			if !d.IsZero() && (next.IsZero() || d.Before(next)) {
				next = d
			}
		}
	}
	return next
}

// Expire removes members whose session expired and fences those that did
// not give up their partitions within their rebalance timeout.
func (g *Group) Expire(now time.Time, im *Image) Output {
	g.invalidate()
	var out Output
	ids := g.memberIDs()
	for _, id := range ids {
		m := g.members[id]
		switch {
		case !m.sessionDeadline.IsZero() && !now.Before(m.sessionDeadline):
			g.remove(m, &out, "session expired", "no heartbeat within the session timeout")
		case !m.revokingDeadline.IsZero() && !now.Before(m.revokingDeadline):
			g.remove(m, &out, "revocation timed out", "partitions not revoked within the rebalance timeout")
		case m.classic != nil && !m.classic.joinDeadline.IsZero() && !now.Before(m.classic.joinDeadline):
			g.remove(m, &out, "member fenced", "the classic member did not rejoin within the rebalance timeout")
		case m.classic != nil && !m.classic.syncDeadline.IsZero() && !now.Before(m.classic.syncDeadline):
			g.remove(m, &out, "member fenced", "the classic member did not sync within the rebalance timeout")
		}
	}
	if out.Persist {
		g.maybeAssign(now, "", im, &out)
	}
	return out
}

func (g *Group) memberIDs() []string {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// remove drops a member, freeing its partitions, and bumps the group epoch.
func (g *Group) remove(m *member, out *Output, what, why string) {
	delete(g.members, m.id)
	if m.static() && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	delete(g.target, m.id)
	g.bump(out, why)
	out.event(what, m.id, m.epoch, why)
	out.Persist = true
	if m.classic == nil {
		g.checkDowngrade(out)
	}
}

func (g *Group) bump(out *Output, why string) {
	g.epoch++
	out.Persist = true
	out.event("epoch bumped", "", g.epoch, why)
}

// subscribed returns the topic names member m subscribes to in im.
// subscribed returns the topic names member m subscribes to in im: its
// names and, when it has a regex, every topic whose whole name the regex
// matches (as Java's Matcher.matches does), internal topics aside.
func subscribed(m *member, im *Image) []string {
	if m.re == nil || im == nil {
		return m.names
	}
	out := slices.Clone(m.names)
	for _, n := range im.names {
		if !isInternal(n) && m.re.MatchString(n) && !slices.Contains(m.names, n) {
			out = append(out, n)
		}
	}
	return out
}

// compileWhole compiles a subscription regex to match whole topic names.
func compileWhole(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	return regexp.Compile("^(?:" + expr + ")$")
}

// isInternal: topics no subscription ever matches by regex.
func isInternal(name string) bool {
	return name == "__consumer_offsets" || name == "__transaction_state" || name == "__share_group_state"
}

// subscriptionHash hashes the subscribed topics as im shows them: a topic
// created, deleted or grown changes it.
func (g *Group) subscriptionHash(im *Image) uint64 {
	names := g.SubscribedTopics(im)
	sort.Strings(names)
	h := fnv.New64a()
	for _, n := range names {
		t, ok := im.ByName(n)
		h.Write([]byte(n))
		if ok {
			h.Write(t.ID[:])
			h.Write([]byte{byte(t.Partitions >> 24), byte(t.Partitions >> 16), byte(t.Partitions >> 8), byte(t.Partitions)})
		}
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// maybeAssign bumps the group epoch when the subscribed topics changed and
// computes a new target assignment when the group epoch moved past it.
// heard is the member whose request is being handled ("" for none).
func (g *Group) maybeAssign(now time.Time, heard string, im *Image, out *Output) {
	// Every change of a member or its subscription bumps the epoch, so the
	// hash can only differ from the last one computed when the image or
	// the epoch did.
	if im == nil || im.serial != g.hashImage || g.epoch != g.hashEpoch {
		if h := g.subscriptionHash(im); h != g.metaHash {
			g.metaHash = h
			if len(g.members) > 0 && g.targetEpoch == g.epoch {
				g.bump(out, "subscribed topics changed")
			}
		}
		if im != nil {
			g.hashImage, g.hashEpoch = im.serial, g.epoch
		}
	}
	if g.targetEpoch == g.epoch {
		return
	}
	subs := map[string][]string{}
	for id, m := range g.members {
		subs[id] = subscribed(m, im)
	}
	prev := map[string]map[TP]struct{}{}
	for id, t := range g.target {
		if _, ok := g.members[id]; ok {
			prev[id] = t
		}
	}
	g.target = assign(g.assignorName(), subs, prev, g.givers(now, heard), im)
	g.targetEpoch = g.epoch
	out.Persist = true
}

// givers orders the members for the assignor to take partitions from
// first (assignUniform): heard, the member whose request is being handled,
// which learns what it must give up in this very answer (a classic member
// in its JoinGroup: in the SyncGroup of the round it is in); then the members
// heard from within two heartbeat intervals, the one heard from longest
// ago first, since its next heartbeat is due soonest. A member not heard
// from for longer may be gone, one that left for now (a static member)
// will not heartbeat before it is back, and a classic member gives up
// partitions only through a rejoin and a sync: they are not listed, so
// partitions are taken from them last.
func (g *Group) givers(now time.Time, heard string) []string {
	type seen struct {
		id string
		at time.Time
	}
	var recent []seen
	for id, m := range g.members {
		if id == heard || m.classic != nil || m.epoch == StaticLeaveEpoch || m.sessionDeadline.IsZero() {
			continue
		}
		at := m.sessionDeadline.Add(-g.cfg.SessionTimeout)
		if now.Sub(at) <= 2*g.cfg.HeartbeatInterval {
			recent = append(recent, seen{id, at})
		}
	}
	slices.SortFunc(recent, func(a, b seen) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	out := make([]string, 0, len(recent)+1)
	if _, ok := g.members[heard]; ok {
		out = append(out, heard)
	}
	for _, r := range recent {
		out = append(out, r.id)
	}
	return out
}

// assignorName is the assignor the group uses: the one most members ask
// for, else the configured default.
func (g *Group) assignorName() string {
	votes := map[string]int{}
	for _, m := range g.members {
		if m.assignor != "" {
			votes[m.assignor]++
		}
	}
	best, n := g.cfg.Assignors[0], 0
	for _, a := range g.cfg.Assignors {
		if votes[a] > n {
			best, n = a, votes[a]
		}
	}
	return best
}

// ownedByOther reports whether a member other than skip owns tp (has it
// assigned or is revoking it). The callers ask it for the few partitions
// of a target a member does not have yet: a lookup per member is cheaper
// than indexing every owned partition of the group at each heartbeat.
func (g *Group) ownedByOther(tp TP, skip string) bool {
	for id, m := range g.members {
		if id == skip {
			continue
		}
		if _, ok := m.assigned[tp]; ok {
			return true
		}
		if _, ok := m.revoking[tp]; ok {
			return true
		}
	}
	return false
}

// reconcile moves member m one step towards its target assignment, given
// the partitions it says it owns (nil: it did not say). It reports whether
// the member's epoch or assignment changed.
func (g *Group) reconcile(m *member, owned map[TP]struct{}, now time.Time) bool {
	switch m.state {
	case Stable:
		if m.epoch == g.targetEpoch {
			return false
		}
	case UnrevokedPartitions:
		if owned == nil {
			return false
		}
		for tp := range m.revoking {
			if _, still := owned[tp]; still {
				return false
			}
		}
		// Revoked: the member moves on one epoch (at most to the target)
		// even if it must now revoke more.
		return g.nextAssignment(m, owned, now, min(m.epoch+1, g.targetEpoch))
	case UnreleasedPartitions:
	}
	return g.nextAssignment(m, owned, now, m.epoch)
}

// nextAssignment is Kafka's CurrentAssignmentBuilder.computeNextAssignment:
// epoch is the member's epoch should it have to revoke partitions.
func (g *Group) nextAssignment(m *member, owned map[TP]struct{}, now time.Time, epoch int32) bool {
	target := g.target[m.id]
	keep := map[TP]int32{}
	revoke := map[TP]struct{}{}
	for tp, e := range m.assigned {
		if _, ok := target[tp]; ok {
			keep[tp] = e
		} else {
			revoke[tp] = struct{}{}
		}
	}
	ownsRevoked := owned == nil
	for tp := range revoke {
		if _, ok := owned[tp]; ok {
			ownsRevoked = true
		}
	}
	before := m.epoch
	changed := false
	if len(revoke) > 0 && ownsRevoked {
		m.assigned, m.revoking, m.state = keep, revoke, UnrevokedPartitions
		if epoch != m.epoch {
			m.prevEpoch, m.epoch = m.epoch, epoch
		}
		// Each revocation gets the member's whole rebalance timeout.
		g.setDeadline(&m.revokingDeadline, now.Add(m.rebalanceTimeout))
		return true
	}
	if len(revoke) > 0 {
		changed = true
	}
	unreleased := false
	for tp := range target {
		if _, have := keep[tp]; have {
			continue
		}
		if g.ownedByOther(tp, m.id) {
			unreleased = true
			continue
		}
		keep[tp] = g.targetEpoch
		changed = true
	}
	m.assigned, m.revoking, m.revokingDeadline = keep, nil, time.Time{}
	if m.epoch != g.targetEpoch {
		m.prevEpoch, m.epoch = m.epoch, g.targetEpoch
	}
	if unreleased {
		m.state = UnreleasedPartitions
	} else {
		m.state = Stable
	}
	return changed || before != m.epoch
}

// assignedOf returns a member's assignment as TopicPartitions.
func assignedOf(m *member) []TopicPartitions { return grouped(m.assigned) }

func sortedCopy(names []string) []string {
	out := slices.Clone(names)
	sort.Strings(out)
	return slices.Compact(out)
}
