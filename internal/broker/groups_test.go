package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/testutil"
)

// fastGroups is Kafka's group defaults without the initial rebalance delay.
func fastGroups() *group.Config {
	gc := group.DefaultConfig()
	gc.InitialRebalanceDelay = 0
	return &gc
}

// consumeInGroup polls every member until they have consumed n distinct
// records (by value) between them or the timeout passes, each committing
// what it polled; it returns how often each value was consumed.
func consumeInGroup(t *testing.T, members []*kgo.Client, n int, timeout time.Duration) map[string]int {
	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() {
			for ctx.Err() == nil {
				fs := m.PollFetches(ctx)
				fs.EachRecord(func(r *kgo.Record) {
					mu.Lock()
					seen[string(r.Value)]++
					mu.Unlock()
				})
				if err := m.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
					t.Logf("commit: %v", err)
				}
				mu.Lock()
				done := len(seen) >= n
				mu.Unlock()
				if done {
					cancel() // wakes the other members' polls
					return
				}
			}
		})
	}
	wg.Wait()
	return seen
}

func TestConsumerGroupConvergesAndResumesFromCommits(t *testing.T) {
	b := startGroupBroker(t, t.TempDir(), fastGroups(), nil)
	cl := client(t, b)
	createTopic(t, cl, "gt", 6, nil)
	produceN(t, cl, "gt", 600)

	members := make([]*kgo.Client, 3)
	for i := range members {
		members[i] = client(t, b, kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("gt"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.HeartbeatInterval(200*time.Millisecond))
	}
	if seen := consumeInGroup(t, members, 600, 30*time.Second); len(seen) != 600 {
		t.Fatalf("consumed %d distinct of 600", len(seen))
	}
	// Every partition is owned by exactly one member.
	adm := kadm.NewClient(cl)
	// Stable with every partition owned exactly once (cooperative
	// rebalancing may pass through Stable with partitions in flight).
	testutil.WaitFor(t, 15*time.Second, func() error {
		described, err := adm.DescribeGroups(context.Background(), "g1")
		if err != nil {
			return err
		}
		d := described["g1"]
		if d.State != "Stable" || len(d.Members) != 3 {
			return fmt.Errorf("group %s with %d members", d.State, len(d.Members))
		}
		owned := map[int32]int{}
		for _, m := range d.Members {
			ca, _ := m.Assigned.AsConsumer()
			for _, tp := range ca.Topics {
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
		return nil
	})
	for _, m := range members {
		m.CommitUncommittedOffsets(context.Background())
		m.Close()
	}
	// All offsets committed: the group's lag is zero.
	offs, err := adm.FetchOffsets(context.Background(), "g1")
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	offs.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != 600 {
		t.Fatalf("committed offsets add up to %d, want 600", total)
	}
	// A new member resumes from the commits: it reads only what comes next.
	ends, err := adm.ListEndOffsets(context.Background(), "gt")
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, cl, "gt", 6)
	again := client(t, b, kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("gt"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel2()
	var got []*kgo.Record
	for len(got) < 6 && ctx2.Err() == nil {
		got = append(got, again.PollFetches(ctx2).Records()...)
	}
	for _, r := range got {
		if end, _ := ends.Lookup("gt", r.Partition); r.Offset < end.Offset {
			t.Fatalf("re-read committed record at offset %d of partition %d (committed end %d)", r.Offset, r.Partition, end.Offset)
		}
	}
	if len(got) != 6 {
		t.Fatalf("resumed consumer read %d records, want 6", len(got))
	}
}

func TestTrap9OffsetFetchNullTopicsReturnsAll(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	createTopic(t, cl, "of", 3, nil)
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	// Unknown group: -1 offsets and no error (Apache's answer).
	req := kmsg.NewPtrOffsetFetchRequest()
	req.SetVersion(7)
	req.Group = "never"
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "of", []int32{0, 1}
	req.Topics = append(req.Topics, rt)
	resp := roundTrip(t, b, req).(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || resp.Topics[0].Partitions[1].Offset != -1 {
		t.Fatalf("unknown group: %+v", resp)
	}
	// Simple commits (generation -1), then a null topic list returns all (trap 9).
	commit := kadm.Offsets{}
	commit.AddOffset("of", 0, 10, -1)
	commit.AddOffset("of", 2, 30, 4)
	if _, err := adm.CommitOffsets(ctx, "simple", commit); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int16{2, 7, 8, 9} {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.SetVersion(v)
		req.Group = "simple"
		req.Topics = nil
		if v >= 8 {
			req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "simple", Topics: nil}}
		}
		resp := roundTrip(t, b, req).(*kmsg.OffsetFetchResponse)
		var got []string
		if v >= 8 {
			for _, tt := range resp.Groups[0].Topics {
				for _, p := range tt.Partitions {
					got = append(got, fmt.Sprintf("%s/%d=%d@%d", tt.Topic, p.Partition, p.Offset, p.LeaderEpoch))
				}
			}
		} else {
			for _, tt := range resp.Topics {
				for _, p := range tt.Partitions {
					got = append(got, fmt.Sprintf("%s/%d=%d@%d", tt.Topic, p.Partition, p.Offset, p.LeaderEpoch))
				}
			}
		}
		want := "[of/0=10@-1 of/2=30@4]"
		if v < 5 { // no leader epoch before v5
			want = "[of/0=10@-1 of/2=30@-1]"
		}
		if fmt.Sprint(got) != want {
			t.Fatalf("v%d null topics: %v", v, got)
		}
	}
	// Metadata over 4096 bytes.
	big := kmsg.NewPtrOffsetCommitRequest()
	big.Group, big.Generation = "simple", -1
	bt := kmsg.NewOffsetCommitRequestTopic()
	bt.Topic = "of"
	bp := kmsg.NewOffsetCommitRequestTopicPartition()
	md := string(make([]byte, 5000))
	bp.Metadata = &md
	bt.Partitions = append(bt.Partitions, bp)
	big.Topics = append(big.Topics, bt)
	bresp, err := big.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if c := bresp.Topics[0].Partitions[0].ErrorCode; c != kerr.OffsetMetadataTooLarge.Code {
		t.Fatalf("big metadata: %v", kerr.ErrorForCode(c))
	}
	// A member commit to a group with no membership here: ILLEGAL_GENERATION.
	big.Generation, big.MemberID = 3, "ghost"
	bp.Metadata = nil
	big.Topics[0].Partitions[0] = bp
	bresp, _ = big.RequestWith(ctx, cl)
	if c := bresp.Topics[0].Partitions[0].ErrorCode; c != kerr.IllegalGeneration.Code {
		t.Fatalf("ghost member commit: %v", kerr.ErrorForCode(c))
	}
}

func TestDeleteGroupsAndListGroups(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	createTopic(t, cl, "dg", 1, nil)
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	commit := kadm.Offsets{}
	commit.AddOffset("dg", 0, 5, -1)
	if _, err := adm.CommitOffsets(ctx, "offsets-only", commit); err != nil {
		t.Fatal(err)
	}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listed["offsets-only"]; !ok || len(listed) != 1 {
		t.Fatalf("listed %v", listed.Groups())
	}
	// Trap 2: a group that exists only as an offsets file is deleted.
	resp, err := adm.DeleteGroups(ctx, "offsets-only", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if resp["offsets-only"].Err != nil || resp["missing"].Err != kerr.GroupIDNotFound {
		t.Fatalf("delete: %v / %v", resp["offsets-only"].Err, resp["missing"].Err)
	}
	listed, _ = adm.ListGroups(ctx)
	if len(listed) != 0 {
		t.Fatalf("deleted group still listed: %v", listed.Groups())
	}
	offs, _ := adm.FetchOffsets(ctx, "offsets-only")
	if o, ok := offs.Lookup("dg", 0); ok && o.At != -1 {
		t.Fatalf("deleted group's offset survived: %+v", o)
	}
	// Describe of an unknown group: Dead (v5) / GROUP_ID_NOT_FOUND (v6).
	for _, v := range []int16{5, 6} {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.SetVersion(v)
		req.Groups = []string{"missing"}
		dresp := roundTrip(t, b, req).(*kmsg.DescribeGroupsResponse)
		g := dresp.Groups[0]
		if g.State != "Dead" || (v == 6) != (g.ErrorCode == kerr.GroupIDNotFound.Code) {
			t.Fatalf("v%d: state %q error %d", v, g.State, g.ErrorCode)
		}
	}
}

func TestFindCoordinatorBatchedAndKeyTypes(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.SetVersion(4)
	req.CoordinatorKeys = []string{"a", "b", "c"}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := splitHostPort(b.Addr())
	for _, c := range resp.Coordinators {
		if c.ErrorCode != 0 || c.NodeID != 0 || c.Port != port {
			t.Fatalf("%+v", c)
		}
	}
	req.CoordinatorType = 7
	resp, _ = req.RequestWith(context.Background(), cl)
	if resp.Coordinators[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("unknown key type: %d", resp.Coordinators[0].ErrorCode)
	}
}
