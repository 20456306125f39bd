package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/testutil"
)

func describeConsumerGroup(t *testing.T, cl *kgo.Client, g string) kmsg.ConsumerGroupDescribeResponseGroup {
	t.Helper()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{g}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Groups[0]
}

// TestConsumerProtocolGroupSharesPartitionsAndResumes: franz-go members in
// KIP-848 mode (ServerSideBalancer, asking for the range assignor) share a
// topic through the coordinator's assignment, every partition owned once; the group is listed and
// described as a consumer group; classic JoinGroup is refused while it has
// members; its commits are read back; and its state survives a broker
// restart (the same epochs and members, from the group's file).
func TestConsumerProtocolGroupSharesPartitionsAndResumes(t *testing.T) {
	dir := t.TempDir()
	b := startGroupBroker(t, dir, fastGroups(), nil)
	cl := client(t, b)
	createTopic(t, cl, "kt", 6, nil)
	produceN(t, cl, "kt", 600)

	members := make([]*kgo.Client, 3)
	for i := range members {
		members[i] = client(t, b, kgo.ConsumerGroup("k1"), kgo.ConsumeTopics("kt"),
			kgo.Balancers(kgo.RangeBalancer()), kgo.ServerSideBalancer(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.HeartbeatInterval(200*time.Millisecond), kgo.ClientID(fmt.Sprintf("k-%d", i)))
	}
	if seen := consumeInGroup(t, members, 600, 45*time.Second); len(seen) != 600 {
		t.Fatalf("consumed %d distinct of 600", len(seen))
	}
	var described kmsg.ConsumerGroupDescribeResponseGroup
	testutil.WaitFor(t, 30*time.Second, func() error {
		d := describeConsumerGroup(t, cl, "k1")
		if d.ErrorCode != 0 || d.State != "Stable" || len(d.Members) != 3 {
			return fmt.Errorf("group %s (error %d) with %d members", d.State, d.ErrorCode, len(d.Members))
		}
		owned := map[int32]int{}
		for _, m := range d.Members {
			if m.MemberEpoch != d.AssignmentEpoch || m.MemberType != 1 {
				return fmt.Errorf("member %s at epoch %d, target %d", m.MemberID, m.MemberEpoch, d.AssignmentEpoch)
			}
			for _, tp := range m.Assignment.TopicPartitions {
				if tp.Topic != "kt" {
					return fmt.Errorf("assignment names topic %q", tp.Topic)
				}
				for _, p := range tp.Partitions {
					owned[p]++
				}
			}
		}
		for p := int32(0); p < 6; p++ {
			if owned[p] != 1 {
				return fmt.Errorf("partition %d owned %d times: %v", p, owned[p], owned)
			}
		}
		described = d
		return nil
	})
	if described.AssignorName != "range" {
		t.Errorf("assignor %q, want range (franz-go's range balancer asks for it; uniform is the default)", described.AssignorName)
	}

	// DescribeGroups (the classic API) answers as Kafka 4.4 does for a
	// consumer group.
	dreq := kmsg.NewPtrDescribeGroupsRequest()
	dreq.Groups = []string{"k1"}
	dresp, err := dreq.RequestWith(context.Background(), cl)
	if err != nil || dresp.Groups[0].ErrorCode != kerr.GroupIDNotFound.Code || dresp.Groups[0].State != "Dead" ||
		dresp.Groups[0].ErrorMessage == nil || *dresp.Groups[0].ErrorMessage != "Group k1 is not a classic group." {
		t.Fatalf("DescribeGroups of a consumer group: %+v %v", dresp, err)
	}

	// Listed as a consumer group, filtered by type.
	lreq := kmsg.NewPtrListGroupsRequest()
	lreq.TypesFilter = []string{"consumer"}
	lresp, err := lreq.RequestWith(context.Background(), cl)
	if err != nil || len(lresp.Groups) != 1 || lresp.Groups[0].GroupType != "consumer" || lresp.Groups[0].GroupState != "Stable" {
		t.Fatalf("ListGroups(consumer): %+v %v", lresp, err)
	}

	// A classic member of another protocol type, or whose subscription is
	// not a consumer protocol one, cannot join a consumer group in use.
	for _, c := range []struct{ protocolType, meta string }{{"connect", "\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"}, {"consumer", "\x00\x00"}} {
		jreq := kmsg.NewPtrJoinGroupRequest()
		jreq.Group, jreq.ProtocolType, jreq.SessionTimeoutMillis, jreq.RebalanceTimeoutMillis = "k1", c.protocolType, 10000, 10000
		jreq.MemberID = "classic-1"
		jreq.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte(c.meta)}}
		jresp, err := jreq.RequestWith(context.Background(), cl)
		if err != nil || jresp.ErrorCode != kerr.InconsistentGroupProtocol.Code {
			t.Fatalf("classic JoinGroup (%s) into a consumer group: %+v %v", c.protocolType, jresp, err)
		}
	}

	for _, m := range members {
		if err := m.CommitUncommittedOffsets(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	// The broker restarts with the members still in: the group is read
	// back from its file with the same epochs.
	stop(t, b)
	b2 := startGroupBroker(t, dir, fastGroups(), nil)
	cl2 := client(t, b2)
	d := describeConsumerGroup(t, cl2, "k1")
	if d.ErrorCode != 0 || d.Epoch != described.Epoch || len(d.Members) != 3 {
		t.Fatalf("after a restart: %s epoch %d with %d members (error %d); before: epoch %d", d.State, d.Epoch, len(d.Members), d.ErrorCode, described.Epoch)
	}
	freq := kmsg.NewPtrOffsetFetchRequest()
	freq.Group = "k1"
	fresp, err := freq.RequestWith(context.Background(), cl2)
	if err != nil {
		t.Fatal(err)
	}
	committed := int64(0)
	for _, tt := range fresp.Topics {
		for _, p := range tt.Partitions {
			committed += p.Offset
		}
	}
	if committed != 600 {
		t.Fatalf("committed offsets add up to %d, want 600", committed)
	}
}

// TestConsumerGroupHeartbeatErrors: the errors a client can provoke come
// back as Kafka names them, and a bad request creates nothing.
func TestConsumerGroupHeartbeatErrors(t *testing.T) {
	b := startGroupBroker(t, t.TempDir(), fastGroups(), nil)
	cl := client(t, b)
	createTopic(t, cl, "ke", 2, nil)
	hb := func(mod func(r *kmsg.ConsumerGroupHeartbeatRequest)) *kmsg.ConsumerGroupHeartbeatResponse {
		t.Helper()
		r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		r.Group, r.MemberID, r.RebalanceTimeoutMillis = "ke-g", "member-1", 10000
		r.SubscribedTopicNames = []string{"ke"}
		r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		mod(r)
		resp, err := r.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	cases := []struct {
		name string
		mod  func(r *kmsg.ConsumerGroupHeartbeatRequest)
		want *kerr.Error
	}{
		{"unknown group", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = 3 }, kerr.GroupIDNotFound},
		{"no member id (v1)", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" }, kerr.InvalidRequest},
		{"unknown assignor", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = kmsg.StringPtr("sticky") }, kerr.UnsupportedAssignor},
		{"bad regex", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.SubscribedTopicNames, r.SubscribedTopicRegex = nil, kmsg.StringPtr("(")
		}, kerr.InvalidRegularExpression},
		// Kafka 4.4 answers INVALID_REQUEST ("GroupId can't be empty."),
		// not INVALID_GROUP_ID (TestGroupAnswersMatchKafka).
		{"empty group id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Group = "" }, kerr.InvalidRequest},
	}
	for _, c := range cases {
		if resp := hb(c.mod); resp.ErrorCode != c.want.Code || resp.ErrorMessage == nil {
			t.Errorf("%s: error %d (%v), want %s", c.name, resp.ErrorCode, resp.ErrorMessage, c.want.Message)
		}
	}
	ok := hb(func(*kmsg.ConsumerGroupHeartbeatRequest) {})
	if ok.ErrorCode != 0 || ok.MemberEpoch != 2 || ok.Assignment == nil || len(ok.Assignment.Topics) != 1 || len(ok.Assignment.Topics[0].Partitions) != 2 {
		t.Fatalf("join: %+v", ok)
	}
	if resp := hb(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = 5 }); resp.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Fatalf("future epoch: %d", resp.ErrorCode)
	}
	if resp := hb(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID, r.MemberEpoch = "member-x", 1 }); resp.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("unknown member of a known group: %d", resp.ErrorCode)
	}
	// A commit with a stale epoch is refused per partition (KIP-1251);
	// with the member's epoch it lands.
	commit := func(epoch int32) int16 {
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Version = 9
		r.Group, r.MemberID, r.Generation = "ke-g", "member-1", epoch
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "ke"
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, 1
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
		resp, err := r.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	if code := commit(3); code != kerr.StaleMemberEpoch.Code {
		t.Fatalf("commit with a newer epoch: %d", code)
	}
	if code := commit(2); code != 0 {
		t.Fatalf("commit with the member's epoch: %d", code)
	}
	// OffsetFetch v9 names the member and its epoch: checked as Kafka does
	// (a request naming nobody, as an admin's, passes).
	fetch := func(member *string, epoch int32) (int16, int64) {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.Version = 9
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group, g.MemberID, g.MemberEpoch = "ke-g", member, epoch
		g.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: "ke", Partitions: []int32{0}}}
		r.Groups = append(r.Groups, g)
		resp, err := r.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		rg := resp.Groups[0]
		if rg.ErrorCode != 0 {
			return rg.ErrorCode, -1
		}
		return 0, rg.Topics[0].Partitions[0].Offset
	}
	for _, c := range []struct {
		name   string
		member *string
		epoch  int32
		code   int16
	}{
		{"the member at its epoch", kmsg.StringPtr("member-1"), 2, 0},
		{"an admin (no member)", nil, -1, 0},
		{"a stale epoch", kmsg.StringPtr("member-1"), 1, kerr.StaleMemberEpoch.Code},
		{"a stranger", kmsg.StringPtr("member-x"), 1, kerr.UnknownMemberID.Code},
	} {
		code, off := fetch(c.member, c.epoch)
		if code != c.code || (code == 0 && off != 1) {
			t.Errorf("OffsetFetch v9 by %s: error %d, offset %d; want error %d (offset 1)", c.name, code, off, c.code)
		}
	}
	if resp := hb(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -1 }); resp.ErrorCode != 0 || resp.MemberEpoch != -1 {
		t.Fatalf("leave: %+v", resp)
	}

	// The consumer group is Empty now: a classic member may take the group
	// over, and then a consumer-protocol member upgrades it online (Kafka's
	// default group.consumer.migration.policy, bidirectional), the classic
	// member staying in.
	classic := client(t, b, kgo.ConsumerGroup("ke-g"), kgo.ConsumeTopics("ke"))
	testutil.WaitFor(t, 20*time.Second, func() error {
		lreq := kmsg.NewPtrListGroupsRequest()
		lresp, err := lreq.RequestWith(context.Background(), cl)
		if err != nil {
			return err
		}
		for _, g := range lresp.Groups {
			if g.Group == "ke-g" && g.GroupType == "classic" && g.GroupState == "Stable" {
				return nil
			}
		}
		return fmt.Errorf("ke-g not a Stable classic group: %+v", lresp.Groups)
	})
	if resp := hb(func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "member-2" }); resp.ErrorCode != 0 {
		t.Fatalf("consumer-protocol join into a classic group with members: %d", resp.ErrorCode)
	}
	dreq := kmsg.NewPtrConsumerGroupDescribeRequest()
	dreq.Groups = []string{"ke-g"}
	dresp, err := dreq.RequestWith(context.Background(), cl)
	if err != nil || len(dresp.Groups) != 1 || len(dresp.Groups[0].Members) != 2 {
		t.Fatalf("ConsumerGroupDescribe after the upgrade: %+v %v", dresp, err)
	}
	types := map[string]int8{}
	for _, m := range dresp.Groups[0].Members {
		types[m.MemberID] = m.MemberType
	}
	if types["member-2"] != 1 || len(types) != 2 {
		t.Fatalf("member types after the upgrade: %v, want member-2 consumer (1) and the classic member (0)", types)
	}
	for id, mt := range types {
		if id != "member-2" && mt != 0 {
			t.Fatalf("member types after the upgrade: %v, want the classic member 0", types)
		}
	}
	classic.Close()
}

// TestSyncGroupV5WithoutProtocolTypeOrNameIsInconsistent: from v5 a
// SyncGroup must name its protocol type and name; Kafka answers one that
// does not INCONSISTENT_GROUP_PROTOCOL before it looks at the group (the
// reference, TestGroupAnswersMatchKafka); kaas went on and answered from
// the group (NONE for a member of it, UNKNOWN_MEMBER_ID for a stranger).
// Before v5 the fields do not exist and nothing changes.
func TestSyncGroupV5WithoutProtocolTypeOrNameIsInconsistent(t *testing.T) {
	b := startGroupBroker(t, t.TempDir(), fastGroups(), nil)
	sync := func(v int16, ptype, name *string) int16 {
		r := kmsg.NewPtrSyncGroupRequest()
		r.Version, r.Group, r.MemberID, r.Generation = v, "sg-g", "nobody", 1
		r.ProtocolType, r.Protocol = ptype, name
		return roundTrip(t, b, r).(*kmsg.SyncGroupResponse).ErrorCode
	}
	for _, c := range []struct {
		v           int16
		ptype, name *string
		want        *kerr.Error
	}{
		{5, nil, nil, kerr.InconsistentGroupProtocol},
		{5, kmsg.StringPtr("consumer"), nil, kerr.InconsistentGroupProtocol},
		{5, nil, kmsg.StringPtr("range"), kerr.InconsistentGroupProtocol},
		{5, kmsg.StringPtr("consumer"), kmsg.StringPtr("range"), kerr.UnknownMemberID},
		{4, nil, nil, kerr.UnknownMemberID},
	} {
		if got := sync(c.v, c.ptype, c.name); got != c.want.Code {
			t.Errorf("SyncGroup v%d type %v name %v: error %d, want %s", c.v, c.ptype != nil, c.name != nil, got, c.want.Message)
		}
	}
}
