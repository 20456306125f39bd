package cgroup

import (
	"encoding/binary"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Online migration between the classic and the consumer protocol (Kafka's
// group.consumer.migration.policy): a classic group whose members use the
// "consumer" embedded protocol becomes a consumer group when a member joins
// it with ConsumerGroupHeartbeat (FromClassic); its classic members stay in,
// served through JoinGroup, SyncGroup, Heartbeat and LeaveGroup
// (ClassicJoin, ClassicSync, ClassicHeartbeat, ClassicLeave) while the
// coordinator assigns; and when the last consumer-protocol member leaves a
// group of classic members, it becomes a classic group again (ToClassic,
// Output.Downgrade). docs/cgroup.md, "Online migration".

// The migration policies (group.consumer.migration.policy; Kafka's default
// is bidirectional). Empty groups change type whatever the policy.
const (
	MigrationBidirectional = "bidirectional"
	MigrationUpgrade       = "upgrade"
	MigrationDowngrade     = "downgrade"
	MigrationDisabled      = "disabled"
)

// UpgradeEnabled: a classic group with members may become a consumer group.
func (c Config) UpgradeEnabled() bool {
	return c.MigrationPolicy == MigrationBidirectional || c.MigrationPolicy == MigrationUpgrade
}

// DowngradeEnabled: a consumer group left with classic members only becomes
// a classic group.
func (c Config) DowngradeEnabled() bool {
	return c.MigrationPolicy == MigrationBidirectional || c.MigrationPolicy == MigrationDowngrade
}

// ConsumerProtocolType is the protocol type of the classic groups and
// members a consumer group takes in (Java's ConsumerProtocol).
const ConsumerProtocolType = "consumer"

// Protocol is one protocol a classic member supports (JoinGroup): its name
// (the client-side assignor) and its metadata, a ConsumerProtocol
// subscription.
type Protocol struct {
	Name     string
	Metadata []byte
}

// classicMeta is what a member speaking the classic protocol adds: its own
// session timeout, its protocols, and the deadline of the JoinGroup (after
// it was told REBALANCE_IN_PROGRESS) or SyncGroup (after its JoinGroup
// answer) it owes, each its rebalance timeout.
type classicMeta struct {
	sessionTimeout time.Duration
	protocols      []Protocol
	joinDeadline   time.Time
	syncDeadline   time.Time
}

// ClassicMember is one member of a classic group, as a conversion sees it.
type ClassicMember struct {
	ID, InstanceID                   string
	ClientID, ClientHost             string
	SessionTimeout, RebalanceTimeout time.Duration
	Protocols                        []Protocol
	Assignment                       []byte // a ConsumerProtocol assignment
}

// ClassicGroup is the durable state of a classic group, as a conversion
// sees it.
type ClassicGroup struct {
	Generation int32
	// Protocol is the generation's protocol: each member's subscription is
	// read from its metadata for it.
	Protocol string
	Leader   string
	Members  []ClassicMember
}

// ErrMalformed: a classic member's subscription or assignment is not a
// ConsumerProtocol one.
var ErrMalformed = errors.New("the embedded consumer protocol is malformed")

// classicMembers counts the members of each protocol.
func (g *Group) classicMembers() (classic, consumer int) {
	for _, m := range g.members {
		if m.classic != nil {
			classic++
		} else {
			consumer++
		}
	}
	return classic, consumer
}

// FromClassic converts a classic group with members into a consumer group
// (Kafka's online upgrade): the group and target epochs are the
// generation; every member is Stable at it, with the partitions its last
// assignment gave it as its assignment and its target, its subscription
// read from its metadata for the generation's protocol. Partitions of
// topics im does not know are dropped. The shell then feeds it the
// heartbeat of the member that asked for the upgrade.
func FromClassic(id string, cfg Config, now time.Time, im *Image, cg ClassicGroup) (*Group, error) {
	g := New(id, cfg)
	g.epoch, g.targetEpoch = cg.Generation, cg.Generation
	taken := map[TP]bool{}
	for _, cm := range cg.Members {
		meta := cm.Protocols
		if len(meta) == 0 {
			return nil, ErrMalformed
		}
		// The generation's protocol; a member that joined since, with
		// other protocols, is read from its first.
		i := max(slices.IndexFunc(meta, func(p Protocol) bool { return p.Name == cg.Protocol }), 0)
		var sub kmsg.ConsumerMemberMetadata
		if err := sub.ReadFrom(meta[i].Metadata); err != nil {
			return nil, ErrMalformed
		}
		assigned := map[TP]int32{}
		if len(cm.Assignment) > 0 {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(cm.Assignment); err != nil {
				return nil, ErrMalformed
			}
			for _, t := range a.Topics {
				topic, ok := im.ByName(t.Topic)
				if !ok {
					continue
				}
				for _, p := range t.Partitions {
					tp := TP{topic.ID, p}
					if p < 0 || p >= topic.Partitions || taken[tp] {
						continue
					}
					taken[tp] = true
					assigned[tp] = cg.Generation
				}
			}
		}
		if cm.ID == "" || g.members[cm.ID] != nil {
			return nil, errRestore("a member without an id, or twice")
		}
		m := &member{id: cm.ID, instanceID: cm.InstanceID, clientID: cm.ClientID, clientHost: cm.ClientHost,
			epoch: cg.Generation, prevEpoch: cg.Generation, state: Stable, rebalanceTimeout: cm.RebalanceTimeout,
			names: sortedCopy(sub.Topics), assigned: assigned,
			classic: &classicMeta{sessionTimeout: cm.SessionTimeout, protocols: cloneProtocols(cm.Protocols)}}
		if sub.Rack != nil {
			m.rackID = *sub.Rack
		}
		g.setDeadline(&m.sessionDeadline, now.Add(cm.SessionTimeout))
		g.members[m.id] = m
		if m.instanceID != "" {
			g.static[m.instanceID] = m.id
		}
		target := map[TP]struct{}{}
		for tp := range assigned {
			target[tp] = struct{}{}
		}
		g.target[m.id] = target
	}
	// The subscribed topics as they are now: a change of them is a change
	// to come, not one the conversion makes.
	g.metaHash = g.subscriptionHash(im)
	if im != nil {
		g.hashImage, g.hashEpoch = im.serial, g.epoch
	}
	return g, nil
}

// ToClassic is the classic group a consumer group of classic members only
// becomes (Kafka's online downgrade): its protocol the one the members vote
// for among those all support, the leader the first member by id, and each
// member's assignment its target assignment, encoded in the version of its
// subscription. The shell starts a rebalance of it at once.
//
// The generation is the highest member epoch, the generation the members
// know, where Kafka takes the group epoch: the departure that brings the
// downgrade bumped the group epoch past every member's, so on Kafka the
// commits the members make before they rejoin fail with
// ILLEGAL_GENERATION and their records are read again. Here they land, as
// commits do while a classic group prepares a rebalance; the rebalance
// then moves the generation past every epoch the group had.
func (g *Group) ToClassic(im *Image) (ClassicGroup, error) {
	g.invalidate()
	var cg ClassicGroup
	ids := g.memberIDs()
	members := make([]*member, 0, len(ids))
	for _, id := range ids {
		m := g.members[id]
		if m.classic == nil || len(m.classic.protocols) == 0 {
			return ClassicGroup{}, errors.New("member " + id + " does not use the classic protocol")
		}
		members = append(members, m)
		cg.Generation = max(cg.Generation, m.epoch)
	}
	proto, ok := selectProtocol(members)
	if !ok {
		return ClassicGroup{}, errors.New("no protocol that every member supports")
	}
	cg.Protocol = proto
	for _, m := range members {
		if cg.Leader == "" {
			cg.Leader = m.id
		}
		cg.Members = append(cg.Members, ClassicMember{ID: m.id, InstanceID: m.instanceID, ClientID: m.clientID,
			ClientHost: m.clientHost, SessionTimeout: m.classic.sessionTimeout, RebalanceTimeout: m.rebalanceTimeout,
			Protocols: cloneProtocols(m.classic.protocols), Assignment: m.encodeAssignment(grouped(g.target[m.id]), im)})
	}
	return cg, nil
}

// selectProtocol is the classic group's vote: among the protocols every
// member supports, each member votes for the first it lists; the most
// votes win, ties going to the name that sorts first.
func selectProtocol(members []*member) (string, bool) {
	common := map[string]int{}
	for _, p := range members[0].classic.protocols {
		common[p.Name] = 0
	}
	for _, m := range members[1:] {
		for name := range common {
			if !slices.ContainsFunc(m.classic.protocols, func(p Protocol) bool { return p.Name == name }) {
				delete(common, name)
			}
		}
	}
	if len(common) == 0 {
		return "", false
	}
	for _, m := range members {
		for _, p := range m.classic.protocols {
			if _, ok := common[p.Name]; ok {
				common[p.Name]++
				break
			}
		}
	}
	names := make([]string, 0, len(common))
	for n := range common {
		names = append(names, n)
	}
	sort.Strings(names)
	best := names[0]
	for _, n := range names[1:] {
		if common[n] > common[best] {
			best = n
		}
	}
	return best, true
}

// encodeAssignment encodes partitions for classic member m as a
// ConsumerProtocol assignment, in the version of its subscription (at most
// 3, the newest); partitions of topics im does not know are left out.
func (m *member) encodeAssignment(tps []TopicPartitions, im *Image) []byte {
	a := kmsg.ConsumerMemberAssignment{Version: min(subscriptionVersion(m.classic.protocols[0].Metadata), 3)}
	for _, t := range tps {
		if topic, ok := im.ByID(t.Topic); ok {
			a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: topic.Name, Partitions: t.Partitions})
		}
	}
	return a.AppendTo(nil)
}

// subscriptionVersion is the version a ConsumerProtocol subscription is
// encoded in (its first two bytes).
func subscriptionVersion(meta []byte) int16 {
	if len(meta) < 2 {
		return 0
	}
	return max(int16(binary.BigEndian.Uint16(meta)), 0)
}

func cloneProtocols(ps []Protocol) []Protocol {
	out := make([]Protocol, len(ps))
	for i, p := range ps {
		out[i] = Protocol{Name: p.Name, Metadata: slices.Clone(p.Metadata)}
	}
	return out
}

// ClassicJoinInput is a JoinGroup from a member of a consumer group that
// speaks the classic protocol.
type ClassicJoinInput struct {
	Version                          int16
	MemberID                         string
	InstanceID                       *string
	ClientID, ClientHost             string
	SessionTimeout, RebalanceTimeout time.Duration
	ProtocolType                     string
	Protocols                        []Protocol
	Reason                           string
}

// ClassicJoinResult is its answer. The member is never the leader (Leader
// "" and no members): the coordinator assigns.
type ClassicJoinResult struct {
	Err          Code
	MemberID     string
	Generation   int32 // the member's epoch; -1 on error
	ProtocolType string
	ProtocolName string
}

// supported: protocolType is "consumer" and one of protocols is supported
// by every classic member but m.
func (g *Group) supported(protocolType string, protocols []Protocol, skip string) bool {
	if protocolType != ConsumerProtocolType || len(protocols) == 0 {
		return false
	}
	for _, p := range protocols {
		ok := true
		for id, m := range g.members {
			if id == skip || m.classic == nil {
				continue
			}
			if !slices.ContainsFunc(m.classic.protocols, func(q Protocol) bool { return q.Name == p.Name }) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// ClassicJoin serves a JoinGroup in a consumer group: the member joins or
// rejoins with the subscription and owned partitions of its first
// protocol's metadata, reconciles one step as a heartbeat would, and is
// answered at once with its member epoch as the generation.
func (g *Group) ClassicJoin(now time.Time, im *Image, in ClassicJoinInput) (ClassicJoinResult, Output) {
	g.invalidate()
	var out Output
	fail := func(code Code, id string) (ClassicJoinResult, Output) {
		return ClassicJoinResult{Err: code, MemberID: id, Generation: -1}, out
	}
	instance := ""
	if in.InstanceID != nil {
		instance = *in.InstanceID
	}
	id, unknown := in.MemberID, in.MemberID == ""
	if unknown {
		id = g.cfg.NewMemberID()
	}
	// existing is the member the join speaks for: the one with its id, or
	// for a static member without one, its instance's.
	existing := g.members[in.MemberID]
	if unknown && instance != "" {
		existing = g.members[g.static[instance]]
	}
	if existing == nil && g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize {
		return fail(ErrGroupMaxSizeReached, in.MemberID)
	}
	skip := ""
	if existing != nil {
		skip = existing.id
	}
	if !g.supported(in.ProtocolType, in.Protocols, skip) {
		return fail(ErrInconsistentGroupProto, in.MemberID)
	}
	if unknown && instance == "" && in.Version >= 4 {
		// KIP-394: the member must come back with this id; nothing is kept.
		return ClassicJoinResult{Err: ErrMemberIDRequired, MemberID: id, Generation: -1}, out
	}
	var sub kmsg.ConsumerMemberMetadata
	if err := sub.ReadFrom(in.Protocols[0].Metadata); err != nil {
		return fail(ErrInconsistentGroupProto, in.MemberID)
	}
	var m *member
	replacedConsumer := false // a consumer-protocol member's place taken
	switch {
	case !unknown && existing == nil && instance != "":
		return fail(ErrUnknownMemberID, in.MemberID)
	case !unknown && existing != nil:
		m = existing
		if (instance != "" || m.instanceID != "") && g.static[instance] != m.id {
			return fail(ErrFencedInstanceID, in.MemberID)
		}
		replacedConsumer = m.classic == nil // a member switching to the classic protocol
	case existing != nil:
		// A static member back with a new id takes the old one's place,
		// its assignment and target, without a new epoch.
		old := existing
		nm := *old
		nm.id = id
		nm.assigned = map[TP]int32{}
		for tp, e := range old.assigned {
			nm.assigned[tp] = e
		}
		delete(g.members, old.id)
		if t, ok := g.target[old.id]; ok {
			delete(g.target, old.id)
			g.target[id] = t
		}
		g.members[id] = &nm
		g.static[instance] = id
		m = &nm
		out.event("member joined", id, m.epoch, "replaces static member "+old.id+" (instance "+instance+"), classic protocol")
		out.Persist = true
		replacedConsumer = old.classic == nil
	default:
		// A new member; a dynamic one back with the id a KIP-394 answer
		// gave it (nothing was kept of it) is new too, as on Kafka.
		m = &member{id: id, instanceID: instance, assigned: map[TP]int32{}, state: Stable}
		g.members[id] = m
		if instance != "" {
			g.static[instance] = id
		}
		g.bump(&out, "member "+id+" joined")
		out.event("member joined", id, 0, withReason("classic protocol", in.Reason))
	}
	// The subscription of a classic member is topic names only: no regex,
	// no server assignor (the heartbeat's update applies it).
	names := sub.Topics
	if names == nil {
		names = []string{}
	}
	none := ""
	changed := g.update(m, HeartbeatInput{RebalanceTimeoutMs: int32(in.RebalanceTimeout / time.Millisecond),
		RackID: sub.Rack, ClientID: in.ClientID, ClientHost: in.ClientHost,
		SubscribedTopicNames: names, SubscribedTopicRegex: &none, ServerAssignor: &none})
	m.classic = &classicMeta{sessionTimeout: in.SessionTimeout, protocols: cloneProtocols(in.Protocols)}
	if replacedConsumer {
		g.checkDowngrade(&out)
	}
	if changed && g.targetEpoch == g.epoch {
		g.bump(&out, "member "+m.id+" changed its subscription")
	}
	g.maybeAssign(now, m.id, im, &out)
	owned := map[TP]struct{}{}
	for _, t := range sub.OwnedPartitions {
		topic, ok := im.ByName(t.Topic)
		if !ok {
			continue
		}
		for _, p := range t.Partitions {
			owned[TP{topic.ID, p}] = struct{}{}
		}
	}
	g.reconcile(m, owned, now)
	// A classic member is given no revocation deadline: it owes a
	// SyncGroup now, and a JoinGroup whenever it is told to rejoin.
	m.revokingDeadline = time.Time{}
	g.setDeadline(&m.sessionDeadline, now.Add(in.SessionTimeout))
	g.setDeadline(&m.classic.syncDeadline, now.Add(m.rebalanceTimeout))
	out.Persist = true // its protocols and timeouts are durable
	return ClassicJoinResult{MemberID: m.id, Generation: m.epoch, ProtocolType: ConsumerProtocolType, ProtocolName: in.Protocols[0].Name}, out
}

// classicMember finds the classic member a SyncGroup, Heartbeat or commit
// names.
func (g *Group) classicMember(id string, instanceID *string) (*member, Code) {
	m := g.members[id]
	if m == nil {
		return nil, ErrUnknownMemberID
	}
	if instanceID != nil && *instanceID != "" && g.static[*instanceID] != m.id {
		return nil, ErrFencedInstanceID
	}
	if m.classic == nil {
		return nil, ErrUnknownMemberID
	}
	return m, ErrNone
}

// mustRejoin: the classic member has a step of reconciliation to take that
// only a JoinGroup brings (a newer epoch, partitions to give up, or
// partitions it waits for that are free now).
func (g *Group) mustRejoin(m *member) bool {
	switch {
	case m.epoch < g.epoch, m.state == UnrevokedPartitions:
		return true
	case m.state == UnreleasedPartitions:
		for tp := range g.target[m.id] {
			if _, have := m.assigned[tp]; !have && g.ownedByOther(tp, m.id) {
				return false // still waiting for one
			}
		}
		return true
	}
	return false
}

// rebalanceInProgress tells a classic member to rejoin, giving it its
// rebalance timeout to do so (once: a later heartbeat does not extend it).
func (g *Group) rebalanceInProgress(m *member, now time.Time) Code {
	if m.classic.joinDeadline.IsZero() {
		g.setDeadline(&m.classic.joinDeadline, now.Add(m.rebalanceTimeout))
	}
	return ErrRebalanceInProgress
}

// ClassicSyncInput is a SyncGroup from a classic member of a consumer group
// (any assignments it carries are ignored: the coordinator assigns).
type ClassicSyncInput struct {
	MemberID     string
	InstanceID   *string
	Generation   int32
	ProtocolType *string
	ProtocolName *string
}

// ClassicSyncResult is its answer.
type ClassicSyncResult struct {
	Err          Code
	ProtocolType string
	ProtocolName string
	Assignment   []byte
}

// ClassicSync answers a classic member its current assignment, encoded as a
// ConsumerProtocol assignment in the version of its subscription.
func (g *Group) ClassicSync(now time.Time, im *Image, in ClassicSyncInput) (ClassicSyncResult, Output) {
	g.invalidate()
	var out Output
	m, code := g.classicMember(in.MemberID, in.InstanceID)
	switch {
	case code != ErrNone:
		return ClassicSyncResult{Err: code}, out
	case in.Generation != m.epoch:
		return ClassicSyncResult{Err: ErrIllegalGeneration}, out
	case in.ProtocolType != nil && *in.ProtocolType != ConsumerProtocolType,
		in.ProtocolName != nil && *in.ProtocolName != m.classic.protocols[0].Name:
		return ClassicSyncResult{Err: ErrInconsistentGroupProto}, out
	}
	g.setDeadline(&m.sessionDeadline, now.Add(m.classic.sessionTimeout))
	if g.epoch > m.epoch && m.state != UnrevokedPartitions {
		m.classic.syncDeadline = time.Time{}
		return ClassicSyncResult{Err: g.rebalanceInProgress(m, now)}, out
	}
	m.classic.syncDeadline = time.Time{}
	return ClassicSyncResult{ProtocolType: ConsumerProtocolType, ProtocolName: m.classic.protocols[0].Name,
		Assignment: m.encodeAssignment(assignedOf(m), im)}, out
}

// ClassicHeartbeat serves a Heartbeat from a classic member of a consumer
// group: REBALANCE_IN_PROGRESS when it has a reconciliation step to take.
func (g *Group) ClassicHeartbeat(now time.Time, memberID string, instanceID *string, generation int32) (Code, Output) {
	g.invalidate()
	var out Output
	m, code := g.classicMember(memberID, instanceID)
	switch {
	case code != ErrNone:
		return code, out
	case generation != m.epoch:
		return ErrIllegalGeneration, out
	}
	g.setDeadline(&m.sessionDeadline, now.Add(m.classic.sessionTimeout))
	if g.mustRejoin(m) {
		return g.rebalanceInProgress(m, now), out
	}
	return ErrNone, out
}

// ClassicLeaver is one member a LeaveGroup names: by member id, or by
// instance id (an admin removing a static member passes no member id).
type ClassicLeaver struct {
	MemberID   string
	InstanceID *string
}

// ClassicLeave removes the members a LeaveGroup names, of either protocol,
// with a code for each.
func (g *Group) ClassicLeave(now time.Time, im *Image, leavers []ClassicLeaver) ([]Code, Output) {
	g.invalidate()
	var out Output
	codes := make([]Code, len(leavers))
	for i, l := range leavers {
		var m *member
		if l.InstanceID != nil && *l.InstanceID != "" {
			m = g.members[g.static[*l.InstanceID]]
			switch {
			case m == nil:
				codes[i] = ErrUnknownMemberID
				continue
			case l.MemberID != "" && l.MemberID != m.id:
				codes[i] = ErrFencedInstanceID
				continue
			}
		} else if m = g.members[l.MemberID]; m == nil {
			codes[i] = ErrUnknownMemberID
			continue
		}
		g.remove(m, &out, "member left", "left the group through LeaveGroup")
	}
	if out.Persist {
		g.maybeAssign(now, "", im, &out)
	}
	return codes, out
}

// checkDowngrade sets out.Downgrade when the group is left with classic
// members only (a consumer-protocol member just went).
func (g *Group) checkDowngrade(out *Output) {
	classic, consumer := g.classicMembers()
	if classic > 0 && consumer == 0 {
		out.Downgrade = true
	}
}

func withReason(why, reason string) string {
	if reason == "" {
		return why
	}
	return why + "; client reason: " + reason
}

// ClassicMemberCount is the number of members using the classic protocol.
func (g *Group) ClassicMemberCount() int {
	n, _ := g.classicMembers()
	return n
}
