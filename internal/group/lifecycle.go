package group

import (
	"slices"
	"time"
)

// Unload is called when this broker lost the group (its coordinator moved):
// every parked JoinGroup and SyncGroup is answered NOT_COORDINATOR, every
// timer is cancelled, members are dropped and the group is Dead. Later
// inputs are answered NOT_COORDINATOR. Unloading a Dead group does nothing.
func (g *Group) Unload() Output {
	g.begin(time.Time{})
	if g.state != Dead {
		g.kill(ErrNotCoordinator, "coordinator unloaded the group")
	}
	return g.end()
}

// Migrate ends the state machine of a group that became a consumer group
// (online upgrade, KIP-848): parked JoinGroup and SyncGroup requests are
// answered REBALANCE_IN_PROGRESS, as Kafka answers them, so that their
// members join again, served by the consumer group.
func (g *Group) Migrate() Output {
	g.begin(time.Time{})
	if g.state != Dead {
		g.kill(ErrRebalanceInProgress, "converted to a consumer group")
	}
	return g.end()
}

// Delete is DeleteGroups: allowed only for an Empty group (else
// NON_EMPTY_GROUP), which becomes Dead (pending member ids are dropped).
// A Dead group answers NOT_COORDINATOR, as it does to every input.
func (g *Group) Delete() (Code, Output) {
	g.begin(time.Time{})
	var code Code
	switch g.state {
	case Dead:
		code = ErrNotCoordinator
	case Empty:
		g.kill(ErrNotCoordinator, "group deleted")
	default:
		code = ErrNonEmptyGroup
	}
	return code, g.end()
}

func (g *Group) kill(code Code, reason string) {
	for _, id := range g.order {
		m := g.members[id]
		g.failJoins(m, id, code)
		g.failSyncs(m, code)
	}
	for k := range g.timers {
		g.cancel(k)
	}
	g.members = map[string]*member{}
	g.order = nil
	clear(g.static)
	clear(g.pending)
	clear(g.pendingSync)
	g.leader = ""
	g.initialDelay, g.newMemberAdded, g.completeNow = false, false, false
	g.transition(Dead)
	g.event(Event{Kind: EventMemberRemoved, Reason: reason + ": all members dropped"})
}

// Describe is the group's DescribeGroups entry. As in Kafka, the protocol,
// member metadata and assignments are reported only while Stable.
func (g *Group) Describe() Description {
	d := Description{State: g.state.String(), ProtocolType: g.protocolType}
	stable := g.state == Stable
	if stable {
		d.Protocol = g.protocol
	}
	for _, id := range g.order {
		m := g.members[id]
		md := MemberDescription{MemberID: id, InstanceID: m.instancePtr(), ClientID: m.clientID, ClientHost: m.clientHost}
		if stable {
			md.Metadata = m.metadataFor(g.protocol)
			md.Assignment = m.assignment
		}
		d.Members = append(d.Members, md)
	}
	return d
}

// Topics returns the topics the current generation subscribes to, decoded
// from the members' consumer protocol metadata (kmsg.ConsumerMemberMetadata).
// known is false unless the protocol type is "consumer", the group has
// members, and every member's metadata decoded (Kafka's subscribedTopics).
func (g *Group) Topics() (topics []string, known bool) {
	if len(g.members) == 0 {
		return nil, false
	}
	return slices.Clone(g.subscribed), g.subKnown
}

// IsSubscribed reports whether an active consumer group subscribes to topic:
// OffsetDelete answers GROUP_SUBSCRIBED_TO_TOPIC for such a topic.
func (g *Group) IsSubscribed(topic string) bool {
	if len(g.members) == 0 || !g.subKnown {
		return false
	}
	_, found := slices.BinarySearch(g.subscribed, topic)
	return found
}
