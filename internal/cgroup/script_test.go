package cgroup

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	topicA = TopicID{0xa}
	topicB = TopicID{0xb}
	topicC = TopicID{0xc}
	t0     = time.Unix(1_700_000_000, 0)
)

func testImage() *Image {
	return NewImage(Topic{"a", topicA, 6}, Topic{"b", topicB, 3}, Topic{"__consumer_offsets", TopicID{0xf}, 50})
}

// fixture drives one group with deterministic member ids.
type fixture struct {
	t   *testing.T
	g   *Group
	im  *Image
	now time.Time
	ids int
}

func newFixture(t *testing.T, tune ...func(*Config)) *fixture {
	f := &fixture{t: t, im: testImage(), now: t0}
	cfg := DefaultConfig()
	cfg.NewMemberID = func() string { f.ids++; return fmt.Sprintf("m%d", f.ids) }
	for _, fn := range tune {
		fn(&cfg)
	}
	f.g = New("g", cfg)
	return f
}

func ptr[T any](v T) *T { return &v }

func (f *fixture) joinIn(id string, topics ...string) HeartbeatInput {
	return HeartbeatInput{Version: 1, MemberID: id, MemberEpoch: 0, RebalanceTimeoutMs: 10_000,
		SubscribedTopicNames: topics, OwnedSent: true, OwnedTopicPartitions: []TopicPartitions{}}
}

func (f *fixture) hb(in HeartbeatInput) HeartbeatResult {
	f.t.Helper()
	res, _ := f.g.Heartbeat(f.now, f.im, in)
	f.checkDisjoint()
	return res
}

func (f *fixture) ok(in HeartbeatInput) HeartbeatResult {
	f.t.Helper()
	res := f.hb(in)
	if res.Err != ErrNone {
		f.t.Fatalf("heartbeat %+v: %v %s", in, res.Err, res.ErrMessage)
	}
	return res
}

// steady is a heartbeat of a member that owns exactly owned.
func steady(id string, epoch int32, owned []TopicPartitions) HeartbeatInput {
	if owned == nil {
		owned = []TopicPartitions{}
	}
	return HeartbeatInput{Version: 1, MemberID: id, MemberEpoch: epoch, RebalanceTimeoutMs: -1, OwnedSent: true, OwnedTopicPartitions: owned}
}

func (f *fixture) checkDisjoint() {
	f.t.Helper()
	seen := map[TP]string{}
	for id, m := range f.g.members {
		for tp := range m.assigned {
			if o, dup := seen[tp]; dup {
				f.t.Fatalf("partition %v owned by %s and %s", tp, o, id)
			}
			seen[tp] = id
		}
		for tp := range m.revoking {
			if o, dup := seen[tp]; dup {
				f.t.Fatalf("partition %v owned by %s and %s (revoking)", tp, o, id)
			}
			seen[tp] = id
		}
	}
}

func count(tps []TopicPartitions) int {
	n := 0
	for _, t := range tps {
		n += len(t.Partitions)
	}
	return n
}

// TestFirstMemberGetsEveryPartitionAtEpochTwo: Kafka 4.4 starts a consumer
// group at epoch 1, so its first member's join is epoch 2 (the reference
// cluster answers so, TestGroupAnswersMatchKafka); kaas started at 0 and
// answered 1.
func TestFirstMemberGetsEveryPartitionAtEpochTwo(t *testing.T) {
	f := newFixture(t)
	res := f.ok(f.joinIn("m-a", "a", "b"))
	if res.MemberEpoch != 2 || !res.HasAssignment || count(res.Assignment) != 9 || res.HeartbeatIntervalMs != 5000 {
		t.Fatalf("join: %+v", res)
	}
	if f.g.State() != "Stable" || f.g.Epoch() != 2 || f.g.TargetEpoch() != 2 {
		t.Fatalf("group %s epoch %d target %d", f.g.State(), f.g.Epoch(), f.g.TargetEpoch())
	}
	// A plain heartbeat that changes nothing: no assignment, nothing to persist.
	res, out := f.g.Heartbeat(f.now, f.im, HeartbeatInput{Version: 1, MemberID: "m-a", MemberEpoch: 2, RebalanceTimeoutMs: -1})
	if res.Err != ErrNone || res.HasAssignment || out.Persist {
		t.Fatalf("steady heartbeat: %+v persist=%v", res, out.Persist)
	}
}

func TestV0JoinGetsAServerMemberID(t *testing.T) {
	f := newFixture(t)
	in := f.joinIn("", "a")
	in.Version = 0
	res := f.ok(in)
	if res.MemberID != "m1" {
		t.Fatalf("member id %q", res.MemberID)
	}
	in.Version = 1
	if res := f.hb(in); res.Err != ErrInvalidRequest {
		t.Fatalf("v1 without a member id: %v", res.Err)
	}
}

// TestSecondMemberWaitsForTheFirstToRevoke walks the incremental handover:
// the newcomer is at the new epoch with nothing (its partitions are still
// the first member's), the first member keeps its epoch until it says it
// let go, then both are Stable and the partitions are split.
func TestSecondMemberWaitsForTheFirstToRevoke(t *testing.T) {
	f := newFixture(t)
	r1 := f.ok(f.joinIn("m-a", "a"))
	r2 := f.ok(f.joinIn("m-b", "a"))
	if r2.MemberEpoch != 3 || count(r2.Assignment) != 0 {
		t.Fatalf("newcomer: %+v", r2)
	}
	if st := f.g.members["m-b"].state; st != UnreleasedPartitions {
		t.Fatalf("newcomer state %v", st)
	}
	if f.g.State() != "Reconciling" {
		t.Fatalf("group %s", f.g.State())
	}
	r1 = f.ok(steady("m-a", 2, r1.Assignment))
	if r1.MemberEpoch != 2 || !r1.HasAssignment || count(r1.Assignment) != 3 {
		t.Fatalf("first member asked to revoke: %+v", r1)
	}
	if st := f.g.members["m-a"].state; st != UnrevokedPartitions {
		t.Fatalf("first member state %v", st)
	}
	// Not yet revoked (still reports six): nothing moves.
	full := []TopicPartitions{{topicA, []int32{0, 1, 2, 3, 4, 5}}}
	if r := f.ok(steady("m-a", 2, full)); r.MemberEpoch != 2 {
		t.Fatalf("still revoking: %+v", r)
	}
	if r := f.ok(steady("m-b", 3, nil)); count(r.Assignment) != 0 {
		t.Fatalf("newcomer got partitions still owned: %+v", r)
	}
	r1 = f.ok(steady("m-a", 2, r1.Assignment))
	if r1.MemberEpoch != 3 {
		t.Fatalf("after revoking: %+v", r1)
	}
	r2 = f.ok(steady("m-b", 3, nil))
	if !r2.HasAssignment || count(r2.Assignment) != 3 {
		t.Fatalf("newcomer after release: %+v", r2)
	}
	if f.g.State() != "Stable" {
		t.Fatalf("group %s", f.g.State())
	}
}

func TestLeavingFreesPartitionsForTheOthers(t *testing.T) {
	f := newFixture(t)
	r1 := f.ok(f.joinIn("m-a", "a"))
	r2 := f.ok(f.joinIn("m-b", "a"))
	r1 = f.ok(steady("m-a", 2, r1.Assignment))
	r1 = f.ok(steady("m-a", 2, r1.Assignment))
	r2 = f.ok(steady("m-b", r2.MemberEpoch, nil))
	if count(r2.Assignment) != 3 {
		t.Fatalf("setup: %+v", r2)
	}
	res := f.ok(HeartbeatInput{Version: 1, MemberID: "m-b", MemberEpoch: LeaveEpoch, RebalanceTimeoutMs: -1})
	if res.MemberEpoch != LeaveEpoch {
		t.Fatalf("leave answer %+v", res)
	}
	r1 = f.ok(steady("m-a", r1.MemberEpoch, r1.Assignment))
	if count(r1.Assignment) != 6 || r1.MemberEpoch != 4 {
		t.Fatalf("after the other left: %+v", r1)
	}
	if res := f.hb(steady("m-b", 3, nil)); res.Err != ErrUnknownMemberID {
		t.Fatalf("heartbeat after leaving: %v", res.Err)
	}
}

func TestStaticMemberComesBackWithItsPartitions(t *testing.T) {
	f := newFixture(t)
	in := f.joinIn("m-a", "a")
	in.InstanceID = ptr("i-1")
	r1 := f.ok(in)
	in2 := f.joinIn("m-b", "a")
	in2.InstanceID = ptr("i-2")
	f.ok(in2)
	r1 = f.ok(withInstance(steady("m-a", 2, r1.Assignment), "i-1")) // asked to revoke half
	kept := r1.Assignment
	f.ok(withInstance(steady("m-a", 2, kept), "i-1"))
	epoch := f.g.Epoch()
	// Leaves for now, then the same instance returns under a new member id.
	if res := f.ok(withInstance(HeartbeatInput{Version: 1, MemberID: "m-a", MemberEpoch: StaticLeaveEpoch, RebalanceTimeoutMs: -1}, "i-1")); res.MemberEpoch != StaticLeaveEpoch {
		t.Fatalf("static leave %+v", res)
	}
	other := f.joinIn("m-x", "a")
	other.InstanceID = ptr("i-2")
	if res := f.hb(other); res.Err != ErrUnreleasedInstanceID {
		t.Fatalf("instance i-2 taken while its member is active: %v", res.Err)
	}
	back := f.joinIn("m-c", "a")
	back.InstanceID = ptr("i-1")
	res := f.ok(back)
	if !slices.EqualFunc(res.Assignment, kept, func(a, b TopicPartitions) bool { return a.Topic == b.Topic && slices.Equal(a.Partitions, b.Partitions) }) {
		t.Fatalf("returning static member got %v, had %v", res.Assignment, kept)
	}
	if f.g.Epoch() != epoch {
		t.Fatalf("group epoch moved %d -> %d on a static return", epoch, f.g.Epoch())
	}
	if res.MemberEpoch != f.g.TargetEpoch() {
		t.Fatalf("returned at epoch %d, target %d", res.MemberEpoch, f.g.TargetEpoch())
	}
	// The old member id is gone; a -2 with the wrong member id is fenced.
	if res := f.hb(withInstance(HeartbeatInput{Version: 1, MemberID: "m-a", MemberEpoch: StaticLeaveEpoch, RebalanceTimeoutMs: -1}, "i-1")); res.Err != ErrFencedInstanceID {
		t.Fatalf("old member id leaving: %v", res.Err)
	}
}

// TestLeaveAnswerHasNoHeartbeatInterval: a member leaving (-1) or leaving
// for now (-2) is told no heartbeat interval, as Kafka answers (0); kaas
// answered the group's 5 s.
func TestLeaveAnswerHasNoHeartbeatInterval(t *testing.T) {
	f := newFixture(t)
	f.ok(f.joinIn("m-a", "a"))
	in := f.joinIn("m-b", "a")
	in.InstanceID = ptr("i-b")
	f.ok(in)
	for _, leave := range []HeartbeatInput{
		{Version: 1, MemberID: "m-a", MemberEpoch: LeaveEpoch, RebalanceTimeoutMs: -1},
		withInstance(HeartbeatInput{Version: 1, MemberID: "m-b", MemberEpoch: StaticLeaveEpoch, RebalanceTimeoutMs: -1}, "i-b"),
	} {
		if res := f.ok(leave); res.MemberEpoch != leave.MemberEpoch || res.HeartbeatIntervalMs != 0 {
			t.Fatalf("leave with epoch %d: %+v, want heartbeat interval 0", leave.MemberEpoch, res)
		}
	}
}

// TestStaticMemberWhoseInstanceWasTakenIsFenced: a static member
// heartbeating after another member took its instance over is
// FENCED_INSTANCE_ID, as on Kafka (it finds a static member by its
// instance); kaas looked its member id up first and answered
// UNKNOWN_MEMBER_ID. An instance nobody holds is UNKNOWN_MEMBER_ID.
func TestStaticMemberWhoseInstanceWasTakenIsFenced(t *testing.T) {
	f := newFixture(t)
	in := f.joinIn("m-a", "a")
	in.InstanceID = ptr("i-1")
	r := f.ok(in)
	f.ok(withInstance(HeartbeatInput{Version: 1, MemberID: "m-a", MemberEpoch: StaticLeaveEpoch, RebalanceTimeoutMs: -1}, "i-1"))
	back := f.joinIn("m-b", "a")
	back.InstanceID = ptr("i-1")
	f.ok(back)
	if res := f.hb(withInstance(steady("m-a", r.MemberEpoch, r.Assignment), "i-1")); res.Err != ErrFencedInstanceID {
		t.Fatalf("the replaced member heartbeats: %v %s, want FENCED_INSTANCE_ID", res.Err, res.ErrMessage)
	}
	if res := f.hb(withInstance(steady("m-a", r.MemberEpoch, r.Assignment), "i-2")); res.Err != ErrUnknownMemberID {
		t.Fatalf("an instance nobody holds: %v, want UNKNOWN_MEMBER_ID", res.Err)
	}
}

func withInstance(in HeartbeatInput, id string) HeartbeatInput {
	in.InstanceID = ptr(id)
	return in
}

// TestUnknownGroupAndRejoin: as Apache Kafka 4.4 answers (checked against
// the reference cluster): a heartbeat or leave for a group that never had a
// member is GROUP_ID_NOT_FOUND; a member rejoining with epoch 0 under its id
// keeps its epoch and assignment, and gets the whole assignment back.
func TestUnknownGroupAndRejoin(t *testing.T) {
	f := newFixture(t)
	if res := f.hb(steady("m-a", 4, nil)); res.Err != ErrGroupIDNotFound || res.ErrMessage != "Consumer group g not found." {
		t.Fatalf("heartbeat to an unknown group: %v %q", res.Err, res.ErrMessage)
	}
	if res := f.hb(HeartbeatInput{Version: 1, MemberID: "m-a", MemberEpoch: LeaveEpoch, RebalanceTimeoutMs: -1}); res.Err != ErrGroupIDNotFound || res.ErrMessage != "Group g not found." {
		t.Fatalf("leave of an unknown group: %v %q", res.Err, res.ErrMessage)
	}
	r := f.ok(f.joinIn("m-a", "a"))
	epoch := f.g.Epoch()
	again := f.ok(f.joinIn("m-a", "a"))
	if again.MemberEpoch != r.MemberEpoch || f.g.Epoch() != epoch || count(again.Assignment) != 6 {
		t.Fatalf("rejoin under the same id: %+v (group epoch %d -> %d)", again, epoch, f.g.Epoch())
	}
	if res := f.hb(HeartbeatInput{Version: 1, MemberID: "m-b", MemberEpoch: 3, RebalanceTimeoutMs: -1}); res.Err != ErrUnknownMemberID {
		t.Fatalf("unknown member of a known group: %v", res.Err)
	}
}

func TestEpochFencing(t *testing.T) {
	f := newFixture(t)
	r1 := f.ok(f.joinIn("m-a", "a"))
	if res := f.hb(steady("m-a", 7, r1.Assignment)); res.Err != ErrFencedMemberEpoch || !strings.Contains(res.ErrMessage, "greater member epoch (7)") {
		t.Fatalf("future epoch: %v %q", res.Err, res.ErrMessage)
	}
	r2 := f.ok(f.joinIn("m-b", "a"))
	_ = r2
	r1b := f.ok(steady("m-a", 2, r1.Assignment)) // asked to revoke, epoch 2
	f.ok(steady("m-a", 2, r1b.Assignment))       // revoked: epoch 3
	// The answer that moved m-a to epoch 2 was lost: it retries with epoch 2
	// owning a subset of what it has: accepted.
	if res := f.hb(steady("m-a", 2, r1b.Assignment)); res.Err != ErrNone || res.MemberEpoch != 3 {
		t.Fatalf("previous epoch with owned subset: %+v", res)
	}
	// The previous epoch while owning a partition it no longer has: fenced.
	if res := f.hb(steady("m-a", 2, r1.Assignment)); res.Err != ErrFencedMemberEpoch {
		t.Fatalf("previous epoch owning revoked partitions: %v", res.Err)
	}
	if res := f.hb(steady("nobody", 2, nil)); res.Err != ErrUnknownMemberID {
		t.Fatalf("unknown member: %v", res.Err)
	}
}

func TestHeartbeatValidation(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name string
		in   HeartbeatInput
		want Code
	}{
		{"no rebalance timeout on join", HeartbeatInput{Version: 1, MemberID: "x", RebalanceTimeoutMs: -1, SubscribedTopicNames: []string{"a"}, OwnedSent: true}, ErrInvalidRequest},
		{"owned partitions on join", HeartbeatInput{Version: 1, MemberID: "x", RebalanceTimeoutMs: 1, SubscribedTopicNames: []string{"a"}, OwnedSent: true, OwnedTopicPartitions: []TopicPartitions{{topicA, []int32{0}}}}, ErrInvalidRequest},
		{"no subscription on join", HeartbeatInput{Version: 1, MemberID: "x", RebalanceTimeoutMs: 1, OwnedSent: true}, ErrInvalidRequest},
		{"bad epoch", HeartbeatInput{Version: 1, MemberID: "x", MemberEpoch: -3}, ErrInvalidRequest},
		{"static leave without instance", HeartbeatInput{Version: 1, MemberID: "x", MemberEpoch: -2}, ErrInvalidRequest},
		{"bad regex", HeartbeatInput{Version: 1, MemberID: "x", RebalanceTimeoutMs: 1, SubscribedTopicRegex: ptr("a("), OwnedSent: true}, ErrInvalidRegex},
		{"unknown assignor", HeartbeatInput{Version: 1, MemberID: "x", RebalanceTimeoutMs: 1, SubscribedTopicNames: []string{"a"}, ServerAssignor: ptr("cooperative"), OwnedSent: true}, ErrUnsupportedAssignor},
	}
	for _, c := range cases {
		if res := f.hb(c.in); res.Err != c.want || res.ErrMessage == "" {
			t.Errorf("%s: %v %q, want %v", c.name, res.Err, res.ErrMessage, c.want)
		}
	}
	if !f.g.Empty() {
		t.Fatal("a refused heartbeat created a member")
	}
}

func TestSessionExpiryAndRevocationTimeout(t *testing.T) {
	f := newFixture(t)
	r1 := f.ok(f.joinIn("m-a", "a"))
	f.now = f.now.Add(time.Second)
	f.ok(f.joinIn("m-b", "a"))
	f.ok(steady("m-a", 2, r1.Assignment)) // asked to revoke; never does
	if d := f.g.NextDeadline(); !d.Equal(f.now.Add(10 * time.Second)) {
		t.Fatalf("next deadline %v, want the revocation deadline %v", d, f.now.Add(10*time.Second))
	}
	f.now = f.now.Add(10 * time.Second)
	out := f.g.Expire(f.now, f.im)
	if f.g.members["m-a"] != nil || !out.Persist || out.Events[0].What != "revocation timed out" && out.Events[1].What != "revocation timed out" {
		t.Fatalf("member that kept its partitions past the rebalance timeout: still there, events %+v", out.Events)
	}
	r2 := f.ok(steady("m-b", f.g.members["m-b"].epoch, nil))
	if count(r2.Assignment) != 6 {
		t.Fatalf("after the fence: %+v", r2)
	}
	f.now = f.now.Add(45 * time.Second)
	f.g.Expire(f.now, f.im)
	if !f.g.Empty() || f.g.State() != "Empty" {
		t.Fatalf("session expiry left %d members", f.g.Members())
	}
}

func TestRegexSubscriptionFollowsTopics(t *testing.T) {
	f := newFixture(t)
	in := f.joinIn("m-a")
	in.SubscribedTopicNames, in.SubscribedTopicRegex = nil, ptr("[a-c]|__.*")
	r := f.ok(in)
	if count(r.Assignment) != 9 {
		t.Fatalf("regex assignment %v (internal topics must not match)", r.Assignment)
	}
	epoch := f.g.Epoch()
	f.im = NewImage(Topic{"a", topicA, 6}, Topic{"b", topicB, 3}, Topic{"c", topicC, 2}, Topic{"__consumer_offsets", TopicID{0xf}, 50})
	r = f.ok(steady("m-a", r.MemberEpoch, r.Assignment))
	if count(r.Assignment) != 11 || f.g.Epoch() != epoch+1 {
		t.Fatalf("after topic c was created: %v, epoch %d -> %d", r.Assignment, epoch, f.g.Epoch())
	}
}

func TestRangeAssignorChosenByTheMembers(t *testing.T) {
	f := newFixture(t)
	in := f.joinIn("m-a", "a")
	in.ServerAssignor = ptr(AssignorRange)
	f.ok(in)
	in = f.joinIn("m-b", "a")
	in.ServerAssignor = ptr(AssignorRange)
	f.ok(in)
	if d := f.g.Describe(); d.Assignor != AssignorRange || len(d.Members) != 2 {
		t.Fatalf("describe %+v", d)
	}
	want := map[string][]int32{"m-a": {0, 1, 2}, "m-b": {3, 4, 5}}
	for id, w := range want {
		got := grouped(f.g.target[id])
		if len(got) != 1 || !slices.Equal(got[0].Partitions, w) {
			t.Errorf("range target of %s: %v, want %v", id, got, w)
		}
	}
}

func TestGroupMaxSize(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxSize = 1 })
	f.ok(f.joinIn("m-a", "a"))
	if res := f.hb(f.joinIn("m-b", "a")); res.Err != ErrGroupMaxSizeReached {
		t.Fatalf("second member of a group of at most one: %v", res.Err)
	}
}

// TestCommitEpochs: KIP-1251's rule, assignment epoch <= commit epoch <=
// member epoch, per partition; a newer epoch and strangers fail the request.
func TestCommitEpochs(t *testing.T) {
	f := newFixture(t)
	r1 := f.ok(f.joinIn("m-a", "a"))
	f.ok(f.joinIn("m-b", "a"))
	r1 = f.ok(steady("m-a", 2, r1.Assignment))
	f.ok(steady("m-a", 2, r1.Assignment)) // m-a at epoch 2 with partitions assigned at epoch 2
	r2 := f.ok(steady("m-b", 3, nil))     // m-b at epoch 2 with partitions assigned at epoch 3
	var p0, p5 TP                         // one partition of m-a's, one of m-b's
	for tp := range f.g.members["m-a"].assigned {
		p0 = tp
	}
	for tp := range f.g.members["m-b"].assigned {
		p5 = tp
	}
	if len(f.g.members["m-a"].assigned) != 3 || count(r2.Assignment) != 3 {
		t.Fatalf("setup: %v / %v", f.g.members["m-a"].assigned, r2.Assignment)
	}
	if code, bad := f.g.CheckCommit(CommitCheck{MemberID: "m-a", MemberEpoch: 3, Version: 9}, []TP{p0}); code != ErrNone || bad != nil {
		t.Fatalf("current epoch: %v %v", code, bad)
	}
	if code, bad := f.g.CheckCommit(CommitCheck{MemberID: "m-a", MemberEpoch: 2, Version: 9}, []TP{p0, p5}); code != ErrNone || bad[p0] != ErrNone || bad[p5] != ErrStaleMemberEpoch {
		t.Fatalf("older epoch: %v %v (p0 assigned at 1: ok; p5 is not m-a's: stale)", code, bad)
	}
	if _, bad := f.g.CheckCommit(CommitCheck{MemberID: "m-b", MemberEpoch: 2, Version: 9}, []TP{p5}); bad[p5] != ErrStaleMemberEpoch {
		t.Fatalf("epoch older than the assignment: %v", bad)
	}
	if code, _ := f.g.CheckCommit(CommitCheck{MemberID: "m-a", MemberEpoch: 4, Version: 9}, []TP{p0}); code != ErrStaleMemberEpoch {
		t.Fatalf("newer epoch: %v", code)
	}
	if code, _ := f.g.CheckCommit(CommitCheck{MemberID: "m-a", MemberEpoch: 4, Transactional: true}, []TP{p0}); code != ErrIllegalGeneration {
		t.Fatalf("transactional newer epoch: %v", code)
	}
	if code, _ := f.g.CheckCommit(CommitCheck{MemberID: "m-a", MemberEpoch: 3, Version: 8}, []TP{p0}); code != ErrUnsupportedVersion {
		t.Fatalf("v8 from a consumer-protocol member: %v", code)
	}
	if code, _ := f.g.CheckCommit(CommitCheck{MemberID: "zz", MemberEpoch: 3, Version: 9}, []TP{p0}); code != ErrUnknownMemberID {
		t.Fatalf("stranger: %v", code)
	}
	if code, _ := f.g.CheckCommit(CommitCheck{MemberEpoch: -1, Version: 9}, []TP{p0}); code != ErrUnknownMemberID {
		t.Fatalf("admin commit to a group with members: %v", code)
	}
}

// TestFetchEpochs: OffsetFetch v9 passes the member at its current epoch
// and a request that names no member; a stranger, an empty id and any
// other epoch fail.
func TestFetchEpochs(t *testing.T) {
	f := newFixture(t)
	r := f.ok(f.joinIn("m-a", "a"))
	f.ok(steady("m-a", r.MemberEpoch, r.Assignment))
	id := func(s string) *string { return &s }
	epoch := f.g.members["m-a"].epoch
	for _, c := range []struct {
		name   string
		member *string
		epoch  int32
		want   Code
	}{
		{"current epoch", id("m-a"), epoch, ErrNone},
		{"no member (admin)", nil, -1, ErrNone},
		{"older epoch", id("m-a"), epoch - 1, ErrStaleMemberEpoch},
		{"newer epoch", id("m-a"), epoch + 1, ErrStaleMemberEpoch},
		{"stranger", id("zz"), epoch, ErrUnknownMemberID},
		{"empty id", id(""), -1, ErrUnknownMemberID},
		{"epoch without a member", nil, epoch, ErrUnknownMemberID},
	} {
		if got := f.g.CheckFetch(c.member, c.epoch); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSnapshotRestoreContinuesTheEpochs(t *testing.T) {
	f := newFixture(t)
	r1 := f.ok(f.joinIn("m-a", "a", "b"))
	f.ok(f.joinIn("m-b", "a"))
	r1 = f.ok(steady("m-a", 2, r1.Assignment)) // mid-revocation
	snap := f.g.Snapshot()
	g2 := New("g", DefaultConfig())
	if err := g2.Restore(f.now, snap); err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(f.g.members, g2.members, func(a, b *member) bool {
		return a.epoch == b.epoch && a.state == b.state && maps.Equal(a.assigned, b.assigned) && maps.Equal(a.revoking, b.revoking)
	}) || g2.Epoch() != f.g.Epoch() || g2.TargetEpoch() != f.g.TargetEpoch() {
		t.Fatalf("restored group differs: %+v vs %+v", g2.Snapshot(), snap)
	}
	f.g = g2
	r1 = f.ok(steady("m-a", 2, r1.Assignment))
	if r1.MemberEpoch != 3 {
		t.Fatalf("revocation finished at the new owner: %+v", r1)
	}
}

// TestRegexMatchesWholeNamesAndAddsToNames: a regex matches a topic when it
// matches its whole name, whichever branch does (Go's leftmost-first match
// of "a|ab" stops at "a"); names and regex together are the subscription.
func TestRegexMatchesWholeNamesAndAddsToNames(t *testing.T) {
	f := newFixture(t)
	f.im = NewImage(Topic{"a", topicA, 1}, Topic{"ab", topicB, 2}, Topic{"c", topicC, 4})
	in := f.joinIn("m-a", "c")
	in.SubscribedTopicRegex = ptr("a|ab")
	r := f.ok(in)
	if count(r.Assignment) != 7 {
		t.Fatalf("names c and regex a|ab: %v, want all 7 partitions", r.Assignment)
	}
}

// TestSecondRevocationMovesTheEpochOn: a member that revoked what it was
// asked to and must now revoke more moves one epoch on (Kafka's
// CurrentAssignmentBuilder), so that a late commit with its older epoch
// for the partition it gave up is refused; and each revocation gets the
// whole rebalance timeout.
func TestSecondRevocationMovesTheEpochOn(t *testing.T) {
	f := newFixture(t)
	r1 := f.ok(f.joinIn("m-a", "a"))                        // epoch 2, all six
	f.ok(f.joinIn("m-b", "a"))                              // target 3: m-a must give up three
	r1 = f.ok(steady("m-a", r1.MemberEpoch, r1.Assignment)) // revoking, epoch 2
	if f.g.members["m-a"].state != UnrevokedPartitions {
		t.Fatal("setup: m-a not revoking")
	}
	f.now = f.now.Add(8 * time.Second)
	f.ok(f.joinIn("m-c", "a")) // target 4: m-a must give up one more
	gaveUp := map[TP]bool{}
	for tp := range f.g.members["m-a"].revoking {
		gaveUp[tp] = true
	}
	r1 = f.ok(steady("m-a", 2, r1.Assignment)) // revoked the first three
	m := f.g.members["m-a"]
	if m.state != UnrevokedPartitions || m.epoch != 3 {
		t.Fatalf("after the first revocation: %v at epoch %d, want revoking again at epoch 3", m.state, m.epoch)
	}
	if !m.revokingDeadline.Equal(f.now.Add(10 * time.Second)) {
		t.Fatalf("second revocation deadline %v, want a whole rebalance timeout from now", m.revokingDeadline)
	}
	for tp := range gaveUp {
		if _, bad := f.g.CheckCommit(CommitCheck{MemberID: "m-a", MemberEpoch: 2, Version: 9}, []TP{tp}); bad[tp] != ErrStaleMemberEpoch {
			t.Fatalf("late commit of given-up %v with epoch 2: %v", tp, bad)
		}
	}
}

// TestPreviousEpochOnlyBelowTheCurrent: the previous-epoch grace is for a
// member behind its epoch; a static member back from -2 with its old epoch
// is fenced.
func TestPreviousEpochOnlyBelowTheCurrent(t *testing.T) {
	f := newFixture(t)
	in := f.joinIn("m-a", "a")
	in.InstanceID = ptr("i-1")
	r := f.ok(in)
	if res := f.ok(withInstance(HeartbeatInput{Version: 1, MemberID: "m-a", MemberEpoch: StaticLeaveEpoch, RebalanceTimeoutMs: -1}, "i-1")); res.MemberEpoch != StaticLeaveEpoch {
		t.Fatalf("static leave: %+v", res)
	}
	if res := f.hb(withInstance(steady("m-a", r.MemberEpoch, r.Assignment), "i-1")); res.Err != ErrFencedMemberEpoch {
		t.Fatalf("a late heartbeat with the epoch before the static leave: %v", res.Err)
	}
}

// TestTransactionalCommitWithoutGroupMetadata: TxnOffsetCommit v0-2, or a
// producer given only the group id, is not checked (Kafka does the same);
// any commit with a negative epoch passes while the group is Empty.
func TestTransactionalCommitWithoutGroupMetadata(t *testing.T) {
	f := newFixture(t)
	f.ok(f.joinIn("m-a", "a"))
	tp := TP{topicA, 0}
	if code, bad := f.g.CheckCommit(CommitCheck{MemberEpoch: -1, Transactional: true}, []TP{tp}); code != ErrNone || bad != nil {
		t.Fatalf("transactional commit without metadata: %v %v", code, bad)
	}
	f.ok(HeartbeatInput{Version: 1, MemberID: "m-a", MemberEpoch: LeaveEpoch, RebalanceTimeoutMs: -1})
	if code, _ := f.g.CheckCommit(CommitCheck{MemberID: "gone", MemberEpoch: -1, Version: 9}, []TP{tp}); code != ErrNone {
		t.Fatalf("commit with epoch -1 to an Empty group: %v", code)
	}
}

// TestGroupTimeoutsApplyAtTheNextHeartbeat: a group's own session timeout
// and heartbeat interval (its GROUP configs) replace the broker's at the
// next heartbeat: the interval the member is told and the deadline that
// heartbeat sets; cleared, the broker's apply again.
func TestGroupTimeoutsApplyAtTheNextHeartbeat(t *testing.T) {
	f := newFixture(t)
	r := f.ok(f.joinIn("m-a", "a"))
	if r.HeartbeatIntervalMs != 5000 {
		t.Fatalf("interval %d, want the broker's 5000", r.HeartbeatIntervalMs)
	}
	f.g.SetTimeouts(50*time.Second, 6*time.Second)
	r = f.ok(steady("m-a", r.MemberEpoch, r.Assignment))
	if r.HeartbeatIntervalMs != 6000 {
		t.Fatalf("interval %d, want the group's 6000", r.HeartbeatIntervalMs)
	}
	f.now = f.now.Add(46 * time.Second) // past the broker's 45 s, within the group's 50 s
	f.g.Expire(f.now, f.im)
	if f.g.Members() != 1 {
		t.Fatal("the member expired at the broker's session timeout, not the group's")
	}
	f.g.SetTimeouts(0, 0)
	r = f.ok(steady("m-a", r.MemberEpoch, r.Assignment))
	if r.HeartbeatIntervalMs != 5000 {
		t.Fatalf("interval %d after the group's configs were cleared, want 5000", r.HeartbeatIntervalMs)
	}
	f.now = f.now.Add(45 * time.Second)
	f.g.Expire(f.now, f.im)
	if !f.g.Empty() {
		t.Fatal("the member outlived the broker's session timeout once the group's was cleared")
	}
}

// TestAssignorsIgnoreRacksAsKafkaDoes: the members' racks are kept (and
// described) but do not change the target assignment, with either
// assignor. Apache Kafka 4.4.0's built-in uniform and range assignors read
// no rack either (docs/cgroup.md, "Assignors").
func TestAssignorsIgnoreRacksAsKafkaDoes(t *testing.T) {
	for _, assignor := range []string{"uniform", "range"} {
		targets := map[bool]map[string]map[TP]struct{}{}
		for _, racks := range []bool{false, true} {
			f := newFixture(t)
			for i, id := range []string{"m-a", "m-b", "m-c"} {
				in := f.joinIn(id, "a", "b")
				in.ServerAssignor = ptr(assignor)
				if racks {
					in.RackID = ptr([]string{"r1", "r2", "r1"}[i])
				}
				f.ok(in)
			}
			if racks {
				if d := f.g.Describe(); len(d.Members) != 3 || d.Members[0].RackID == "" {
					t.Fatalf("%s: racks not kept: %+v", assignor, d.Members)
				}
			}
			n := 0
			for _, tps := range f.g.target {
				n += len(tps)
			}
			if len(f.g.target) != 3 || n != 9 {
				t.Fatalf("%s: target %v, want the 9 partitions of a and b over 3 members", assignor, f.g.target)
			}
			targets[racks] = f.g.target
		}
		if !reflect.DeepEqual(targets[false], targets[true]) {
			t.Errorf("%s: with racks %v, without %v", assignor, targets[true], targets[false])
		}
	}
}

// settled joins ids to topic a and heartbeats each as its client would,
// owning what it was last told, until the group is Stable; it returns
// each member's last answer.
func (f *fixture) settled(ids ...string) map[string]HeartbeatResult {
	f.t.Helper()
	last := map[string]HeartbeatResult{}
	for _, id := range ids {
		last[id] = f.ok(f.joinIn(id, "a"))
	}
	for range 10 {
		for _, id := range ids {
			r := last[id]
			r2 := f.ok(steady(id, r.MemberEpoch, r.Assignment))
			if !r2.HasAssignment {
				r2.Assignment = r.Assignment
			}
			last[id] = r2
		}
		if f.g.State() == "Stable" {
			return last
		}
	}
	f.t.Fatalf("group not Stable: %s", f.g.State())
	return nil
}

// TestJoinTakesFromTheMemberDueSoonest: when a member joins a balanced
// group and the assignor may take its share from any of several members,
// it takes it from the member heard from longest ago, whose next heartbeat
// is due soonest, so that the newcomer waits the least for the partition
// to be released; a member not heard from within two heartbeat intervals
// is taken from last. The assignor took from the owner of the first
// partition, whenever that member would next heartbeat.
func TestJoinTakesFromTheMemberDueSoonest(t *testing.T) {
	for _, tc := range []struct {
		name string
		// ago is how long before the join each member was last heard
		// from, by its place among the members sorted so that the owner
		// of a-0 is first; want is the place of the member that must
		// give a partition up.
		ago  [3]time.Duration
		want int
	}{
		{"heard from longest ago", [3]time.Duration{time.Second, 3 * time.Second, 2 * time.Second}, 1},
		{"overdue member last", [3]time.Duration{11 * time.Second, 2 * time.Second, 4 * time.Second}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			last := f.settled("m-a", "m-b", "m-c")
			ids := []string{"m-a", "m-b", "m-c"}
			owner := func(p int32) string {
				for id, tps := range f.g.target {
					if _, ok := tps[TP{topicA, p}]; ok {
						return id
					}
				}
				return ""
			}
			first := owner(0)
			slices.SortStableFunc(ids, func(a, b string) int {
				if a == first {
					return -1
				}
				if b == first {
					return 1
				}
				return 0
			})
			// Heard from in order of ago, longest first, then the join.
			start := f.now.Add(20 * time.Second)
			order := []int{0, 1, 2}
			slices.SortFunc(order, func(a, b int) int { return int(tc.ago[b] - tc.ago[a]) })
			join := start.Add(tc.ago[order[0]])
			for _, k := range order {
				id := ids[k]
				f.now = join.Add(-tc.ago[k])
				r := last[id]
				f.ok(steady(id, r.MemberEpoch, r.Assignment))
			}
			f.now = join
			f.ok(f.joinIn("m-d", "a"))
			for k, id := range ids {
				got := len(f.g.target[id])
				want := 2
				if k == tc.want {
					want = 1
				}
				if got != want {
					t.Errorf("%s (heard from %s before the join) keeps %d partitions, want %d; target %v", id, tc.ago[k], got, want, f.g.target)
				}
			}
			if n := len(f.g.target["m-d"]); n != 1 {
				t.Errorf("the newcomer's share is %d partitions, want 1", n)
			}
		})
	}
}
