package cgroup

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Code is a Kafka error code (the wire code; 0 is success).
type Code int16

// The codes a consumer group answers with.
var (
	ErrNone                   = Code(0)
	ErrInvalidRequest         = Code(kerr.InvalidRequest.Code)
	ErrUnknownMemberID        = Code(kerr.UnknownMemberID.Code)
	ErrIllegalGeneration      = Code(kerr.IllegalGeneration.Code)
	ErrGroupMaxSizeReached    = Code(kerr.GroupMaxSizeReached.Code)
	ErrFencedInstanceID       = Code(kerr.FencedInstanceID.Code)
	ErrFencedMemberEpoch      = Code(kerr.FencedMemberEpoch.Code)
	ErrUnreleasedInstanceID   = Code(kerr.UnreleasedInstanceID.Code)
	ErrUnsupportedAssignor    = Code(kerr.UnsupportedAssignor.Code)
	ErrStaleMemberEpoch       = Code(kerr.StaleMemberEpoch.Code)
	ErrInvalidRegex           = Code(kerr.InvalidRegularExpression.Code)
	ErrUnknownServerError     = Code(kerr.UnknownServerError.Code)
	ErrUnsupportedVersion     = Code(kerr.UnsupportedVersion.Code)
	ErrNonEmptyGroup          = Code(kerr.NonEmptyGroup.Code)
	ErrGroupIDNotFound        = Code(kerr.GroupIDNotFound.Code)
	ErrInconsistentGroupProto = Code(kerr.InconsistentGroupProtocol.Code)
	ErrMemberIDRequired       = Code(kerr.MemberIDRequired.Code)
	ErrRebalanceInProgress    = Code(kerr.RebalanceInProgress.Code)
)

// String is the code's Kafka name ("NONE" for 0).
func (c Code) String() string {
	if c == 0 {
		return "NONE"
	}
	if e, ok := kerr.ErrorForCode(int16(c)).(*kerr.Error); ok {
		return e.Message
	}
	return fmt.Sprintf("ERROR_%d", c)
}

// The member epochs a heartbeat carries besides a member's own: 0 joins,
// -1 leaves, -2 leaves for now (a static member that will be back).
const (
	JoinEpoch        int32 = 0
	LeaveEpoch       int32 = -1
	StaticLeaveEpoch int32 = -2
)

// The server-side assignors (group.consumer.assignors; the first is the
// default).
const (
	AssignorUniform = "uniform"
	AssignorRange   = "range"
)

// Config holds the broker settings a consumer group obeys (Kafka's names).
type Config struct {
	// HeartbeatInterval is group.consumer.heartbeat.interval.ms (5 s).
	HeartbeatInterval time.Duration
	// SessionTimeout is group.consumer.session.timeout.ms (45 s).
	SessionTimeout time.Duration
	// MaxSize is group.consumer.max.size; 0 means unlimited.
	MaxSize int
	// Assignors is group.consumer.assignors, by name, the default first.
	Assignors []string
	// MigrationPolicy is group.consumer.migration.policy: which online
	// conversions between classic and consumer groups with members are
	// allowed: MigrationBidirectional (the default), MigrationUpgrade,
	// MigrationDowngrade, MigrationDisabled (anything else: as disabled).
	MigrationPolicy string
	// JoinLinger is how long the answer to a join waits for the next join
	// of the same group, and so on, up to ten times JoinLinger in all; the
	// members that joined meanwhile are answered together, each with its
	// final share (the coordinator's, internal/coord; kaas's own setting,
	// --group-consumer-join-linger). 0: each join is answered at once, and
	// of members joining together the first is given every partition and
	// the others theirs only once it revoked them.
	JoinLinger time.Duration
	// NewMemberID returns a fresh member id (v0 heartbeats, where the
	// coordinator names the member). Default: a random UUID in Kafka's
	// URL-safe base64 form.
	NewMemberID func() string
}

// DefaultConfig returns Apache Kafka's defaults, and kaas's JoinLinger.
func DefaultConfig() Config {
	return Config{
		JoinLinger:        DefaultJoinLinger,
		HeartbeatInterval: 5 * time.Second,
		SessionTimeout:    45 * time.Second,
		Assignors:         []string{AssignorUniform, AssignorRange},
		MigrationPolicy:   MigrationBidirectional,
		NewMemberID:       randomID,
	}
}

// WithDefaults fills what c leaves unset with Kafka's defaults.
// DefaultJoinLinger is JoinLinger's default: a few milliseconds, beside a
// heartbeat interval of seconds, and longer than the gaps between the
// joins of clients started together.
const DefaultJoinLinger = 3 * time.Millisecond

func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = d.HeartbeatInterval
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = d.SessionTimeout
	}
	if c.MaxSize < 0 {
		c.MaxSize = 0
	}
	if len(c.Assignors) == 0 {
		c.Assignors = d.Assignors
	}
	if c.NewMemberID == nil {
		c.NewMemberID = randomID
	}
	if c.MigrationPolicy == "" {
		c.MigrationPolicy = d.MigrationPolicy
	}
	return c
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// TopicID is a topic's 16-byte id.
type TopicID [16]byte

// Topic is one topic as the group sees it.
type Topic struct {
	Name       string
	ID         TopicID
	Partitions int32
}

// Image is the shell's view of the topics when an input arrives. It is
// never changed once made: a group remembers the image it last hashed by
// serial, so a topic change must come as a new Image.
type Image struct {
	byName map[string]Topic
	byID   map[TopicID]Topic
	names  []string // sorted
	serial uint64   // unique to this image (never reused, unlike an address)
}

// imageSerials numbers the images made.
var imageSerials atomic.Uint64

// NewImage indexes topics (the last of two with one name wins).
func NewImage(topics ...Topic) *Image {
	im := &Image{byName: map[string]Topic{}, byID: map[TopicID]Topic{}, serial: imageSerials.Add(1)}
	for _, t := range topics {
		im.byName[t.Name] = t
		im.byID[t.ID] = t
	}
	for n := range im.byName {
		im.names = append(im.names, n)
	}
	sort.Strings(im.names)
	return im
}

// ByName returns the topic called name.
func (im *Image) ByName(name string) (Topic, bool) {
	if im == nil {
		return Topic{}, false
	}
	t, ok := im.byName[name]
	return t, ok
}

// ByID returns the topic with id.
func (im *Image) ByID(id TopicID) (Topic, bool) {
	if im == nil {
		return Topic{}, false
	}
	t, ok := im.byID[id]
	return t, ok
}

// TP is one partition of a topic, by topic id.
type TP struct {
	Topic     TopicID
	Partition int32
}

func (a TP) less(b TP) bool {
	if c := compareID(a.Topic, b.Topic); c != 0 {
		return c < 0
	}
	return a.Partition < b.Partition
}

func compareID(a, b TopicID) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// TopicPartitions is a set of partitions of one topic, as on the wire.
type TopicPartitions struct {
	Topic      TopicID
	Partitions []int32
}

// group turns a set of partitions into TopicPartitions, sorted by topic id
// and partition.
func grouped[V any](set map[TP]V) []TopicPartitions {
	tps := make([]TP, 0, len(set))
	for tp := range set {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b TP) int {
		if a.less(b) {
			return -1
		}
		if b.less(a) {
			return 1
		}
		return 0
	})
	var out []TopicPartitions
	for _, tp := range tps {
		if n := len(out); n == 0 || out[n-1].Topic != tp.Topic {
			out = append(out, TopicPartitions{Topic: tp.Topic})
		}
		last := &out[len(out)-1]
		last.Partitions = append(last.Partitions, tp.Partition)
	}
	return out
}

// flat turns TopicPartitions into a set.
func flat(tps []TopicPartitions) map[TP]struct{} {
	out := map[TP]struct{}{}
	for _, t := range tps {
		for _, p := range t.Partitions {
			out[TP{t.Topic, p}] = struct{}{}
		}
	}
	return out
}
