package offsets

import (
	"encoding/json"
	"fmt"
)

// Membership is the durable state of a classic group's membership, kept in
// the group's file beside its offsets and written under the same fence
// (docs/offsets.md, "File format"; docs/group.md, "Durable state"). The
// store keeps it as given; the group state machine validates it when it
// restores it. When the group became Empty is the retention section's
// emptySince.
type Membership struct {
	ProtocolType string
	Protocol     *string // the protocol of Generation; nil: none chosen
	Generation   int32
	Leader       string
	// Rebalancing: written between generations; the next owner starts a
	// join phase instead of continuing a settled generation.
	Rebalancing bool
	Members     []Member // in join order
	// Consumer is the durable state of a KIP-848 consumer group (the JSON of
	// a cgroup.Snapshot, docs/cgroup.md), nil for a classic group. Such a
	// group has ProtocolType "consumer", Generation = its group epoch and no
	// Members here.
	Consumer json.RawMessage
}

// Member is one member of a Membership.
type Member struct {
	ID                 string
	InstanceID         string // "" for a dynamic member
	ClientID           string
	ClientHost         string
	SessionTimeoutMs   int64
	RebalanceTimeoutMs int64
	Protocols          []MemberProtocol
	Assignment         []byte
}

// MemberProtocol is one (name, metadata) pair a member supports, in its
// order of preference.
type MemberProtocol struct {
	Name     string
	Metadata []byte
}

// membershipDoc is the "membership" section of a group file:
//
//	"membership":{"protocolType":"consumer","protocol":"range","generation":5,
//	  "leader":"c-1-…","rebalancing":true,
//	  "members":[{"memberId":"c-1-…","groupInstanceId":"i-1","clientId":"c-1",
//	    "clientHost":"/10.0.0.1","sessionTimeoutMs":10000,"rebalanceTimeoutMs":60000,
//	    "protocols":[{"name":"range","metadata":"<base64>"}],"assignment":"<base64>"}]}
//
// protocol is absent when none is chosen; leader, rebalancing,
// groupInstanceId, metadata and assignment are absent when empty/false;
// bytes are standard base64. The section is absent for a group that never
// had members (or was deleted).
type membershipDoc struct {
	ProtocolType string      `json:"protocolType"`
	Protocol     *string     `json:"protocol,omitempty"`
	Generation   int32       `json:"generation"`
	Leader       string      `json:"leader,omitempty"`
	Rebalancing  bool        `json:"rebalancing,omitempty"`
	Members      []memberDoc `json:"members"`
	// ConsumerGroup: Membership.Consumer, absent for a classic group.
	ConsumerGroup json.RawMessage `json:"consumerGroup,omitempty"`
}

type memberDoc struct {
	MemberID           string        `json:"memberId"`
	GroupInstanceID    string        `json:"groupInstanceId,omitempty"`
	ClientID           string        `json:"clientId"`
	ClientHost         string        `json:"clientHost"`
	SessionTimeoutMs   int64         `json:"sessionTimeoutMs"`
	RebalanceTimeoutMs int64         `json:"rebalanceTimeoutMs"`
	Protocols          []protocolDoc `json:"protocols"`
	Assignment         []byte        `json:"assignment,omitempty"`
}

type protocolDoc struct {
	Name     string `json:"name"`
	Metadata []byte `json:"metadata,omitempty"`
}

// decodeMembership reads the membership section. A section that does not
// have the shape above is an error; the caller ignores the section then and
// keeps the offsets.
func decodeMembership(raw json.RawMessage) (*Membership, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var doc membershipDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("membership section: %w", err)
	}
	m := &Membership{ProtocolType: doc.ProtocolType, Protocol: doc.Protocol, Generation: doc.Generation,
		Leader: doc.Leader, Rebalancing: doc.Rebalancing, Members: make([]Member, 0, len(doc.Members))}
	if len(doc.ConsumerGroup) > 0 && string(doc.ConsumerGroup) != "null" {
		m.Consumer = doc.ConsumerGroup
	}
	for _, d := range doc.Members {
		mb := Member{ID: d.MemberID, InstanceID: d.GroupInstanceID, ClientID: d.ClientID, ClientHost: d.ClientHost,
			SessionTimeoutMs: d.SessionTimeoutMs, RebalanceTimeoutMs: d.RebalanceTimeoutMs, Assignment: nonEmpty(d.Assignment)}
		for _, p := range d.Protocols {
			mb.Protocols = append(mb.Protocols, MemberProtocol{Name: p.Name, Metadata: nonEmpty(p.Metadata)})
		}
		m.Members = append(m.Members, mb)
	}
	return m, nil
}

// appendMembership appends the membership section (with its leading comma).
// encoding/json writes it: field order is fixed and strings are escaped the
// same way at every write, so equal states give equal bytes. A consumer
// group's state, last in the section, is appended as it is: encoding/json
// would scan its tens of kilobytes again to compact them, at every write of
// a group whose members are reconciling. It is compact JSON already (the
// encoder's output, or the bytes this section held when it was read), and
// the bytes are the same either way.
func appendMembership(buf []byte, m *Membership) []byte {
	doc := membershipDoc{ProtocolType: m.ProtocolType, Protocol: m.Protocol, Generation: m.Generation, Leader: m.Leader,
		Rebalancing: m.Rebalancing, Members: make([]memberDoc, 0, len(m.Members))}
	for _, mb := range m.Members {
		d := memberDoc{MemberID: mb.ID, GroupInstanceID: mb.InstanceID, ClientID: mb.ClientID, ClientHost: mb.ClientHost,
			SessionTimeoutMs: mb.SessionTimeoutMs, RebalanceTimeoutMs: mb.RebalanceTimeoutMs, Assignment: mb.Assignment,
			Protocols: make([]protocolDoc, 0, len(mb.Protocols))}
		for _, p := range mb.Protocols {
			d.Protocols = append(d.Protocols, protocolDoc{Name: p.Name, Metadata: p.Metadata})
		}
		doc.Members = append(doc.Members, d)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("offsets: encode membership: %v", err)) // only strings, ints and bytes: cannot fail
	}
	buf = append(buf, `,"membership":`...)
	if len(m.Consumer) == 0 {
		return append(buf, b...)
	}
	buf = append(buf, b[:len(b)-1]...) // without its closing brace
	buf = append(buf, `,"consumerGroup":`...)
	buf = append(buf, m.Consumer...)
	return append(buf, '}')
}

func cloneMembership(m *Membership) *Membership {
	if m == nil {
		return nil
	}
	c := *m
	c.Members = append([]Member(nil), m.Members...)
	c.Consumer = append(json.RawMessage(nil), m.Consumer...)
	return &c
}

// nonEmpty maps empty bytes to nil: the encoder omits both alike.
func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
