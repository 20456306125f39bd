package cgroup

import (
	"slices"
	"time"
)

// CommitCheck is the membership part of an OffsetCommit (v9+) or
// TxnOffsetCommit to a consumer group.
type CommitCheck struct {
	MemberID    string
	InstanceID  *string
	MemberEpoch int32 // GenerationIdOrMemberEpoch
	// Transactional: TxnOffsetCommit (stale epochs answer
	// ILLEGAL_GENERATION, as Kafka does there).
	Transactional bool
	// Version is the OffsetCommit version (ignored when Transactional): a
	// consumer-protocol member must commit with v9+.
	Version int16
}

// CheckCommit decides a commit's membership: ok to commit, or the error for
// the whole request, or per partition (KIP-1251: an epoch older than the
// member's is good for a partition the member was assigned at or before
// it). tps are the partitions being committed; the answer holds an error
// only for those that fail.
func (g *Group) CheckCommit(in CommitCheck, tps []TP) (Code, map[TP]Code) {
	switch {
	case in.Transactional && in.MemberID == "" && in.MemberEpoch < 0 && (in.InstanceID == nil || *in.InstanceID == ""):
		// A transactional producer without the group's metadata (v0-2, or
		// sendOffsetsToTransaction with a group id only): not checked.
		return ErrNone, nil
	case in.MemberEpoch < 0 && len(g.members) == 0:
		// An admin or a consumer outside group management: only while
		// nobody is in the group.
		return ErrNone, nil
	}
	m := g.members[in.MemberID]
	if m == nil {
		return ErrUnknownMemberID, nil
	}
	if in.InstanceID != nil && *in.InstanceID != "" && g.static[*in.InstanceID] != m.id {
		return ErrFencedInstanceID, nil
	}
	if m.classic != nil {
		// A classic member commits with its generation, its member epoch,
		// in any OffsetCommit version.
		if in.MemberEpoch != m.epoch {
			return ErrIllegalGeneration, nil
		}
		return ErrNone, nil
	}
	if !in.Transactional && in.Version < 9 {
		return ErrUnsupportedVersion, nil
	}
	stale := ErrStaleMemberEpoch
	if in.Transactional {
		stale = ErrIllegalGeneration
	}
	switch {
	case in.MemberEpoch == m.epoch:
		return ErrNone, nil
	case in.MemberEpoch > m.epoch:
		return stale, nil
	}
	var bad map[TP]Code
	for _, tp := range tps {
		at, ok := m.assigned[tp]
		if !ok {
			if _, revoking := m.revoking[tp]; revoking {
				continue // still owned until the member says it let go
			}
		}
		if !ok || at > in.MemberEpoch {
			if bad == nil {
				bad = map[TP]Code{}
			}
			bad[tp] = stale
		}
	}
	return ErrNone, bad
}

// CheckFetch is the membership gate of OffsetFetch v9+: a request with no
// member id (null) and a negative epoch comes from an admin client or a
// consumer outside group management and passes; otherwise the member must
// exist (UNKNOWN_MEMBER_ID; an empty id names nobody) and be at its current
// epoch (STALE_MEMBER_EPOCH).
func (g *Group) CheckFetch(memberID *string, epoch int32) Code {
	if memberID == nil && epoch < 0 {
		return ErrNone
	}
	var m *member
	if memberID != nil {
		m = g.members[*memberID]
	}
	if m == nil {
		return ErrUnknownMemberID
	}
	if epoch != m.epoch {
		return ErrStaleMemberEpoch
	}
	return ErrNone
}

// Delete is DeleteGroups: NON_EMPTY_GROUP unless nobody is in the group.
func (g *Group) Delete() Code {
	if len(g.members) > 0 {
		return ErrNonEmptyGroup
	}
	return ErrNone
}

// SubscribedTopics lists the topics the members subscribe to in im.
func (g *Group) SubscribedTopics(im *Image) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range g.members {
		for _, n := range subscribed(m, im) {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

// Subscribed reports whether a member subscribes to topic (OffsetDelete's
// GROUP_SUBSCRIBED_TO_TOPIC).
func (g *Group) Subscribed(topic string, im *Image) bool {
	return slices.Contains(g.SubscribedTopics(im), topic)
}

// MemberDescription is one member in ConsumerGroupDescribe.
type MemberDescription struct {
	MemberID, InstanceID, RackID string
	ClientID, ClientHost         string
	MemberEpoch                  int32
	State                        MemberState
	SubscribedTopicNames         []string
	SubscribedTopicRegex         string
	Assignment                   []TopicPartitions
	Revoking                     []TopicPartitions
	TargetAssignment             []TopicPartitions
	// Classic: the member speaks the classic protocol (MemberType 0).
	Classic bool
}

// Description is the group for ConsumerGroupDescribe.
type Description struct {
	GroupID         string
	State           string
	GroupEpoch      int32
	AssignmentEpoch int32
	Assignor        string
	Members         []MemberDescription
}

// Describe returns the group as ConsumerGroupDescribe shows it (members
// sorted by id).
func (g *Group) Describe() Description {
	d := Description{GroupID: g.id, State: g.State(), GroupEpoch: g.epoch, AssignmentEpoch: g.targetEpoch, Assignor: g.assignorName()}
	for _, id := range g.memberIDs() {
		m := g.members[id]
		d.Members = append(d.Members, MemberDescription{
			MemberID: m.id, InstanceID: m.instanceID, RackID: m.rackID, ClientID: m.clientID, ClientHost: m.clientHost,
			MemberEpoch: m.epoch, State: m.state, SubscribedTopicNames: m.names, SubscribedTopicRegex: m.regex,
			Assignment: assignedOf(m), Revoking: grouped(m.revoking), TargetAssignment: grouped(g.target[id]),
			Classic: m.classic != nil,
		})
	}
	return d
}

// Snapshot is the durable state of the group (docs/cgroup.md): everything
// but the session and revocation deadlines, which start afresh at Restore.
type Snapshot struct {
	Epoch       int32            `json:"epoch"`
	TargetEpoch int32            `json:"targetEpoch"`
	MetaHash    uint64           `json:"metaHash"`
	Members     []MemberSnapshot `json:"members"`
}

// MemberSnapshot is one member's durable state.
type MemberSnapshot struct {
	ID               string            `json:"id"`
	InstanceID       string            `json:"instanceId,omitempty"`
	RackID           string            `json:"rackId,omitempty"`
	ClientID         string            `json:"clientId,omitempty"`
	ClientHost       string            `json:"clientHost,omitempty"`
	Epoch            int32             `json:"epoch"`
	PrevEpoch        int32             `json:"prevEpoch"`
	State            MemberState       `json:"state"`
	RebalanceTimeout int64             `json:"rebalanceTimeoutMs"`
	Names            []string          `json:"names,omitempty"`
	Regex            string            `json:"regex,omitempty"`
	Assignor         string            `json:"assignor,omitempty"`
	Assigned         []AssignedSnap    `json:"assigned,omitempty"`
	Revoking         []TopicPartitions `json:"revoking,omitempty"`
	Target           []TopicPartitions `json:"target,omitempty"`
	// Classic is set for a member that speaks the classic protocol.
	Classic *ClassicSnap `json:"classic,omitempty"`
}

// ClassicSnap is what a classic member adds to its durable state.
type ClassicSnap struct {
	SessionTimeout int64          `json:"sessionTimeoutMs"`
	Protocols      []ProtocolSnap `json:"protocols"`
}

// ProtocolSnap is one of a classic member's protocols.
type ProtocolSnap struct {
	Name     string `json:"name"`
	Metadata []byte `json:"metadata"`
}

// AssignedSnap is a member's partitions of one topic with the epochs they
// were assigned at.
type AssignedSnap struct {
	Topic      TopicID `json:"topic"`
	Partitions []int32 `json:"partitions"`
	Epochs     []int32 `json:"epochs"`
}

// Snapshot returns the durable state.
func (g *Group) Snapshot() Snapshot {
	s := Snapshot{Epoch: g.epoch, TargetEpoch: g.targetEpoch, MetaHash: g.metaHash}
	for _, id := range g.memberIDs() {
		m := g.members[id]
		ms := MemberSnapshot{ID: m.id, InstanceID: m.instanceID, RackID: m.rackID, ClientID: m.clientID, ClientHost: m.clientHost,
			Epoch: m.epoch, PrevEpoch: m.prevEpoch, State: m.state, RebalanceTimeout: m.rebalanceTimeout.Milliseconds(),
			Names: m.names, Regex: m.regex, Assignor: m.assignor, Revoking: grouped(m.revoking), Target: grouped(g.target[id])}
		for _, t := range grouped(m.assigned) {
			a := AssignedSnap{Topic: t.Topic, Partitions: t.Partitions}
			for _, p := range t.Partitions {
				a.Epochs = append(a.Epochs, m.assigned[TP{t.Topic, p}])
			}
			ms.Assigned = append(ms.Assigned, a)
		}
		if c := m.classic; c != nil {
			ms.Classic = &ClassicSnap{SessionTimeout: c.sessionTimeout.Milliseconds()}
			for _, p := range c.protocols {
				ms.Classic.Protocols = append(ms.Classic.Protocols, ProtocolSnap{Name: p.Name, Metadata: p.Metadata})
			}
		}
		s.Members = append(s.Members, ms)
	}
	return s
}

// Restore replaces the group's state with s; session deadlines start at
// now, and a member revoking partitions gets its whole rebalance timeout
// again.
func (g *Group) Restore(now time.Time, s Snapshot) error {
	g.invalidate()
	members := map[string]*member{}
	static := map[string]string{}
	target := map[string]map[TP]struct{}{}
	for _, ms := range s.Members {
		if ms.ID == "" || members[ms.ID] != nil {
			return errRestore("a member without an id, or twice")
		}
		m := &member{id: ms.ID, instanceID: ms.InstanceID, rackID: ms.RackID, clientID: ms.ClientID, clientHost: ms.ClientHost,
			epoch: ms.Epoch, prevEpoch: ms.PrevEpoch, state: ms.State, rebalanceTimeout: time.Duration(ms.RebalanceTimeout) * time.Millisecond,
			names: ms.Names, regex: ms.Regex, assignor: ms.Assignor, assigned: map[TP]int32{}}
		re, err := compileWhole(ms.Regex)
		if err != nil {
			return errRestore("member " + ms.ID + ": regex: " + err.Error())
		}
		m.re = re
		for _, a := range ms.Assigned {
			if len(a.Epochs) != len(a.Partitions) {
				return errRestore("assigned partitions and epochs differ in length")
			}
			for i, p := range a.Partitions {
				m.assigned[TP{a.Topic, p}] = a.Epochs[i]
			}
		}
		if len(ms.Revoking) > 0 {
			m.revoking = flat(ms.Revoking)
			g.setDeadline(&m.revokingDeadline, now.Add(m.rebalanceTimeout))
		}
		g.setDeadline(&m.sessionDeadline, now.Add(g.cfg.SessionTimeout))
		if c := ms.Classic; c != nil {
			if len(c.Protocols) == 0 {
				return errRestore("classic member " + ms.ID + " without protocols")
			}
			m.classic = &classicMeta{sessionTimeout: time.Duration(c.SessionTimeout) * time.Millisecond}
			for _, p := range c.Protocols {
				m.classic.protocols = append(m.classic.protocols, Protocol{Name: p.Name, Metadata: p.Metadata})
			}
			g.setDeadline(&m.sessionDeadline, now.Add(m.classic.sessionTimeout))
			// A revocation is a rejoin it owes: it gets its rebalance
			// timeout again, as a consumer member does.
			m.revokingDeadline = time.Time{}
			if m.state == UnrevokedPartitions {
				g.setDeadline(&m.classic.joinDeadline, now.Add(m.rebalanceTimeout))
			}
		}
		if m.instanceID != "" {
			static[m.instanceID] = m.id
		}
		target[m.id] = flat(ms.Target)
		members[m.id] = m
	}
	g.epoch, g.targetEpoch, g.metaHash = s.Epoch, s.TargetEpoch, s.MetaHash
	g.members, g.static, g.target = members, static, target
	return nil
}

type errRestore string

func (e errRestore) Error() string { return "cgroup: restore: " + string(e) }
