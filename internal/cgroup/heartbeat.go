package cgroup

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"
)

// HeartbeatInput is a ConsumerGroupHeartbeat request (v0–1).
type HeartbeatInput struct {
	Version     int16
	MemberID    string
	MemberEpoch int32
	InstanceID  *string
	RackID      *string
	// RebalanceTimeout is -1 (unchanged) or the member's rebalance timeout.
	RebalanceTimeoutMs int32
	// SubscribedTopicNames is nil when unchanged.
	SubscribedTopicNames []string
	// SubscribedTopicRegex is nil when unchanged; "" clears it.
	SubscribedTopicRegex *string
	// ServerAssignor is nil when unchanged.
	ServerAssignor *string
	// OwnedTopicPartitions is nil when unchanged (not sent).
	OwnedTopicPartitions []TopicPartitions
	OwnedSent            bool
	ClientID, ClientHost string
}

// HeartbeatResult is the ConsumerGroupHeartbeat answer.
type HeartbeatResult struct {
	Err                 Code
	ErrMessage          string
	MemberID            string
	MemberEpoch         int32
	HeartbeatIntervalMs int32
	// Assignment is set (HasAssignment) when the member must learn it: it
	// joined, sent a full request, or its assignment changed.
	HasAssignment bool
	Assignment    []TopicPartitions
}

func (g *Group) fail(code Code, msg string) HeartbeatResult {
	return HeartbeatResult{Err: code, ErrMessage: msg}
}

// MaxMemberRecordBytes bounds what one member may make the group keep.
// Kafka stores a member's metadata in one record of __consumer_offsets, in
// a batch of at most message.max.bytes (1 MiB by default), and fails a
// heartbeat whose record would be larger with UNKNOWN_SERVER_ERROR
// (RECORD_LIST_TOO_LARGE, mapped); kaas refuses it the same way before the
// member is added or changed, so no client can grow a group's memory and
// file without bound (docs/operations.md, "Limits").
const MaxMemberRecordBytes = 1 << 20

// memberRecordSize is the bytes a heartbeat asks the group to keep for its
// member, as a Kafka member record would hold them.
func memberRecordSize(in HeartbeatInput) int {
	n := len(in.MemberID) + len(in.ClientID) + len(in.ClientHost)
	for _, s := range []*string{in.InstanceID, in.RackID, in.SubscribedTopicRegex, in.ServerAssignor} {
		if s != nil {
			n += len(*s)
		}
	}
	for _, t := range in.SubscribedTopicNames {
		n += len(t) + 2
	}
	for _, tp := range in.OwnedTopicPartitions {
		n += 16 + 4*len(tp.Partitions)
	}
	return n
}

// validate is Kafka's request validation for a heartbeat.
func (g *Group) validate(in HeartbeatInput) (Code, string) {
	switch {
	case in.Version >= 1 && in.MemberID == "":
		return ErrInvalidRequest, "MemberId can't be empty."
	case in.MemberEpoch < StaticLeaveEpoch:
		return ErrInvalidRequest, "MemberEpoch is invalid."
	case in.MemberEpoch == StaticLeaveEpoch && (in.InstanceID == nil || *in.InstanceID == ""):
		return ErrInvalidRequest, "InstanceId can't be null."
	case in.MemberEpoch > 0 && in.MemberID == "":
		return ErrInvalidRequest, "MemberId can't be empty."
	case in.InstanceID != nil && *in.InstanceID == "":
		return ErrInvalidRequest, "InstanceId can't be empty."
	}
	if in.MemberEpoch == JoinEpoch {
		switch {
		case in.RebalanceTimeoutMs == -1:
			return ErrInvalidRequest, "RebalanceTimeoutMs must be provided in first request."
		case !in.OwnedSent || len(in.OwnedTopicPartitions) > 0:
			return ErrInvalidRequest, "TopicPartitions must be empty when (re-)joining."
		case in.SubscribedTopicNames == nil && (in.SubscribedTopicRegex == nil || *in.SubscribedTopicRegex == ""):
			return ErrInvalidRequest, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."
		}
	}
	if n := memberRecordSize(in); n > MaxMemberRecordBytes {
		return ErrUnknownServerError, fmt.Sprintf("The member's metadata (%d bytes of subscribed topic names, regex, rack, ids and owned partitions) is larger than a group record may be (%d bytes).", n, MaxMemberRecordBytes)
	}
	if in.SubscribedTopicRegex != nil && *in.SubscribedTopicRegex != "" {
		if _, err := regexp.Compile(*in.SubscribedTopicRegex); err != nil {
			why := err.Error()
			var se *syntax.Error
			if errors.As(err, &se) {
				why = string(se.Code)
			}
			return ErrInvalidRegex, "SubscribedTopicRegex `" + *in.SubscribedTopicRegex + "` is not a valid regular expression: " + why + "."
		}
	}
	if in.ServerAssignor != nil && *in.ServerAssignor != "" && !slices.Contains(g.cfg.Assignors, *in.ServerAssignor) {
		return ErrUnsupportedAssignor, "ServerAssignor " + *in.ServerAssignor + " is not supported. Supported assignors: " + strings.Join(g.cfg.Assignors, ", ") + "."
	}
	return ErrNone, ""
}

// Heartbeat serves one ConsumerGroupHeartbeat.
func (g *Group) Heartbeat(now time.Time, im *Image, in HeartbeatInput) (HeartbeatResult, Output) {
	targetEpoch := g.targetEpoch
	res, out := g.heartbeat(now, im, in)
	if in.MemberEpoch == LeaveEpoch || in.MemberEpoch == StaticLeaveEpoch || g.targetEpoch != targetEpoch {
		g.invalidate()
	} else {
		// Only the member the heartbeat speaks for changed (a static
		// member replaced is another member under another id).
		g.invalidate(in.MemberID, res.MemberID)
	}
	return res, out
}

func (g *Group) heartbeat(now time.Time, im *Image, in HeartbeatInput) (HeartbeatResult, Output) {
	var out Output
	if code, msg := g.validate(in); code != ErrNone {
		return g.fail(code, msg), out
	}
	if g.unjoined() && in.MemberEpoch != JoinEpoch {
		// The group never had a member: Kafka does not know it.
		if in.MemberEpoch > 0 {
			return g.fail(ErrGroupIDNotFound, "Consumer group "+g.id+" not found."), out
		}
		return g.fail(ErrGroupIDNotFound, "Group "+g.id+" not found."), out
	}
	if in.MemberEpoch == LeaveEpoch || in.MemberEpoch == StaticLeaveEpoch {
		return g.leave(now, im, in)
	}
	var owned map[TP]struct{}
	if in.OwnedSent {
		owned = flat(in.OwnedTopicPartitions)
	}
	m, res, ok := g.memberFor(now, in, &out)
	if !ok {
		return res, out
	}
	before := maps.Clone(m.assigned)
	if g.update(m, in) {
		if g.targetEpoch == g.epoch {
			g.bump(&out, "member "+m.id+" changed its subscription")
		}
	}
	g.maybeAssign(now, m.id, im, &out)
	if g.reconcile(m, owned, now) {
		out.Persist = true
	}
	g.setDeadline(&m.sessionDeadline, now.Add(g.cfg.SessionTimeout))
	res = HeartbeatResult{MemberID: m.id, MemberEpoch: m.epoch, HeartbeatIntervalMs: int32(g.cfg.HeartbeatInterval / time.Millisecond)}
	full := in.RebalanceTimeoutMs != -1 && (in.SubscribedTopicNames != nil || in.SubscribedTopicRegex != nil) && in.OwnedSent
	if in.MemberEpoch == JoinEpoch || full || !maps.Equal(before, m.assigned) {
		res.HasAssignment, res.Assignment = true, assignedOf(m)
	}
	return res, out
}

// memberFor finds the member a heartbeat speaks for, creating or replacing
// it on a join, and checks its epoch.
func (g *Group) memberFor(now time.Time, in HeartbeatInput, out *Output) (*member, HeartbeatResult, bool) {
	instance := ""
	if in.InstanceID != nil {
		instance = *in.InstanceID
	}
	if in.MemberEpoch != JoinEpoch {
		var m *member
		if instance != "" {
			// A static member is found by its instance, as on Kafka: one
			// whose instance another member holds now is fenced, not
			// unknown.
			m = g.members[g.static[instance]]
			if m == nil {
				return nil, g.fail(ErrUnknownMemberID, "Instance id "+instance+" is unknown."), false
			}
			if m.id != in.MemberID {
				return nil, g.fail(ErrFencedInstanceID, "Static member "+in.MemberID+" with instance id "+instance+" was fenced by another member."), false
			}
		} else if m = g.members[in.MemberID]; m == nil {
			return nil, g.fail(ErrUnknownMemberID, "Member "+in.MemberID+" is not a member of group "+g.id+"."), false
		}
		if m.classic != nil {
			return nil, g.fail(ErrUnknownMemberID, "Member "+in.MemberID+" does not use the consumer protocol."), false
		}
		if in.MemberEpoch != m.epoch {
			// A member that missed the answer that moved it on retries with
			// its previous epoch: accepted while it owns no partition it no
			// longer has.
			ok := in.MemberEpoch == m.prevEpoch && in.MemberEpoch < m.epoch && in.OwnedSent
			if ok {
				for tp := range flat(in.OwnedTopicPartitions) {
					if _, has := m.assigned[tp]; !has {
						ok = false
						break
					}
				}
			}
			if !ok {
				rel := "smaller"
				if in.MemberEpoch > m.epoch {
					rel = "greater"
				}
				return nil, g.fail(ErrFencedMemberEpoch, "The consumer group member has a "+rel+" member epoch ("+itoa(in.MemberEpoch)+") than the one known by the group coordinator ("+itoa(m.epoch)+"). The member must abandon all its partitions and rejoin."), false
			}
		}
		return m, HeartbeatResult{}, true
	}
	// Joining (epoch 0).
	id := in.MemberID
	if id == "" {
		id = g.cfg.NewMemberID()
	}
	if old := g.members[id]; old != nil && old.instanceID == instance {
		// A member rejoining under its id (after an error it lost track of
		// its epoch) keeps its place, epoch and assignment, as in Kafka;
		// the answer carries its whole assignment.
		if old.epoch == StaticLeaveEpoch {
			old.epoch, old.state = 0, Stable
		}
		if old.classic != nil {
			// A classic member switching to the consumer protocol.
			old.classic = nil
			if old.state == UnrevokedPartitions {
				g.setDeadline(&old.revokingDeadline, now.Add(old.rebalanceTimeout))
			}
			out.Persist = true
		}
		return old, HeartbeatResult{}, true
	}
	if instance != "" {
		if oldID, ok := g.static[instance]; ok {
			old := g.members[oldID]
			// A classic member's instance is taken over at once (Kafka's
			// UNRELEASED_INSTANCE_ID is between consumer-protocol members).
			if old.classic == nil && old.epoch != StaticLeaveEpoch && oldID != id {
				return nil, g.fail(ErrUnreleasedInstanceID, "Static member with instance id "+instance+" is not released yet."), false
			}
			// The instance comes back: the new member takes the old one's
			// place, its assignment and its target, without a new epoch.
			m := *old
			m.id, m.epoch, m.prevEpoch, m.state, m.classic = id, 0, 0, Stable, nil
			m.revoking, m.revokingDeadline = nil, time.Time{}
			m.assigned = maps.Clone(old.assigned)
			delete(g.members, oldID)
			if t, ok := g.target[oldID]; ok {
				delete(g.target, oldID)
				g.target[id] = t
			}
			g.members[id] = &m
			g.static[instance] = id
			out.event("member joined", id, 0, "replaces static member "+oldID+" (instance "+instance+")")
			out.Persist = true
			return &m, HeartbeatResult{}, true
		}
	}
	if old := g.members[id]; old != nil {
		// The id is another instance's member: the instance check below
		// fences the request.
		return nil, g.fail(ErrFencedInstanceID, "Static member "+id+" with instance id "+instance+" was fenced by another member."), false
	} else if g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize {
		return nil, g.fail(ErrGroupMaxSizeReached, "The consumer group has reached its maximum capacity of "+itoa(int32(g.cfg.MaxSize))+" members."), false
	}
	m := &member{id: id, instanceID: instance, assigned: map[TP]int32{}, state: Stable}
	g.members[id] = m
	if instance != "" {
		g.static[instance] = id
	}
	g.bump(out, "member "+id+" joined")
	out.event("member joined", id, 0, "")
	return m, HeartbeatResult{}, true
}

// update applies the fields a heartbeat carries; it reports whether the
// member's subscription (topics, regex or assignor) changed.
func (g *Group) update(m *member, in HeartbeatInput) bool {
	changed := false
	if in.RebalanceTimeoutMs >= 0 {
		m.rebalanceTimeout = time.Duration(in.RebalanceTimeoutMs) * time.Millisecond
	}
	if in.RackID != nil {
		m.rackID = *in.RackID
	}
	if in.ClientID != "" {
		m.clientID = in.ClientID
	}
	if in.ClientHost != "" {
		m.clientHost = in.ClientHost
	}
	// The subscription is the names and the regex together; a field left
	// null keeps its value.
	if in.SubscribedTopicNames != nil {
		names := sortedCopy(in.SubscribedTopicNames)
		if !slices.Equal(names, m.names) {
			changed = true
		}
		m.names = names
	}
	if in.SubscribedTopicRegex != nil && *in.SubscribedTopicRegex != m.regex {
		m.regex, changed = *in.SubscribedTopicRegex, true
		m.re, _ = compileWhole(m.regex) // validated
	}
	if in.ServerAssignor != nil && *in.ServerAssignor != m.assignor {
		m.assignor, changed = *in.ServerAssignor, true
	}
	return changed
}

// leave serves a heartbeat with epoch -1 (leave) or -2 (a static member
// leaving for now: it keeps its partitions until it is back or its session
// ends).
func (g *Group) leave(now time.Time, im *Image, in HeartbeatInput) (HeartbeatResult, Output) {
	var out Output
	var m *member
	if in.InstanceID != nil {
		m = g.members[g.static[*in.InstanceID]]
		if m == nil {
			return g.fail(ErrUnknownMemberID, "Instance id "+*in.InstanceID+" is unknown."), out
		}
		if m.id != in.MemberID {
			return g.fail(ErrFencedInstanceID, "Static member "+in.MemberID+" with instance id "+*in.InstanceID+" was fenced by another member."), out
		}
	} else if m = g.members[in.MemberID]; m == nil {
		return g.fail(ErrUnknownMemberID, "Member "+in.MemberID+" is not a member of group "+g.id+"."), out
	}
	if in.MemberEpoch == StaticLeaveEpoch {
		m.prevEpoch, m.epoch = m.epoch, StaticLeaveEpoch
		m.revoking, m.revokingDeadline, m.state = nil, time.Time{}, Stable
		g.setDeadline(&m.sessionDeadline, now.Add(g.cfg.SessionTimeout))
		out.Persist = true
		out.event("member left", m.id, StaticLeaveEpoch, "static member left for now")
	} else {
		g.remove(m, &out, "member left", "left the group")
		g.maybeAssign(now, "", im, &out)
	}
	// No heartbeat interval: the member is gone (Kafka answers 0).
	return HeartbeatResult{MemberID: in.MemberID, MemberEpoch: in.MemberEpoch}, out
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
