package coord

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/cgroup"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/offsets"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// classicJoinIn is a JoinGroup of a classic member subscribed to topic t
// (consumer protocol metadata, v1: owned partitions).
func classicJoinIn(id string, owned ...int32) group.JoinInput {
	sub := kmsg.ConsumerMemberMetadata{Version: 1, Topics: []string{"t"}}
	if len(owned) > 0 {
		sub.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "t", Partitions: owned}}
	}
	return group.JoinInput{Version: 3, MemberID: id, ProtocolType: "consumer",
		Protocols:      []group.Protocol{{Name: "cooperative-sticky", Metadata: sub.AppendTo(nil)}},
		SessionTimeout: 30 * time.Second, RebalanceTimeout: 30 * time.Second}
}

// TestMixedGroupMovesAndDowngradesThroughTheFile: a classic group of one
// member is upgraded by a consumer-protocol member, moves to another
// coordinator with its classic member still classic and at its epoch, and
// turns classic again there when the consumer member leaves; a third owner
// loads it from the file as a classic group. With the policy disabled the
// upgrade is refused (GROUP_ID_NOT_FOUND).
func TestMixedGroupMovesAndDowngradesThroughTheFile(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	g := "mixed"
	a := newOwner(t, dir, "kaas-0", assignment(1, 2, nil, map[string]string{g: "kaas-0"}))
	a.SetTopics(consumerImage)

	ch, err := a.Join(g, classicJoinIn(""))
	if err != nil {
		t.Fatal(err)
	}
	jr := <-ch
	if jr.Err != 0 {
		t.Fatalf("classic join: %s", group.ErrName(jr.Err))
	}
	assign := kmsg.ConsumerMemberAssignment{Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: []int32{0, 1, 2, 3}}}}
	sch, err := a.Sync(g, group.SyncInput{MemberID: jr.MemberID, Generation: jr.Generation,
		Assignments: []group.Assignment{{MemberID: jr.MemberID, Assignment: assign.AppendTo(nil)}}})
	if err != nil {
		t.Fatal(err)
	}
	if sr := <-sch; sr.Err != 0 {
		t.Fatalf("classic sync: %s", group.ErrName(sr.Err))
	}
	classic, gen := jr.MemberID, jr.Generation

	// A join the consumer group would refuse leaves the classic group as
	// it was (the conversion and the join are one operation).
	bad := consumerJoin("k0")
	bad.RebalanceTimeoutMs = -1
	if res, err := a.ConsumerHeartbeat(ctx, g, bad); err != nil || res.Err != cgroup.ErrInvalidRequest {
		t.Fatalf("invalid consumer join into the classic group: %+v %v", res, err)
	}
	if hr, err := a.Heartbeat(g, group.HeartbeatInput{MemberID: classic, Generation: gen}); err != nil || hr.Err != 0 {
		t.Fatalf("classic heartbeat after a refused join: %+v %v", hr, err)
	}
	// Disabled: the classic group stays classic.
	a.cfg.Consumer.MigrationPolicy = cgroup.MigrationDisabled
	if _, err := a.ConsumerHeartbeat(ctx, g, consumerJoin("k1")); !errors.Is(err, ErrNotConsumerGroup) {
		t.Fatalf("consumer join with migration disabled: %v", err)
	}
	a.cfg.Consumer.MigrationPolicy = cgroup.MigrationBidirectional
	res, err := a.ConsumerHeartbeat(ctx, g, consumerJoin("k1"))
	if err != nil || res.Err != cgroup.ErrNone || res.MemberEpoch != gen+1 {
		t.Fatalf("consumer join upgrading the group: %+v %v", res, err)
	}
	if hr, err := a.Heartbeat(g, group.HeartbeatInput{MemberID: classic, Generation: gen}); err != nil || hr.Err != group.ErrRebalanceInProgress {
		t.Fatalf("classic heartbeat after the upgrade: %+v %v", hr, err)
	}

	short := classicJoinIn("")
	short.SessionTimeout = time.Millisecond
	if ch, err := a.Join(g, short); err != nil || (<-ch).Err != group.ErrInvalidSessionTimeout {
		t.Fatalf("classic join with a session timeout below group.min.session.timeout.ms: %v", err)
	}

	// The group moves; the classic member goes on at the new owner.
	b := newOwner(t, dir, "kaas-1", assignment(2, 2, nil, map[string]string{g: "kaas-1"}))
	b.SetTopics(consumerImage)
	d, err := b.ConsumerDescribe(g)
	if err != nil || len(d.Members) != 2 || d.GroupEpoch != gen+1 {
		t.Fatalf("mixed group loaded by the new owner: %+v %v", d, err)
	}
	for _, m := range d.Members {
		if m.Classic != (m.MemberID == classic) {
			t.Fatalf("loaded members %+v: want %s classic", d.Members, classic)
		}
	}
	ch, err = b.Join(g, classicJoinIn(classic, 0, 1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if jr = <-ch; jr.Err != 0 || jr.Generation != gen {
		t.Fatalf("classic rejoin at the new owner (partitions to give up): %+v", jr)
	}
	sch, err = b.Sync(g, group.SyncInput{MemberID: classic, Generation: gen})
	if err != nil {
		t.Fatal(err)
	}
	sr := <-sch
	var kept kmsg.ConsumerMemberAssignment
	if sr.Err != 0 || kept.ReadFrom(sr.Assignment) != nil || len(kept.Topics) != 1 || len(kept.Topics[0].Partitions) != 2 {
		t.Fatalf("classic sync at the new owner: %+v", sr)
	}

	// The consumer member leaves: the group is classic again, rebalancing.
	if res, err := b.ConsumerHeartbeat(ctx, g, consumerBeat("k1", gen+1, nil)); err != nil || res.Err != cgroup.ErrNone {
		t.Fatalf("consumer heartbeat: %+v %v", res, err)
	}
	leave := consumerBeat("k1", cgroup.LeaveEpoch, nil)
	if res, err := b.ConsumerHeartbeat(ctx, g, leave); err != nil || res.Err != cgroup.ErrNone {
		t.Fatalf("consumer leave: %+v %v", res, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cd, err := b.Describe(g)
		if err == nil && cd.State == "PreparingRebalance" && len(cd.Members) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no classic group after the last consumer member left: %+v %v", cd, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Its commit with the generation it knows lands.
	if err := commitAs(b, g, classic, gen); err != nil {
		t.Fatalf("classic member's commit in the generation it knows: %v", err)
	}
	// The classic state reaches the file (the write is not waited for by
	// anyone: nobody asked), and a third owner reads a classic group there.
	deadline = time.Now().Add(10 * time.Second)
	for {
		mem, _, err := b.store.GroupState(g, b.owner(g))
		if err == nil && mem != nil && mem.Consumer == nil && len(mem.Members) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the file never held the classic group: %+v %v", mem, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := newOwner(t, dir, "kaas-0", assignment(3, 2, nil, map[string]string{g: "kaas-0"}))
	c.SetTopics(consumerImage)
	cd, err := c.Describe(g)
	if err != nil || len(cd.Members) != 1 || cd.Members[0].MemberID != classic {
		t.Fatalf("classic group loaded from the file: %+v %v", cd, err)
	}
}

func commitAs(c *Coordinator, g, member string, gen int32) error {
	refused, err := c.admitCommit(g, group.CommitCheck{MemberID: member, Generation: gen}, 8, []offsets.TP{tp(0)})
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		return fmt.Errorf("refused: %v", refused)
	}
	return nil
}
