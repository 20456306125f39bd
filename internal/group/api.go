package group

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Code is a Kafka error code the group answers with: the wire code (kerr;
// a test checks they agree). ErrNone is success.
type Code int16

// String is the code's Kafka name ("NONE" for 0).
func (c Code) String() string { return ErrName(c) }

// The codes the group answers with.
const (
	ErrNone                      Code = 0
	ErrCoordinatorNotAvailable   Code = 15
	ErrNotCoordinator            Code = 16
	ErrIllegalGeneration         Code = 22
	ErrInconsistentGroupProtocol Code = 23
	ErrInvalidGroupID            Code = 24
	ErrUnknownMemberID           Code = 25
	ErrInvalidSessionTimeout     Code = 26
	ErrRebalanceInProgress       Code = 27
	ErrNonEmptyGroup             Code = 68
	ErrMemberIDRequired          Code = 79
	ErrGroupMaxSizeReached       Code = 81
	ErrFencedInstanceID          Code = 82
)

// ErrName returns the Kafka name of an error code ("NONE" for 0).
func ErrName(code Code) string {
	if code == 0 {
		return "NONE"
	}
	if e := kerr.ErrorForCode(int16(code)); e != nil {
		if ke, ok := e.(*kerr.Error); ok {
			return ke.Message
		}
	}
	return fmt.Sprintf("ERROR_%d", code)
}

// Config holds the broker settings a group obeys. Use DefaultConfig and
// override; New fills only zero MinSessionTimeout, MaxSessionTimeout,
// NewMemberJoinTimeout and NewMemberID. InitialRebalanceDelay is taken as
// given: 0 means no initial delay.
type Config struct {
	// InitialRebalanceDelay is group.initial.rebalance.delay.ms (Kafka 3000ms).
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound a JoinGroup's session
	// timeout (group.min/max.session.timeout.ms: 6s and 30m).
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// MaxSize is group.max.size; 0 means unlimited.
	MaxSize int
	// NewMemberJoinTimeout bounds how long a brand-new member's first
	// JoinGroup may stay parked (Kafka's fixed 5 minutes).
	NewMemberJoinTimeout time.Duration
	// NewMemberID returns a fresh member id for a member whose client id
	// (dynamic members) or group instance id (static members) is prefix.
	// Default: prefix + "-" + a random UUID, as Kafka does. Tests inject a
	// deterministic generator. It must never return an id in use.
	NewMemberID func(prefix string) string
}

// DefaultConfig returns Apache Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		InitialRebalanceDelay: 3 * time.Second,
		MinSessionTimeout:     6 * time.Second,
		MaxSessionTimeout:     30 * time.Minute,
		NewMemberJoinTimeout:  5 * time.Minute,
		NewMemberID:           randomMemberID,
	}
}

// CheckTimeouts is JoinGroup's check of its timeouts, for a classic group
// and for a classic member of a consumer group alike: a session timeout
// outside group.min/max.session.timeout.ms is INVALID_SESSION_TIMEOUT, and
// a join without a rebalance timeout (v0) gets its session timeout, as on
// Kafka.
func (c Config) CheckTimeouts(in *JoinInput) Code {
	if in.SessionTimeout < c.MinSessionTimeout || in.SessionTimeout > c.MaxSessionTimeout {
		return ErrInvalidSessionTimeout
	}
	if in.RebalanceTimeout <= 0 {
		in.RebalanceTimeout = in.SessionTimeout
	}
	return ErrNone
}

// WithDefaults fills what c leaves unset with Kafka's defaults (New does it).
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.MinSessionTimeout <= 0 {
		c.MinSessionTimeout = d.MinSessionTimeout
	}
	if c.MaxSessionTimeout <= 0 {
		c.MaxSessionTimeout = d.MaxSessionTimeout
	}
	if c.NewMemberJoinTimeout <= 0 {
		c.NewMemberJoinTimeout = d.NewMemberJoinTimeout
	}
	if c.InitialRebalanceDelay < 0 {
		c.InitialRebalanceDelay = 0
	}
	if c.MaxSize < 0 {
		c.MaxSize = 0
	}
	if c.NewMemberID == nil {
		c.NewMemberID = randomMemberID
	}
	return c
}

func randomMemberID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return prefix + "-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Protocol is one (name, metadata) pair of a JoinGroup, in the member's order
// of preference.
type Protocol struct {
	Name     string
	Metadata []byte
}

// JoinInput is a JoinGroup request (versions 0–9).
type JoinInput struct {
	Ref     any   // opaque; returned with the response
	Version int16 // v4+: dynamic members need a member id (KIP-394); v9+: SkipAssignment (KIP-814)
	// MemberID is "" for a member that has none yet.
	MemberID string
	// InstanceID is the group.instance.id of a static member (v5+), nil for
	// a dynamic member.
	InstanceID   *string
	ProtocolType string
	Protocols    []Protocol
	// SessionTimeout is checked against the Config bounds.
	SessionTimeout time.Duration
	// RebalanceTimeout is v1+; if zero (v0) the session timeout is used.
	RebalanceTimeout time.Duration
	ClientID         string
	ClientHost       string
	Reason           string // v8+ (KIP-800), logged only
}

// JoinMember is one entry of the member list a leader receives.
type JoinMember struct {
	MemberID   string
	InstanceID *string
	Metadata   []byte // the member's metadata for the chosen protocol
}

// JoinResult is a JoinGroup response.
type JoinResult struct {
	Ref          any
	Err          Code
	MemberID     string
	Generation   int32   // -1 on error
	ProtocolType *string // v7+; nil on error
	Protocol     *string // nil on error
	Leader       string
	// SkipAssignment (v9+, KIP-814): the static leader rejoined a Stable
	// group; it must not compute a new assignment.
	SkipAssignment bool
	Members        []JoinMember // leader only; nil for followers
}

// Assignment is one member's assignment from the leader's SyncGroup.
type Assignment struct {
	MemberID   string
	Assignment []byte
}

// SyncInput is a SyncGroup request (versions 0–5).
type SyncInput struct {
	Ref        any
	MemberID   string
	InstanceID *string
	Generation int32
	// ProtocolType and Protocol are v5+ (KIP-559); nil when absent.
	ProtocolType *string
	Protocol     *string
	Assignments  []Assignment // meaningful from the leader only
}

// SyncResult is a SyncGroup response.
type SyncResult struct {
	Ref          any
	Err          Code
	ProtocolType *string // v5+; nil on error
	Protocol     *string // v5+; nil on error
	Assignment   []byte
}

// HeartbeatInput is a Heartbeat request (versions 0–4).
type HeartbeatInput struct {
	Ref        any
	MemberID   string
	InstanceID *string
	Generation int32
}

// HeartbeatResult is a Heartbeat response.
type HeartbeatResult struct {
	Ref any
	Err Code
}

// LeaveMember is one member leaving. v0–2 carry exactly one with a member id
// only; v3+ may name a static member by InstanceID with MemberID "" (admin
// removal); Reason is v5+ (KIP-800).
type LeaveMember struct {
	MemberID   string
	InstanceID *string
	Reason     string
}

// LeaveInput is a LeaveGroup request (versions 0–5).
type LeaveInput struct {
	Ref     any
	Version int16
	Members []LeaveMember
}

// LeaveMemberResult is the per-member result of LeaveGroup v3+.
type LeaveMemberResult struct {
	MemberID   string
	InstanceID *string
	Err        Code
}

// LeaveResult is a LeaveGroup response. For v0–2 Err is the single member's
// error and Members should not be encoded.
type LeaveResult struct {
	Ref     any
	Err     Code
	Members []LeaveMemberResult
}

// CommitCheck is the group part of an OffsetCommit or TxnOffsetCommit.
// Generation is -1 and MemberID "" for a simple (non-member) commit.
type CommitCheck struct {
	MemberID      string
	InstanceID    *string
	Generation    int32
	Transactional bool // TxnOffsetCommit: no state check, simple commits allowed in any state
}

// TimerKind names a timer slot.
type TimerKind int8

const (
	// TimerSession: a member's session (or, for a brand-new member parked in
	// its first JoinGroup, NewMemberJoinTimeout). Member is set.
	TimerSession TimerKind = iota
	// TimerPendingMember: a KIP-394 pending member id expires if it does not
	// rejoin within its session timeout. Member is set.
	TimerPendingMember
	// TimerRebalanceDelay: one window of the initial rebalance delay.
	TimerRebalanceDelay
	// TimerRebalanceTimeout: the join phase ends at the latest then.
	TimerRebalanceTimeout
	// TimerSyncTimeout: members that got their JoinGroup answer but sent no
	// SyncGroup within the rebalance timeout are removed.
	TimerSyncTimeout
)

var timerNames = [...]string{
	TimerSession:          "Session",
	TimerPendingMember:    "PendingMember",
	TimerRebalanceDelay:   "RebalanceDelay",
	TimerRebalanceTimeout: "RebalanceTimeout",
	TimerSyncTimeout:      "SyncTimeout",
}

func (k TimerKind) String() string {
	if k >= 0 && int(k) < len(timerNames) {
		return timerNames[k]
	}
	return fmt.Sprintf("TimerKind(%d)", int8(k))
}

// TimerKey names a timer slot of the group. At most one timer is armed per
// slot. Member is "" for group-wide kinds.
type TimerKey struct {
	Kind   TimerKind
	Member string
}

func (k TimerKey) String() string {
	if k.Member == "" {
		return k.Kind.String()
	}
	return k.Kind.String() + "[" + k.Member + "]"
}

// TimerArm asks the shell to (re)arm slot Key to fire at At, replacing any
// timer in that slot. When it fires the shell calls Group.Timer(now, Key, Seq).
type TimerArm struct {
	Key TimerKey
	Seq uint64
	At  time.Time
}

// Output is what one input produced. The shell sends every response (in any
// order), applies Cancel then Arm, and logs Events.
type Output struct {
	Joins      []JoinResult
	Syncs      []SyncResult
	Heartbeats []HeartbeatResult
	Leaves     []LeaveResult
	// Cancel lists slots to stop; Arm lists slots to (re)arm. A slot appears
	// at most once in the two lists together.
	Cancel []TimerKey
	Arm    []TimerArm
	Events []Event
	// Persist: the group's durable state (Snapshot) changed: a generation
	// completed, a static member was replaced, members left or were
	// removed, or the group became Empty. The shell writes the Snapshot
	// durably before it sends the JoinGroup, SyncGroup and LeaveGroup
	// answers of this Output. Never set by Heartbeat, CheckCommit or
	// Unload.
	Persist bool
}

// EventKind classifies a log event.
type EventKind int8

const (
	EventStateChange    EventKind = iota // From → To
	EventRebalance                       // a join phase starts; Reason says why (KIP-800 reasons included)
	EventGeneration                      // a join phase ended: Gen, Member = leader, Reason = protocol
	EventMemberAdded                     // Member (Instance) joined
	EventMemberRemoved                   // Member left; Reason says why
	EventMemberReplaced                  // static Instance: OldMember fenced, Member replaces it
	EventPendingAdded                    // KIP-394 member id handed out
	EventPendingRemoved                  // pending member id expired or left
	EventAssignment                      // the leader's assignment was stored; Gen
	EventRestored                        // the group was loaded from a Snapshot into state To
	EventBug                             // an internal inconsistency, logged instead of panicking
)

var eventNames = [...]string{
	EventStateChange:    "state change",
	EventRebalance:      "preparing rebalance",
	EventGeneration:     "join phase complete",
	EventMemberAdded:    "member added",
	EventMemberRemoved:  "member removed",
	EventMemberReplaced: "static member replaced",
	EventPendingAdded:   "pending member added",
	EventPendingRemoved: "pending member removed",
	EventAssignment:     "assignment stored",
	EventRestored:       "group loaded",
	EventBug:            "group state machine bug",
}

func (k EventKind) String() string {
	if k >= 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", int8(k))
}

// Event is a structured log record. Fields not meaningful for Kind are zero.
type Event struct {
	Kind      EventKind
	Group     string
	Member    string
	Instance  string
	OldMember string
	Reason    string
	From, To  State
	Gen       int32
}

// Attrs returns the event as slog attributes with the house keys, for
// logger.LogAttrs(ctx, level, ev.Kind.String(), ev.Attrs()...).
func (e Event) Attrs() []slog.Attr {
	a := []slog.Attr{slog.String("group", e.Group), slog.Int("gen", int(e.Gen))}
	if e.Member != "" {
		a = append(a, slog.String("member", e.Member))
	}
	if e.Instance != "" {
		a = append(a, slog.String("instance", e.Instance))
	}
	if e.OldMember != "" {
		a = append(a, slog.String("old_member", e.OldMember))
	}
	if e.Kind == EventStateChange || e.Kind == EventRestored {
		if e.Kind == EventStateChange {
			a = append(a, slog.String("from", e.From.String()))
		}
		a = append(a, slog.String("to", e.To.String()))
	}
	if e.Reason != "" {
		a = append(a, slog.String("reason", e.Reason))
	}
	return a
}

// MemberDescription is one member in a DescribeGroups answer.
type MemberDescription struct {
	MemberID   string
	InstanceID *string
	ClientID   string
	ClientHost string
	Metadata   []byte // chosen protocol's metadata; only while Stable
	Assignment []byte // only while Stable
}

// Description is a DescribeGroups answer for the group.
type Description struct {
	State        string
	ProtocolType string
	Protocol     string // "" unless Stable, as Kafka reports
	Members      []MemberDescription
}
