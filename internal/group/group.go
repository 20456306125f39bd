package group

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"time"
)

// member is one member of the group. Runs on the group's goroutine.
type member struct {
	id               string
	instanceID       string // "" for a dynamic member
	clientID         string
	clientHost       string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocolType     string
	protocols        []Protocol
	assignment       []byte
	// isNew: admitted in this join phase and not yet answered; its session
	// slot holds NewMemberJoinTimeout instead of the session timeout.
	isNew bool
	// joins and syncs are the parked JoinGroup and SyncGroup requests of
	// this member (normally at most one each; a retried request parks next
	// to the first and both get the same answer).
	joins []any
	syncs []any
}

func (m *member) static() bool       { return m.instanceID != "" }
func (m *member) awaitingJoin() bool { return len(m.joins) > 0 }
func (m *member) awaitingSync() bool { return len(m.syncs) > 0 }

func (m *member) instancePtr() *string {
	if m.instanceID == "" {
		return nil
	}
	s := m.instanceID
	return &s
}

func (m *member) metadataFor(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// matches reports whether protocols equals the member's, in order (Kafka's
// MemberMetadata.matches).
func (m *member) matches(protocols []Protocol) bool {
	if len(protocols) != len(m.protocols) {
		return false
	}
	for i, p := range protocols {
		if p.Name != m.protocols[i].Name || !bytes.Equal(p.Metadata, m.protocols[i].Metadata) {
			return false
		}
	}
	return true
}

type timerSlot struct {
	seq uint64
	at  time.Time
}

// Group is one classic consumer group. Create it with New; feed it one input
// at a time (its shell holds the group's mutex for each).
type Group struct {
	id  string
	cfg Config

	state      State
	generation int32
	// protocolType is the type of the group's first member; kept while Empty
	// (Kafka keeps it too) and replaced by the next first member.
	protocolType string
	protocol     string // chosen protocol of the current generation
	hasProtocol  bool
	leader       string

	members map[string]*member
	order   []string          // member ids in the order they joined (deterministic iteration)
	static  map[string]string // instance id → member id
	pending map[string]bool   // KIP-394 member ids handed out, not yet joined
	// pendingSync: members answered in the last join phase that have not
	// sent SyncGroup yet.
	pendingSync map[string]bool

	// Join-phase bookkeeping.
	initialDelay   bool          // the running join phase is in its initial delay
	newMemberAdded bool          // a new member joined during the current delay window
	lastNewMember  time.Time     // when the last new member joined during the delay
	delayRemaining time.Duration // what is left of the rebalance timeout for more windows
	completeNow    bool          // complete the join phase at the end of this input

	subscribed []string // topics of the generation's consumer metadata
	subKnown   bool

	timers map[TimerKey]timerSlot
	seq    uint64

	// persist: the current input changed the durable state (Output.Persist).
	persist bool

	// Per-input scratch, valid between begin and end.
	now   time.Time
	out   Output
	dirty map[TimerKey]bool // slot → was it armed when the input began
}

// New returns an Empty group with generation 0.
func New(id string, cfg Config) *Group {
	return &Group{
		id:          id,
		cfg:         cfg.WithDefaults(),
		members:     map[string]*member{},
		static:      map[string]string{},
		pending:     map[string]bool{},
		pendingSync: map[string]bool{},
		timers:      map[TimerKey]timerSlot{},
	}
}

// ID returns the group id.
func (g *Group) ID() string { return g.id }

// State returns the current state.
func (g *Group) State() State { return g.state }

// Generation returns the current generation (0 before the first join phase
// ends; it grows by one per completed join phase).
func (g *Group) Generation() int32 { return g.generation }

// Empty reports whether the group has no members (pending member ids aside).
func (g *Group) Empty() bool { return len(g.members) == 0 }

// Members returns the number of members (pending member ids excluded).
func (g *Group) Members() int { return len(g.members) }

// Leader returns the leader's member id, "" if none.
func (g *Group) Leader() string { return g.leader }

// ProtocolType returns the group's protocol type ("" before any member).
func (g *Group) ProtocolType() string { return g.protocolType }

// Protocol returns the protocol of the current generation, "" if none.
func (g *Group) Protocol() string { return g.protocol }

// Armed returns the timers the group currently considers armed, sorted by
// key: what the shell holds if it applied every Output.
func (g *Group) Armed() []TimerArm {
	out := make([]TimerArm, 0, len(g.timers))
	for k, s := range g.timers {
		out = append(out, TimerArm{Key: k, Seq: s.seq, At: s.at})
	}
	sort.Slice(out, func(i, j int) bool { return keyLess(out[i].Key, out[j].Key) })
	return out
}

func keyLess(a, b TimerKey) bool {
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	return a.Member < b.Member
}

// ---- per-input plumbing ----

func (g *Group) begin(now time.Time) {
	g.now = now
	g.out = Output{}
	g.dirty = map[TimerKey]bool{}
}

// end completes the join phase if it is due and returns the input's Output.
func (g *Group) end() Output {
	g.maybeCompleteJoin()
	keys := make([]TimerKey, 0, len(g.dirty))
	for k := range g.dirty {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
	for _, k := range keys {
		if s, ok := g.timers[k]; ok {
			g.out.Arm = append(g.out.Arm, TimerArm{Key: k, Seq: s.seq, At: s.at})
		} else if g.dirty[k] {
			g.out.Cancel = append(g.out.Cancel, k)
		}
	}
	out := g.out
	out.Persist = g.persist
	g.out = Output{}
	g.dirty = nil
	g.persist = false
	return out
}

func (g *Group) touch(k TimerKey) {
	if _, seen := g.dirty[k]; !seen {
		_, armed := g.timers[k]
		g.dirty[k] = armed
	}
}

func (g *Group) arm(k TimerKey, d time.Duration) {
	g.touch(k)
	g.seq++
	g.timers[k] = timerSlot{seq: g.seq, at: g.now.Add(d)}
}

func (g *Group) cancel(k TimerKey) {
	if _, ok := g.timers[k]; !ok {
		return
	}
	g.touch(k)
	delete(g.timers, k)
}

func (g *Group) event(e Event) {
	e.Group = g.id
	if e.Gen == 0 {
		e.Gen = g.generation
	}
	g.out.Events = append(g.out.Events, e)
}

func (g *Group) bug(format string, args ...any) {
	g.event(Event{Kind: EventBug, Reason: fmt.Sprintf(format, args...)})
}

// transition moves to state `to` if the table allows it; otherwise it logs a
// bug and stays, returning an error.
func (g *Group) transition(to State) error {
	if !CanTransition(g.state, to) {
		err := fmt.Errorf("group %s: illegal transition %s -> %s", g.id, g.state, to)
		g.bug("%v", err)
		return err
	}
	from := g.state
	g.state = to
	g.event(Event{Kind: EventStateChange, From: from, To: to})
	return nil
}

// ---- responses ----

func (g *Group) joinErr(ref any, memberID string, code Code) {
	g.out.Joins = append(g.out.Joins, JoinResult{Ref: ref, Err: code, MemberID: memberID, Generation: -1})
}

func (g *Group) syncErr(ref any, code Code) {
	g.out.Syncs = append(g.out.Syncs, SyncResult{Ref: ref, Err: code})
}

func strp(s string) *string { return &s }

func (g *Group) protocolPtrs() (*string, *string) {
	var name *string
	if g.hasProtocol {
		name = strp(g.protocol)
	}
	return strp(g.protocolType), name
}

// currentMembers is the leader's member list: every member with its
// metadata for the chosen protocol, in join order.
func (g *Group) currentMembers() []JoinMember {
	ms := make([]JoinMember, 0, len(g.order))
	for _, id := range g.order {
		m := g.members[id]
		ms = append(ms, JoinMember{MemberID: id, InstanceID: m.instancePtr(), Metadata: m.metadataFor(g.protocol)})
	}
	return ms
}

// joinOK builds a successful JoinGroup answer for the current generation.
func (g *Group) joinOK(ref any, memberID, leader string, withMembers, skip bool) JoinResult {
	pt, pn := g.protocolPtrs()
	r := JoinResult{Ref: ref, MemberID: memberID, Generation: g.generation, ProtocolType: pt, Protocol: pn, Leader: leader, SkipAssignment: skip}
	if withMembers {
		r.Members = g.currentMembers()
	}
	return r
}

// answerJoins answers every parked JoinGroup of m with an error.
func (g *Group) failJoins(m *member, memberID string, code Code) {
	for _, ref := range m.joins {
		g.joinErr(ref, memberID, code)
	}
	m.joins = nil
}

func (g *Group) failSyncs(m *member, code Code) {
	for _, ref := range m.syncs {
		g.syncErr(ref, code)
	}
	m.syncs = nil
}

// ---- membership ----

// validateMember is Kafka's validateCurrentMember: the instance id, when
// given, must map to memberID; the member must exist.
func (g *Group) validateMember(memberID string, instanceID *string) Code {
	if instanceID != nil {
		cur, ok := g.static[*instanceID]
		if !ok {
			return ErrUnknownMemberID
		}
		if cur != memberID {
			return ErrFencedInstanceID
		}
	}
	if _, ok := g.members[memberID]; !ok {
		return ErrUnknownMemberID
	}
	return ErrNone
}

func (g *Group) addMember(m *member) {
	if len(g.members) == 0 {
		g.protocolType = m.protocolType
	}
	g.members[m.id] = m
	g.order = append(g.order, m.id)
	if m.static() {
		g.static[m.instanceID] = m.id
	}
	if g.leader == "" {
		g.leader = m.id
	}
	g.event(Event{Kind: EventMemberAdded, Member: m.id, Instance: m.instanceID})
}

// removeMember drops m: its parked JoinGroups get UNKNOWN_MEMBER_ID (as
// Kafka answers a member removed while joining), its parked SyncGroups too,
// its session timer is cancelled and the leadership moves to the oldest
// remaining member. It does not start a rebalance.
func (g *Group) removeMember(m *member, reason string) {
	g.failJoins(m, "", ErrUnknownMemberID)
	g.failSyncs(m, ErrUnknownMemberID)
	delete(g.members, m.id)
	g.order = slices.DeleteFunc(g.order, func(id string) bool { return id == m.id })
	if m.static() && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	g.dropPendingSync(m.id)
	g.cancel(TimerKey{Kind: TimerSession, Member: m.id})
	if g.leader == m.id {
		g.leader = ""
		if len(g.order) > 0 {
			g.leader = g.order[0]
		}
	}
	g.persist = true
	g.event(Event{Kind: EventMemberRemoved, Member: m.id, Instance: m.instanceID, Reason: reason})
}

// removeMemberAndUpdate removes m and reacts like Kafka's
// removeMemberAndUpdateGroup: a rebalance from Stable or
// CompletingRebalance; in PreparingRebalance the join phase may now be
// complete (checked at the end of the input).
func (g *Group) removeMemberAndUpdate(m *member, reason string) {
	g.removeMember(m, reason)
	switch g.state {
	case Stable, CompletingRebalance:
		g.maybePrepareRebalance(reason)
	}
}

func (g *Group) removePending(id, reason string) {
	delete(g.pending, id)
	g.cancel(TimerKey{Kind: TimerPendingMember, Member: id})
	g.event(Event{Kind: EventPendingRemoved, Member: id, Reason: reason})
}

func (g *Group) dropPendingSync(id string) {
	if !g.pendingSync[id] {
		return
	}
	delete(g.pendingSync, id)
	if len(g.pendingSync) == 0 {
		g.cancel(TimerKey{Kind: TimerSyncTimeout})
	}
}

func (g *Group) armSession(m *member) {
	d := m.sessionTimeout
	if m.isNew {
		d = g.cfg.NewMemberJoinTimeout
	}
	g.arm(TimerKey{Kind: TimerSession, Member: m.id}, d)
}

// rebalanceTimeout is the largest rebalance timeout of the members.
func (g *Group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// supportsProtocols is Kafka's GroupMetadata.supportsProtocols: an Empty
// group takes any non-empty type and protocol list; otherwise the type must
// match and one of the protocols must be supported by every member.
func (g *Group) supportsProtocols(protocolType string, protocols []Protocol) bool {
	if protocolType == "" || len(protocols) == 0 {
		return false
	}
	if len(g.members) == 0 {
		return true
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protocols {
		n := 0
		for _, m := range g.members {
			if hasProtocol(m.protocols, p.Name) {
				n++
			}
		}
		if n == len(g.members) {
			return true
		}
	}
	return false
}

func hasProtocol(ps []Protocol, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

// selectProtocol is Kafka's vote: the candidates are the protocols every
// member supports; each member votes for its most preferred candidate; the
// most votes win. Ties go to the candidate that got its first vote from the
// earliest-joined member.
func (g *Group) selectProtocol() (string, bool) {
	if len(g.order) == 0 {
		return "", false
	}
	isCandidate := func(name string) bool {
		for _, m := range g.members {
			if !hasProtocol(m.protocols, name) {
				return false
			}
		}
		return true
	}
	votes := map[string]int{}
	var first []string
	for _, id := range g.order {
		for _, p := range g.members[id].protocols {
			if isCandidate(p.Name) {
				if votes[p.Name] == 0 {
					first = append(first, p.Name)
				}
				votes[p.Name]++
				break
			}
		}
	}
	if len(first) == 0 {
		return "", false
	}
	best := first[0] // a protocol name may be empty: Kafka accepts it like any other
	for _, name := range first[1:] {
		if votes[name] > votes[best] {
			best = name
		}
	}
	return best, true
}
