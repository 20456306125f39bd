package group

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// snapCfg is a config with deterministic member ids.
func snapCfg() Config {
	c := DefaultConfig()
	n := 0
	c.NewMemberID = func(prefix string) string { n++; return prefix + "-" + string(rune('a'+n-1)) }
	return c
}

func consumerMeta(topics ...string) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Topics = topics
	return m.AppendTo(nil)
}

func joinIn(id string, instance *string, client string) JoinInput {
	return JoinInput{Ref: client, Version: 5, MemberID: id, InstanceID: instance, ProtocolType: "consumer",
		Protocols:      []Protocol{{Name: "range", Metadata: consumerMeta("orders")}},
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second, ClientID: client, ClientHost: "/10.0.0.1"}
}

// stableGroup forms a Stable group of a static member "i1" and a dynamic
// member, generation 1, and returns it with the two member ids (leader
// first).
func stableGroup(t *testing.T) (*Group, string, string) {
	t.Helper()
	g := New("g", snapCfg())
	i1 := "i1"
	out := g.Join(t0, joinIn("", &i1, "c1"))
	if len(out.Joins) != 0 {
		t.Fatalf("static join answered at once: %+v", out.Joins)
	}
	out = g.Join(t0, joinIn("", nil, "c2")) // MEMBER_ID_REQUIRED
	if len(out.Joins) != 1 || out.Joins[0].Err != ErrMemberIDRequired {
		t.Fatalf("dynamic join: %+v", out.Joins)
	}
	if out.Persist {
		t.Fatal("a pending member id asked for a membership write")
	}
	dyn := out.Joins[0].MemberID
	g.Join(t0, joinIn(dyn, nil, "c2"))
	for _, a := range g.Armed() {
		if a.Key.Kind == TimerRebalanceDelay {
			out = g.Timer(a.At, a.Key, a.Seq)
		}
	}
	if len(out.Joins) != 2 || g.State() != CompletingRebalance {
		t.Fatalf("join phase did not end: %+v %s", out.Joins, g.State())
	}
	if out.Persist {
		t.Fatal("the end of a join phase asked for a write before the assignment")
	}
	leader := g.Leader()
	out = g.Sync(t0, SyncInput{Ref: "s", MemberID: leader, Generation: 1,
		Assignments: []Assignment{{MemberID: leader, Assignment: []byte("a0")}, {MemberID: dyn, Assignment: []byte("a1")}}})
	if g.State() != Stable || !out.Persist {
		t.Fatalf("leader's sync: state %s persist %v", g.State(), out.Persist)
	}
	return g, leader, dyn
}

func TestSnapshotRestoreContinuesTheGeneration(t *testing.T) {
	g, leader, dyn := stableGroup(t)
	snap := g.Snapshot()
	if snap.Generation != 1 || snap.Leader != leader || snap.Rebalancing || len(snap.Members) != 2 ||
		snap.Members[0].InstanceID != "i1" || string(snap.Members[1].Assignment) != "a1" || snap.Members[1].ClientHost != "/10.0.0.1" {
		t.Fatalf("snapshot %+v", snap)
	}
	later := t0.Add(time.Hour)
	h := New("g", snapCfg())
	out, err := h.Restore(later, snap)
	if err != nil {
		t.Fatal(err)
	}
	if h.State() != Stable || h.Generation() != 1 || !reflect.DeepEqual(h.Snapshot(), snap) {
		t.Fatalf("restored %s gen %d\n%+v\n%+v", h.State(), h.Generation(), h.Snapshot(), snap)
	}
	// Sessions start afresh at the load.
	if len(out.Arm) != 2 || !out.Arm[0].At.Equal(later.Add(10*time.Second)) {
		t.Fatalf("timers armed at restore: %+v", out.Arm)
	}
	if out.Persist {
		t.Fatal("a restore asked for a write")
	}
	if topics, known := h.Topics(); !known || len(topics) != 1 || topics[0] != "orders" {
		t.Fatalf("subscription after restore: %v %v", topics, known)
	}
	// Old member ids and generation are accepted.
	out = h.Heartbeat(later, HeartbeatInput{Ref: 1, MemberID: dyn, Generation: 1})
	if out.Heartbeats[0].Err != ErrNone || out.Persist {
		t.Fatalf("heartbeat after restore: %+v", out)
	}
	if code, out := h.CheckCommit(later, CommitCheck{MemberID: leader, InstanceID: strp("i1"), Generation: 1}); code != ErrNone || out.Persist {
		t.Fatalf("commit after restore: %s %v", code, out.Persist)
	}
	out = h.Sync(later, SyncInput{Ref: 2, MemberID: dyn, Generation: 1})
	if len(out.Syncs) != 1 || out.Syncs[0].Err != ErrNone || string(out.Syncs[0].Assignment) != "a1" {
		t.Fatalf("sync after restore: %+v", out.Syncs)
	}
	out = h.Join(later, joinIn(dyn, nil, "c2"))
	if len(out.Joins) != 1 || out.Joins[0].Err != ErrNone || out.Joins[0].Generation != 1 {
		t.Fatalf("follower rejoin after restore: %+v", out.Joins)
	}
	// The static member restarts (KIP-345): replaced, no rebalance, and the
	// replacement is a membership write.
	out = h.Join(later, joinIn("", strp("i1"), "c1"))
	if len(out.Joins) != 1 || out.Joins[0].Err != ErrNone || h.State() != Stable || !out.Persist {
		t.Fatalf("static rejoin after restore: %+v %s persist %v", out.Joins, h.State(), out.Persist)
	}
	if code, _ := h.CheckCommit(later, CommitCheck{MemberID: leader, InstanceID: strp("i1"), Generation: 1}); code != ErrFencedInstanceID {
		t.Fatalf("the replaced member id: %s", code)
	}
}

func TestRestoreDuringRebalanceNeverAnswersUnknownMember(t *testing.T) {
	g, leader, dyn := stableGroup(t)
	// The leader rejoins: a rebalance is in progress when the group moves.
	g.Join(t0, joinIn(leader, strp("i1"), "c1"))
	snap := g.Snapshot()
	if !snap.Rebalancing {
		t.Fatalf("snapshot in %s not marked rebalancing", g.State())
	}
	h := New("g", snapCfg())
	if _, err := h.Restore(t0, snap); err != nil {
		t.Fatal(err)
	}
	if h.State() != PreparingRebalance {
		t.Fatalf("restored into %s", h.State())
	}
	out := h.Heartbeat(t0, HeartbeatInput{Ref: 1, MemberID: dyn, Generation: 1})
	if out.Heartbeats[0].Err != ErrRebalanceInProgress {
		t.Fatalf("heartbeat: %s", out.Heartbeats[0].Err)
	}
	out = h.Join(t0, joinIn(leader, strp("i1"), "c1"))
	out2 := h.Join(t0, joinIn(dyn, nil, "c2"))
	joins := append(out.Joins, out2.Joins...)
	if len(joins) != 2 || h.Generation() != 2 || h.State() != CompletingRebalance {
		t.Fatalf("rejoin after restore: %+v gen %d %s", joins, h.Generation(), h.State())
	}
	for _, j := range joins {
		if j.Err != ErrNone {
			t.Fatalf("join answered %s", j.Err)
		}
	}
}

func TestRestoreEmptyKeepsGenerationAndType(t *testing.T) {
	h := New("g", snapCfg())
	if _, err := h.Restore(t0, Snapshot{ProtocolType: "consumer", Generation: 7}); err != nil {
		t.Fatal(err)
	}
	if h.State() != Empty || h.Generation() != 7 || h.ProtocolType() != "consumer" {
		t.Fatalf("%s %d %q", h.State(), h.Generation(), h.ProtocolType())
	}
	// A simple commit is allowed on an Empty group.
	if code, _ := h.CheckCommit(t0, CommitCheck{Generation: -1}); code != ErrNone {
		t.Fatal(code)
	}
}

func TestRestoreRefusesBadSnapshotsAndUsedGroups(t *testing.T) {
	g, _, _ := stableGroup(t)
	good := g.Snapshot()
	if _, err := g.Restore(t0, good); !errors.Is(err, ErrRestore) {
		t.Fatalf("restore into a group in use: %v", err)
	}
	bad := map[string]func(s *Snapshot){
		"negative generation": func(s *Snapshot) { s.Generation = -1 },
		"no protocol type":    func(s *Snapshot) { s.ProtocolType = "" },
		"empty member id":     func(s *Snapshot) { s.Members[1].MemberID = "" },
		"duplicate member":    func(s *Snapshot) { s.Members[1].MemberID = s.Members[0].MemberID },
		"duplicate instance":  func(s *Snapshot) { s.Members[1].InstanceID = "i1" },
		"zero session":        func(s *Snapshot) { s.Members[0].SessionTimeout = 0 },
		"no protocols":        func(s *Snapshot) { s.Members[0].Protocols = nil },
		"leader not a member": func(s *Snapshot) { s.Leader = "nobody" },
		"protocol unknown":    func(s *Snapshot) { s.Protocol = "sticky" },
		"stable, no protocol": func(s *Snapshot) { s.HasProtocol = false },
	}
	for name, mutate := range bad {
		s := g.Snapshot()
		mutate(&s)
		h := New("g", snapCfg())
		if _, err := h.Restore(t0, s); !errors.Is(err, ErrRestore) {
			t.Errorf("%s: restored: %v", name, err)
		}
		if h.State() != Empty || h.Members() != 0 || h.Generation() != 0 {
			t.Errorf("%s: a refused restore changed the group", name)
		}
	}
}

func TestHeartbeatsAndCommitsNeverAskForAWrite(t *testing.T) {
	g, leader, dyn := stableGroup(t)
	for i := range 5 {
		now := t0.Add(time.Duration(i) * time.Second)
		if out := g.Heartbeat(now, HeartbeatInput{Ref: 1, MemberID: dyn, Generation: 1}); out.Persist {
			t.Fatal("heartbeat asked for a membership write")
		}
		if _, out := g.CheckCommit(now, CommitCheck{MemberID: leader, InstanceID: strp("i1"), Generation: 1}); out.Persist {
			t.Fatal("commit asked for a membership write")
		}
	}
	// A leave does.
	out := g.Leave(t0, LeaveInput{Ref: 1, Version: 3, Members: []LeaveMember{{MemberID: dyn}}})
	if !out.Persist {
		t.Fatal("a leave did not ask for a membership write")
	}
	if out := g.Unload(); out.Persist {
		t.Fatal("unloading asked for a membership write")
	}
}

// TestRestoreOfARebalanceWhereAMemberDroppedTheOldProtocol: during a
// rebalance a member may rejoin without the protocol of the last
// generation (it keeps one that every member supports). A leave then
// writes that snapshot, and Restore refused it ("member does not support
// protocol"): the group's next coordinator ignored the membership, started
// the group Empty and answered its members UNKNOWN_MEMBER_ID. Found by
// TestMoveKeepsTheGroup.
func TestRestoreOfARebalanceWhereAMemberDroppedTheOldProtocol(t *testing.T) {
	cfg := snapCfg()
	cfg.InitialRebalanceDelay = 0
	g := New("g", cfg)
	both := []Protocol{{Name: "range", Metadata: consumerMeta("orders")}, {Name: "rr"}}
	joinTo := func(g *Group, id, client string, ps []Protocol) []JoinResult {
		return g.Join(t0, JoinInput{Ref: client, Version: 3, MemberID: id, ProtocolType: "consumer", Protocols: ps,
			SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second, ClientID: client}).Joins
	}
	ids := map[any]string{}
	c1 := joinTo(g, "", "c1", both)[0].MemberID // generation 1 at once (no initial delay)
	g.Sync(t0, SyncInput{Ref: "s1", MemberID: c1, Generation: 1})
	joinTo(g, "", "c2", both)
	joinTo(g, "", "c3", both)
	for _, j := range joinTo(g, c1, "c1", both) {
		ids[j.Ref] = j.MemberID
	}
	g.Sync(t0, SyncInput{Ref: "s2", MemberID: c1, Generation: 2})
	if g.State() != Stable || g.Generation() != 2 || g.Members() != 3 || g.Protocol() != "range" {
		t.Fatalf("%s generation %d, %d members, protocol %q", g.State(), g.Generation(), g.Members(), g.Protocol())
	}
	// c1 rejoins with "rr" only; c2 leaves while c3 has not rejoined: a
	// write, mid-rebalance.
	joinTo(g, c1, "c1", []Protocol{{Name: "rr"}})
	if out := g.Leave(t0, LeaveInput{Ref: "l", Version: 3, Members: []LeaveMember{{MemberID: ids["c2"]}}}); !out.Persist || g.State() != PreparingRebalance {
		t.Fatalf("the leave: persist %v, %s", out.Persist, g.State())
	}
	snap := g.Snapshot()
	h := New("g", snapCfg())
	if _, err := h.Restore(t0, snap); err != nil {
		t.Fatalf("the written snapshot does not load: %v", err)
	}
	want := snap // loaded mid-rebalance: the assignments are cleared
	want.Members = slices.Clone(snap.Members)
	for i := range want.Members {
		want.Members[i].Assignment = nil
	}
	if h.State() != PreparingRebalance || !reflect.DeepEqual(h.Snapshot(), want) {
		t.Fatalf("loaded %s\n%+v\nwant\n%+v", h.State(), h.Snapshot(), want)
	}
	// Both rejoin with their ids: the next generation forms, with "rr".
	joins := append(joinTo(h, c1, "c1", []Protocol{{Name: "rr"}}), joinTo(h, ids["c3"], "c3", both)...)
	if len(joins) != 2 || joins[0].Err != ErrNone || joins[1].Err != ErrNone || h.Generation() != 3 || h.Protocol() != "rr" {
		t.Fatalf("rejoins after the load: %+v, generation %d, protocol %q", joins, h.Generation(), h.Protocol())
	}
}
