package coord

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/offsets"
)

// Regression tests of issue 14: a coordinator move is invisible to the
// members of a group (durable group state).

func protos() []group.Protocol { return []group.Protocol{{Name: "range", Metadata: []byte{0, 1}}} }

func joinWait(t *testing.T, ch <-chan group.JoinResult) group.JoinResult {
	t.Helper()
	select {
	case jr := <-ch:
		return jr
	case <-time.After(10 * time.Second):
		t.Fatal("JoinGroup not answered")
	}
	return group.JoinResult{}
}

func syncWait(t *testing.T, ch <-chan group.SyncResult) group.SyncResult {
	t.Helper()
	select {
	case sr := <-ch:
		return sr
	case <-time.After(10 * time.Second):
		t.Fatal("SyncGroup not answered")
	}
	return group.SyncResult{}
}

// formed is a group of two members formed on one coordinator: a dynamic
// member that went through the KIP-394 handshake (the leader) and a static
// member (instance "i2").
type formed struct {
	leader, static string
	gen            int32
}

func formGroup(t *testing.T, c *Coordinator, g string) formed {
	t.Helper()
	join := func(id string, inst *string) (<-chan group.JoinResult, error) {
		return c.Join(g, group.JoinInput{Version: 5, MemberID: id, InstanceID: inst, ProtocolType: "consumer",
			Protocols: protos(), SessionTimeout: 30 * time.Second, RebalanceTimeout: 30 * time.Second, ClientID: "client", ClientHost: "/127.0.0.1"})
	}
	ch, err := join("", nil)
	if err != nil {
		t.Fatal(err)
	}
	jr := joinWait(t, ch)
	if jr.Err != group.ErrMemberIDRequired {
		t.Fatalf("first join: %s", jr.Err)
	}
	ch, _ = join(jr.MemberID, nil)
	if jr = joinWait(t, ch); jr.Err != 0 || jr.Generation != 1 {
		t.Fatalf("join: %+v", jr)
	}
	leader := jr.MemberID
	if sr := syncWait(t, mustSync(t, c, g, leader, nil, 1, []group.Assignment{{MemberID: leader, Assignment: []byte("all")}})); sr.Err != 0 {
		t.Fatalf("sync: %s", sr.Err)
	}
	// The static member joins; the leader rejoins: generation 2.
	i2 := "i2"
	sch, err := join("", &i2)
	if err != nil {
		t.Fatal(err)
	}
	if hb, _ := c.Heartbeat(g, group.HeartbeatInput{MemberID: leader, Generation: 1}); hb.Err != group.ErrRebalanceInProgress {
		t.Fatalf("heartbeat during the rebalance: %s", hb.Err)
	}
	lch, _ := join(leader, nil)
	lr, sr := joinWait(t, lch), joinWait(t, sch)
	if lr.Err != 0 || sr.Err != 0 || lr.Generation != 2 || lr.Leader != leader {
		t.Fatalf("generation 2: %+v %+v", lr, sr)
	}
	fch := mustSync(t, c, g, sr.MemberID, &i2, 2, nil)
	lsr := syncWait(t, mustSync(t, c, g, leader, nil, 2, []group.Assignment{
		{MemberID: leader, Assignment: []byte("p0")}, {MemberID: sr.MemberID, Assignment: []byte("p1")}}))
	if fsr := syncWait(t, fch); lsr.Err != 0 || fsr.Err != 0 || string(fsr.Assignment) != "p1" {
		t.Fatalf("sync generation 2: %+v %+v", lsr, fsr)
	}
	return formed{leader: leader, static: sr.MemberID, gen: 2}
}

func mustSync(t *testing.T, c *Coordinator, g, id string, inst *string, gen int32, as []group.Assignment) <-chan group.SyncResult {
	t.Helper()
	ch, err := c.Sync(g, group.SyncInput{MemberID: id, InstanceID: inst, Generation: gen, Assignments: as})
	if err != nil {
		t.Fatalf("sync %s: %v", id, err)
	}
	return ch
}

// continuesAt checks that the members of f carry on at c with their ids
// and generation: heartbeats, a member commit, SyncGroup and a follower's
// JoinGroup are all accepted.
func continuesAt(t *testing.T, c *Coordinator, g string, f formed) {
	t.Helper()
	i2 := "i2"
	for _, m := range []struct {
		id   string
		inst *string
	}{{f.leader, nil}, {f.static, &i2}} {
		hb, err := c.Heartbeat(g, group.HeartbeatInput{MemberID: m.id, InstanceID: m.inst, Generation: f.gen})
		if err != nil || hb.Err != 0 {
			t.Fatalf("heartbeat of %s after the move: %v %s", m.id, err, hb.Err)
		}
	}
	wait, _, err := c.Commit(CommitInput{Group: g, Generation: f.gen, MemberID: f.static, InstanceID: &i2,
		Offsets: map[offsets.TP]offsets.Offset{tp(0): {Offset: 5, LeaderEpoch: -1, ExpireTimestamp: -1}}})
	if err != nil {
		t.Fatalf("member commit after the move: %v", err)
	}
	if err := wait(context.Background()); err != nil {
		t.Fatalf("member commit after the move: %v", err)
	}
	if sr := syncWait(t, mustSync(t, c, g, f.static, &i2, f.gen, nil)); sr.Err != 0 || string(sr.Assignment) != "p1" {
		t.Fatalf("sync after the move: %+v", sr)
	}
	ch, err := c.Join(g, group.JoinInput{Version: 5, MemberID: f.static, InstanceID: &i2, ProtocolType: "consumer",
		Protocols: protos(), SessionTimeout: 30 * time.Second, RebalanceTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if jr := joinWait(t, ch); jr.Err != 0 || jr.Generation != f.gen {
		t.Fatalf("follower rejoin after the move: %+v", jr)
	}
}

func TestMembersGetUnknownMemberAfterAnAssignmentChange(t *testing.T) {
	dir := t.TempDir()
	g := "moving"
	v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
	v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
	a, b := newOwner(t, dir, "kaas-0", v1), newOwner(t, dir, "kaas-1", v1)
	f := formGroup(t, a, g)
	a.Apply(v1, v2)
	b.Apply(v1, v2)
	continuesAt(t, b, g, f)
}

func TestMembersGetUnknownMemberAfterTheirCoordinatorIsKilled(t *testing.T) {
	dir := t.TempDir()
	g := groupOn("kaas-0", "killed")
	a := newOwner(t, dir, "kaas-0", assignment(1, 3, nil, nil))
	f := formGroup(t, a, g)
	// kaas-0 is killed: it applies nothing more. Its successor starts with
	// nothing in memory.
	next := assignment(2, 3, []string{"kaas-0"}, nil)
	owner, _ := NewTable(next).Group(g)
	b := newOwner(t, dir, owner.ID, next)
	continuesAt(t, b, g, f)
}

// countMembershipWrites counts the membership writes c queues for g.
func countMembershipWrites(c *Coordinator, g string) *atomic.Int32 {
	var n atomic.Int32
	c.beforeWrite = func(op, group string) {
		if op == "membership" && group == g {
			n.Add(1)
		}
	}
	return &n
}

func TestHeartbeatsAndCommitsDoNotRewriteMembership(t *testing.T) {
	dir := t.TempDir()
	g := "quiet"
	a := newOwner(t, dir, "kaas-0", assignment(1, 1, nil, nil))
	writes := countMembershipWrites(a, g)
	f := formGroup(t, a, g)
	// Generation 1 completed, a static member joined... : what formGroup
	// did is written (at least the two completed generations).
	if n := writes.Load(); n < 2 {
		t.Fatalf("%d membership writes for two completed generations", n)
	}
	writes.Store(0)
	i2 := "i2"
	for range 20 {
		if hb, err := a.Heartbeat(g, group.HeartbeatInput{MemberID: f.static, InstanceID: &i2, Generation: f.gen}); err != nil || hb.Err != 0 {
			t.Fatal(err, hb.Err)
		}
		wait, _, err := a.Commit(CommitInput{Group: g, Generation: f.gen, MemberID: f.leader,
			Offsets: map[offsets.TP]offsets.Offset{tp(0): {Offset: 1, LeaderEpoch: -1, ExpireTimestamp: -1}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes.Load(); n != 0 {
		t.Fatalf("heartbeats and commits caused %d membership writes", n)
	}
	// A leave is written before it is answered.
	lr, err := a.Leave(g, group.LeaveInput{Version: 3, Members: []group.LeaveMember{{MemberID: f.leader}}})
	if err != nil || lr.Err != 0 || writes.Load() != 1 {
		t.Fatalf("leave: %v %s, %d writes", err, lr.Err, writes.Load())
	}
	if mem := fileMembership(t, dir, g); len(mem.Members) != 1 || mem.Members[0].ID != f.static {
		t.Fatalf("membership on disk after the leave: %+v", mem)
	}
}

func fileMembership(t *testing.T, dir, g string) *offsets.Membership {
	t.Helper()
	st, err := offsets.Open(offsets.Options{Dir: offsetsDir(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mem, _, err := st.GroupState(g, offsets.Fence{})
	if err != nil {
		t.Fatal(err)
	}
	if mem == nil {
		t.Fatalf("no membership in %s's file", g)
	}
	return mem
}

func TestStaleOwnerCannotWriteMembership(t *testing.T) {
	dir := t.TempDir()
	g := "fenced"
	v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
	v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
	a, b := newOwner(t, dir, "kaas-0", v1), newOwner(t, dir, "kaas-1", v1)
	f := formGroup(t, a, g)
	// Only kaas-1 applies v2 (kaas-0 is slow to see it) and writes the
	// group's file under v2's stamp.
	b.Apply(v1, v2)
	continuesAt(t, b, g, f)
	before := fileMembership(t, dir, g)
	// The replaced owner still believes it coordinates the group; a leave
	// there asks for a membership write, which the fence refuses.
	lr, err := a.Leave(g, group.LeaveInput{Version: 3, Members: []group.LeaveMember{{MemberID: f.leader}}})
	if err != nil || lr.Err != group.ErrNotCoordinator {
		t.Fatalf("the replaced owner's leave: %v %s, want NOT_COORDINATOR after its membership write was fenced", err, lr.Err)
	}
	after := fileMembership(t, dir, g)
	if len(after.Members) != 2 || after.Generation != before.Generation {
		t.Fatalf("membership changed by the replaced owner: %+v", after)
	}
}

func TestStaticMemberReplacementIsPersisted(t *testing.T) {
	dir := t.TempDir()
	g := "static"
	v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
	v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
	a, b := newOwner(t, dir, "kaas-0", v1), newOwner(t, dir, "kaas-1", v1)
	f := formGroup(t, a, g)
	// The static member restarts: a JoinGroup with its instance id and no
	// member id replaces its member id without a rebalance.
	i2 := "i2"
	ch, err := a.Join(g, group.JoinInput{Version: 5, InstanceID: &i2, ProtocolType: "consumer", Protocols: protos(),
		SessionTimeout: 30 * time.Second, RebalanceTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	jr := joinWait(t, ch)
	if jr.Err != 0 || jr.MemberID == f.static || jr.Generation != f.gen {
		t.Fatalf("static rejoin: %+v", jr)
	}
	mem := fileMembership(t, dir, g)
	found := false
	for _, m := range mem.Members {
		found = found || (m.InstanceID == "i2" && m.ID == jr.MemberID)
	}
	if !found {
		t.Fatalf("replacement not on disk when the JoinGroup was answered: %+v", mem.Members)
	}
	// After a move the new id is the member, the old one is fenced.
	a.Apply(v1, v2)
	b.Apply(v1, v2)
	if hb, _ := b.Heartbeat(g, group.HeartbeatInput{MemberID: jr.MemberID, InstanceID: &i2, Generation: f.gen}); hb.Err != 0 {
		t.Fatalf("replacement's heartbeat after the move: %s", hb.Err)
	}
	if hb, _ := b.Heartbeat(g, group.HeartbeatInput{MemberID: f.static, InstanceID: &i2, Generation: f.gen}); hb.Err != group.ErrFencedInstanceID {
		t.Fatalf("replaced member id after the move: %s", hb.Err)
	}
}

func TestIdleGroupEvictedAndLoadedBackKeepsItsState(t *testing.T) {
	dir := t.TempDir()
	g := "idle"
	a := newOwner(t, dir, "kaas-0", assignment(1, 1, nil, nil))
	f := formGroup(t, a, g)
	// Both members leave: the join phase this starts ends without members,
	// and the group is Empty at generation 3 (as in Kafka).
	if lr, err := a.Leave(g, group.LeaveInput{Version: 3, Members: []group.LeaveMember{{MemberID: f.leader}, {InstanceID: strp("i2")}}}); err != nil || lr.Err != 0 {
		t.Fatalf("leave: %v %s", err, lr.Err)
	}
	if mem := fileMembership(t, dir, g); len(mem.Members) != 0 || mem.Generation != f.gen+1 {
		t.Fatalf("membership on disk of the Empty group: %+v", mem)
	}
	if n := a.EvictIdle(0); n != 1 {
		t.Fatalf("evicted %d groups", n)
	}
	// Loaded back: the generation and protocol type are kept, so a new
	// member forms generation 4, not 1.
	ch, err := a.Join(g, group.JoinInput{Version: 3, ProtocolType: "consumer", Protocols: protos(),
		SessionTimeout: 30 * time.Second, RebalanceTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if jr := joinWait(t, ch); jr.Err != 0 || jr.Generation != f.gen+2 {
		t.Fatalf("join after eviction: %+v", jr)
	}
}

// A group whose members are all alive is never idle; when it leaves memory
// by a move and comes back, it keeps its members.
func TestGroupMovedAwayAndBackKeepsItsMembers(t *testing.T) {
	dir := t.TempDir()
	g := "roundtrip"
	v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
	v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
	v3 := assignment(3, 2, nil, map[string]string{g: "kaas-0"})
	a, b := newOwner(t, dir, "kaas-0", v1), newOwner(t, dir, "kaas-1", v1)
	f := formGroup(t, a, g)
	a.Apply(v1, v2)
	b.Apply(v1, v2)
	a.Apply(v2, v3)
	b.Apply(v2, v3)
	continuesAt(t, a, g, f)
}

func strp(s string) *string { return &s }

// TestListGroupsAtTheNewOwnerShowsAMovedGroupEmpty: before any member
// touched the moved group at its new owner, ListGroups there said Empty
// with no protocol type although the group's file records two members in
// a completed generation.
func TestListGroupsAtTheNewOwnerShowsAMovedGroupEmpty(t *testing.T) {
	dir := t.TempDir()
	g := "listed"
	v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
	v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
	a, b := newOwner(t, dir, "kaas-0", v1), newOwner(t, dir, "kaas-1", v1)
	formGroup(t, a, g)
	a.Apply(v1, v2)
	b.Apply(v1, v2)
	ls, err := b.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []Listing
	for _, l := range ls {
		if l.Group == g {
			got = append(got, l)
		}
	}
	if len(got) != 1 || got[0].State != "Stable" || got[0].ProtocolType != "consumer" {
		t.Fatalf("ListGroups at the new owner: %+v, want %s Stable consumer", got, g)
	}
	if ls, _ := a.List(); len(ls) != 0 {
		t.Errorf("ListGroups at the old owner: %+v, want nothing", ls)
	}
}

// TestFollowerSyncBehindARefusedGenerationWriteFails: the leader's
// SyncGroup completes a generation whose write is then refused (the broker
// lost the group meanwhile: here its view went stale, as when it is frozen
// and replaced); a follower's SyncGroup that arrived
// after the leader's, while the write was under way, was answered NONE
// with its share of that generation, which no owner ever recorded: at the
// next owner its heartbeat at that generation met ILLEGAL_GENERATION
// (found by TestClassicGroupOwnerChurnFencesNoMember). Like the leader's,
// it must be told NOT_COORDINATOR.
func TestFollowerSyncBehindARefusedGenerationWriteFails(t *testing.T) {
	dir := t.TempDir()
	g := "refused-generation"
	v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
	v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
	// The write's ownership check (its first call of Fresh once armed)
	// waits until released, and then finds this broker's view stale.
	var armed atomic.Bool
	blocked, release := make(chan struct{}), make(chan struct{})
	fresh := func() bool {
		if armed.CompareAndSwap(true, false) {
			close(blocked)
			<-release
			return false
		}
		return true
	}
	a := newCoordWith(t, dir, "kaas-0", func(c *Config) { c.Fresh = fresh })
	a.Apply(nil, v1)

	join := func(id string) group.JoinResult {
		t.Helper()
		ch, err := a.Join(g, group.JoinInput{Version: 3, MemberID: id, ProtocolType: "consumer", Protocols: protos(),
			SessionTimeout: 30 * time.Second, RebalanceTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return joinWait(t, ch)
	}
	sync := func(id string, gen int32, as []group.Assignment) <-chan group.SyncResult {
		t.Helper()
		ch, err := a.Sync(g, group.SyncInput{MemberID: id, Generation: gen, Assignments: as})
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	// Generation 1: one member; then a second joins and generation 2
	// forms with both.
	first := join("")
	if sr := syncWait(t, sync(first.MemberID, first.Generation, []group.Assignment{{MemberID: first.MemberID, Assignment: []byte("all")}})); sr.Err != group.ErrNone {
		t.Fatalf("sync of generation 1: %s", sr.Err)
	}
	secondCh, err := a.Join(g, group.JoinInput{Version: 3, ProtocolType: "consumer", Protocols: protos(),
		SessionTimeout: 30 * time.Second, RebalanceTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if hr, err := a.Heartbeat(g, group.HeartbeatInput{MemberID: first.MemberID, Generation: first.Generation}); err != nil || hr.Err != group.ErrRebalanceInProgress {
		t.Fatalf("heartbeat of the first member: %+v %v", hr, err)
	}
	leader := join(first.MemberID)
	follower := joinWait(t, secondCh)
	if leader.Leader != leader.MemberID || follower.Generation != leader.Generation || leader.Generation != 2 {
		t.Fatalf("generation 2: leader %+v, follower %+v", leader, follower)
	}

	// The leader's SyncGroup: its write is under way and held (armed once
	// the request has passed its own ownership check, as its membership
	// write is queued).
	a.beforeWrite = func(op, _ string) {
		if op == "membership" {
			armed.Store(true)
		}
	}
	leaderCh := sync(leader.MemberID, 2, []group.Assignment{
		{MemberID: leader.MemberID, Assignment: []byte("half-1")}, {MemberID: follower.MemberID, Assignment: []byte("half-2")}})
	<-blocked
	a.beforeWrite = nil
	// The follower's SyncGroup comes meanwhile; then the write is refused.
	followerCh := sync(follower.MemberID, 2, nil)
	close(release)

	if sr := syncWait(t, leaderCh); sr.Err != group.ErrNotCoordinator {
		t.Fatalf("leader's sync of the generation whose write was refused: %s", sr.Err)
	}
	if sr := syncWait(t, followerCh); sr.Err != group.ErrNotCoordinator {
		t.Fatalf("follower's sync behind the refused write: %s, assignment %q", sr.Err, sr.Assignment)
	}
	// The next owner has generation 1 and one member, as the file does.
	b := newOwner(t, dir, "kaas-1", v2)
	if d, err := b.Describe(g); err != nil || len(d.Members) != 1 {
		t.Fatalf("the group at the next owner: %+v %v", d, err)
	}
}
