package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kaas-dev/kaas/internal/kafkaref"
	"github.com/kaas-dev/kaas/internal/proctest"
)

// TestGroupAnswersMatchKafka sends the same raw group requests to kaas and
// to the Apache Kafka reference cluster and compares what comes back: the
// error codes, and the fields a client acts on (member epochs, who got a
// member id, heartbeat intervals, how many partitions were assigned, group
// states and types). Each case runs on a group of its own, on each target,
// and says what it saw as lines; the lines must be the same. Kafka's error
// messages are not compared (kaas words its own). Run by
// scripts/conformance.sh --protocol (docs/conformance.md, "Answers side by
// side").
func TestGroupAnswersMatchKafka(t *testing.T) {
	if os.Getenv("KAAS_CONFORMANCE_PROTOCOL") == "" {
		t.Skip("KAAS_CONFORMANCE_PROTOCOL=1 (scripts/conformance.sh --protocol)")
	}
	needKafka(t)
	dir := out()
	kc := kafkaref.Start(t, kafkaref.Options{Dir: filepath.Join(t.TempDir(), "kafka"), LogDir: filepath.Join(dir, "protocol-kafka")})
	pc := proctest.New(t, proctest.Options{Brokers: 3, LogDir: filepath.Join(dir, "protocol-kaas")})
	if err := pc.StartAll(); err != nil {
		t.Fatal(err)
	}
	targets := []protoTarget{{name: "kaas", addrs: pc.Addrs()}, {name: "kafka", addrs: kc.Addrs()}}
	for i := range targets {
		targets[i].setup(t)
	}
	var report strings.Builder
	fmt.Fprintf(&report, "# Group answers side by side: kaas and Apache Kafka %s\n\n"+
		"Written by `scripts/conformance.sh --protocol` (`TestGroupAnswersMatchKafka`; docs/conformance.md, "+
		"\"Answers side by side\"), %s: the same raw requests to both clusters, one group per case; each cell "+
		"lists what came back, line by line. An epoch shown as `*`, and a request whose line is not shown, "+
		"depend on when each computes a target (see the doc).\n\n", kafkaref.Version, time.Now().UTC().Format("2006-01-02"))
	report.WriteString("| case | kaas | Apache Kafka " + kafkaref.Version + " |\n|---|---|---|\n")
	for _, c := range protoCases {
		t.Run(c.name, func(t *testing.T) {
			var seen [2][]string
			for i := range targets {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				e := &protoEnv{t: t, ctx: ctx, tg: &targets[i], group: fmt.Sprintf("proto-%s-%d", c.name, time.Now().UnixNano())}
				c.run(e)
				cancel()
				seen[i] = e.seen
			}
			same := slices.EqualFunc(seen[0], seen[1], func(a, b string) bool { return a == b || knownDifference(c.name, a, b) })
			fmt.Fprintf(&report, "| %s | %s | %s |\n", c.name, strings.Join(seen[0], "<br>"), strings.Join(seen[1], "<br>"))
			if !same {
				t.Errorf("kaas and Kafka answered differently:\nkaas:\n  %s\nkafka:\n  %s",
					strings.Join(seen[0], "\n  "), strings.Join(seen[1], "\n  "))
			}
		})
	}
	if err := os.WriteFile(filepath.Join(dir, "PROTOCOL.md"), []byte(report.String()), 0o644); err != nil {
		t.Error(err)
	}
}

// knownDifferences are the answers kaas gives on purpose where Kafka
// differs, by case and by the label of the line (docs/conformance.md,
// "Answers side by side").
var knownDifferences = map[string][]string{
	// Kafka 4.4 refuses only a null group id for offsets; kaas keeps no
	// offsets for the empty one (every other group API refuses it on
	// both).
	"empty-group-id": {"offset commit", "offset fetch"},
}

func knownDifference(name, a, b string) bool {
	for _, label := range knownDifferences[name] {
		if strings.HasPrefix(a, label+": ") && strings.HasPrefix(b, label+": ") {
			return true
		}
	}
	return false
}

// protoTarget is one cluster: its addresses, its clients (one speaking the
// newest versions both sides know, others pinned lower) and the test topic.
type protoTarget struct {
	name    string
	addrs   []string
	t       *testing.T // the whole test's: the clients live as long
	cl      *kgo.Client
	pinned  map[string]*kgo.Client
	topicID [16]byte
}

const (
	protoTopic = "proto-t"
	protoParts = 4
	protoOther = "proto-other"
)

func (tg *protoTarget) setup(t *testing.T) {
	t.Helper()
	tg.t, tg.pinned = t, map[string]*kgo.Client{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(tg.addrs...), kgo.ClientID("proto"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	tg.cl = cl
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	for _, name := range []string{protoTopic, protoOther} {
		if _, err := adm.CreateTopic(ctx, protoParts, -1, nil, name); err != nil && !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
			t.Fatalf("%s: create %s: %v", tg.name, name, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := adm.Metadata(ctx, protoTopic, protoOther)
		if err == nil && md.Topics[protoTopic].Err == nil && md.Topics[protoOther].Err == nil &&
			len(md.Topics[protoTopic].Partitions) == protoParts && md.Topics[protoTopic].ID != [16]byte{} {
			tg.topicID = md.Topics[protoTopic].ID
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: topics not ready: %v", tg.name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The group and transaction coordinators answer once Kafka has made
	// its offsets and transaction state topics.
	for _, keyType := range []int8{0, 1} {
		for {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.CoordinatorType, req.CoordinatorKeys = keyType, []string{"proto-warm-up"}
			resp, err := req.RequestWith(ctx, cl)
			if err == nil && len(resp.Coordinators) == 1 && resp.Coordinators[0].ErrorCode == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no coordinator of type %d: %v", tg.name, keyType, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// client is a client whose highest version of API key is max (-1: the
// newest both sides know).
func (tg *protoTarget) client(t *testing.T, key int16, max int16) *kgo.Client {
	if max < 0 {
		return tg.cl
	}
	name := fmt.Sprintf("%d/%d", key, max)
	if cl := tg.pinned[name]; cl != nil {
		return cl
	}
	v := kversion.Stable()
	v.SetMaxKeyVersion(key, max)
	cl, err := kgo.NewClient(kgo.SeedBrokers(tg.addrs...), kgo.ClientID("proto"), kgo.MaxVersions(v))
	if err != nil {
		t.Fatal(err)
	}
	tg.t.Cleanup(cl.Close)
	tg.pinned[name] = cl
	return cl
}

// protoEnv is one case's run on one target: its group, and what it saw.
type protoEnv struct {
	t      *testing.T
	ctx    context.Context
	tg     *protoTarget
	group  string
	seen   []string
	direct bool // requests go to the group's coordinator as they are
	joined int  // the members that joined so far
}

func (e *protoEnv) see(format string, args ...any) {
	e.seen = append(e.seen, fmt.Sprintf(format, args...))
}

func codeName(code int16) string {
	if code == 0 {
		return "NONE"
	}
	if err := kerr.ErrorForCode(code); err != nil {
		if ke, ok := err.(*kerr.Error); ok {
			return ke.Message
		}
	}
	return fmt.Sprintf("code %d", code)
}

func (e *protoEnv) do(key, max int16, req kmsg.Request) kmsg.Response {
	e.t.Helper()
	cl := e.tg.client(e.t, key, max)
	var resp kmsg.Response
	var err error
	if e.direct {
		// As written, to the group's coordinator: the client's own
		// handling of group requests stays out of the way.
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorKeys = []string{e.group}
		var fr *kmsg.FindCoordinatorResponse
		if fr, err = fc.RequestWith(e.ctx, cl); err == nil && len(fr.Coordinators) == 1 {
			resp, err = cl.Broker(int(fr.Coordinators[0].NodeID)).Request(e.ctx, req)
		} else if err == nil {
			err = fmt.Errorf("FindCoordinator: %d coordinators", len(fr.Coordinators))
		}
	} else {
		resp, err = cl.Request(e.ctx, req)
	}
	if err != nil {
		e.t.Fatalf("%s: %T: %v", e.tg.name, req, err)
	}
	return resp
}

// heartbeat sends req, again while the coordinator is loading the group's
// partition (Kafka, right after it made its offsets topic) or moving it.
func (e *protoEnv) heartbeat(v int16, req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	e.t.Helper()
	for range 100 {
		resp := e.do(req.Key(), v, req).(*kmsg.ConsumerGroupHeartbeatResponse)
		switch resp.ErrorCode {
		case kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code:
			time.Sleep(100 * time.Millisecond)
			continue
		}
		return resp
	}
	e.t.Fatalf("%s: the group's coordinator did not come up", e.tg.name)
	return nil
}

// member is a KIP-848 member of the case's group as the test drives it.
type cmember struct {
	id       string
	epoch    int32
	owned    []int32
	instance *string
}

// hb sends a ConsumerGroupHeartbeat (v is its version, -1 the newest):
// epoch 0 joins subscribing to the test topic, with a rebalance timeout;
// later ones report what the member owns. edit adjusts the request. The
// answer updates m (id, epoch, owned when an assignment came) and is seen
// as label's line (not seen: a label starting with "-").
func (e *protoEnv) hb(label string, v int16, m *cmember, edit func(*kmsg.ConsumerGroupHeartbeatRequest)) *kmsg.ConsumerGroupHeartbeatResponse {
	e.t.Helper()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group, req.MemberID, req.MemberEpoch, req.InstanceID = e.group, m.id, m.epoch, m.instance
	req.RebalanceTimeoutMillis = -1
	if m.epoch == 0 {
		req.RebalanceTimeoutMillis = 30000
		req.SubscribedTopicNames = []string{protoTopic}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	} else if m.epoch > 0 {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: e.tg.topicID, Partitions: slices.Clone(m.owned)}}
	}
	if edit != nil {
		edit(req)
	}
	joining := m.epoch == 0
	resp := e.heartbeat(v, req)
	line := fmt.Sprintf("%s: %s", label, codeName(resp.ErrorCode))
	if resp.ErrorCode == 0 {
		epoch := fmt.Sprint(resp.MemberEpoch)
		if joining && e.joined > 0 {
			// Kafka computes the new target at most once a second
			// (consumer.assignment.interval.ms) and answers a join into a
			// group with members at the target it has; kaas at once.
			epoch = "*"
		}
		if joining {
			e.joined++
		}
		idNote := "kept"
		switch {
		case resp.MemberID == nil || *resp.MemberID == "":
			idNote = "none"
		case m.id == "":
			idNote = "given"
		case *resp.MemberID != m.id:
			idNote = "changed"
		}
		line += fmt.Sprintf(" id=%s epoch=%s hb=%d", idNote, epoch, resp.HeartbeatIntervalMillis)
		if resp.MemberID != nil && *resp.MemberID != "" {
			m.id = *resp.MemberID
		}
		m.epoch = resp.MemberEpoch
		if a := resp.Assignment; a != nil {
			m.owned = nil
			others := 0
			for _, tp := range a.Topics {
				if tp.TopicID == e.tg.topicID {
					m.owned = append(m.owned, tp.Partitions...)
				} else {
					others += len(tp.Partitions)
				}
			}
			slices.Sort(m.owned)
			if epoch != "*" { // what a join into a group with members gets at once is timing, as its epoch
				line += fmt.Sprintf(" assigned=%d", len(m.owned)+others)
			}
		}
	}
	if !strings.HasPrefix(label, "-") {
		e.see("%s", line)
	}
	return resp
}

// settle heartbeats the members until the group is Stable, every member
// at the group's epoch owning its target (Kafka computes a target at most
// once a second, kaas at once: a few seconds at most); its lines are not
// seen (how many rounds that takes is the targets' business).
func (e *protoEnv) settle(ms ...*cmember) {
	e.t.Helper()
	for range 200 {
		for _, m := range ms {
			req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			req.Group, req.MemberID, req.MemberEpoch, req.InstanceID = e.group, m.id, m.epoch, m.instance
			req.RebalanceTimeoutMillis = -1
			req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: e.tg.topicID, Partitions: slices.Clone(m.owned)}}
			resp := e.heartbeat(-1, req)
			if resp.ErrorCode != 0 {
				e.t.Fatalf("%s: settle: %s", e.tg.name, codeName(resp.ErrorCode))
			}
			m.epoch = resp.MemberEpoch
			if a := resp.Assignment; a != nil {
				m.owned = nil
				for _, tp := range a.Topics {
					m.owned = append(m.owned, tp.Partitions...)
				}
				slices.Sort(m.owned)
			}
		}
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{e.group}
		g := e.do(req.Key(), -1, req).(*kmsg.ConsumerGroupDescribeResponse).Groups[0]
		stable := g.ErrorCode == 0 && g.State == "Stable" && g.Epoch == g.AssignmentEpoch
		for _, m := range ms {
			stable = stable && m.epoch == g.Epoch
		}
		if stable {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("%s: members not settled after 200 rounds", e.tg.name)
}

func newMember(e *protoEnv, name string) *cmember {
	return &cmember{id: fmt.Sprintf("%s-%s-%d", e.group, name, time.Now().UnixNano())}
}

func str(s string) *string { return &s }

// classicJoin joins the group with the classic protocol, protocol type
// ptype, and completes the generation with SyncGroup when sync is set
// (cjoin, csync). Returns the member id and generation.
func (e *protoEnv) classicJoin(label, ptype string, sync bool) (string, int32) {
	e.t.Helper()
	j := e.cjoin(label+": join", -1, joinRequest(e.group, ptype, "", nil, 0))
	if j.ErrorCode == 0 && sync {
		e.csync(label+": sync", ptype, j.MemberID, j.Generation, nil, j.LeaderID == j.MemberID)
	}
	return j.MemberID, j.Generation
}

func (e *protoEnv) commit(label string, v int16, memberID string, gen int32) {
	e.t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = e.group, memberID, gen
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: protoTopic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 0, LeaderEpoch: -1}}}}
	resp := e.do(req.Key(), v, req).(*kmsg.OffsetCommitResponse)
	code := int16(-1)
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			code = p.ErrorCode
		}
	}
	e.see("%s: %s", label, codeName(code))
}

func (e *protoEnv) fetch(label string, memberID *string, epoch int32) {
	e.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group, g.MemberID, g.MemberEpoch = e.group, memberID, epoch
	g.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: protoTopic, Partitions: []int32{0}}}
	req.Groups = []kmsg.OffsetFetchRequestGroup{g}
	resp := e.do(req.Key(), 9, req).(*kmsg.OffsetFetchResponse)
	code := int16(-1)
	for _, g := range resp.Groups {
		code = g.ErrorCode
	}
	e.see("%s: %s", label, codeName(code))
}

func (e *protoEnv) describe(label string) {
	e.t.Helper()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{e.group}
	resp := e.do(req.Key(), -1, req).(*kmsg.ConsumerGroupDescribeResponse)
	for _, g := range resp.Groups {
		line := fmt.Sprintf("%s: %s", label, codeName(g.ErrorCode))
		if g.ErrorCode == 0 {
			line += fmt.Sprintf(" state=%s epoch=%d assignment-epoch=%d assignor=%s members=%d", g.State, g.Epoch, g.AssignmentEpoch, g.AssignorName, len(g.Members))
			var ms []string
			for _, m := range g.Members {
				n, tn := 0, 0
				for _, tp := range m.Assignment.TopicPartitions {
					n += len(tp.Partitions)
				}
				for _, tp := range m.TargetAssignment.TopicPartitions {
					tn += len(tp.Partitions)
				}
				regex := ""
				if m.SubscribedTopicRegex != nil {
					regex = " regex=" + *m.SubscribedTopicRegex
				}
				// Kafka keeps a member's topics in a hash set, so their order
				// is its hash order: not compared.
				subscribed := slices.Sorted(slices.Values(m.SubscribedTopics))
				ms = append(ms, fmt.Sprintf(" [epoch=%d subscribed=%v%s owns=%d target=%d type=%d]", m.MemberEpoch, subscribed, regex, n, tn, m.MemberType))
			}
			slices.Sort(ms)
			line += strings.Join(ms, "")
		}
		e.see("%s", line)
	}
}

func (e *protoEnv) describeClassic(label string) {
	e.t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{e.group}
	resp := e.do(req.Key(), -1, req).(*kmsg.DescribeGroupsResponse)
	for _, g := range resp.Groups {
		e.see("%s: %s state=%q type=%q protocol=%q members=%d", label, codeName(g.ErrorCode), g.State, g.ProtocolType, g.Protocol, len(g.Members))
	}
}

func (e *protoEnv) list(label string, states, types []string) {
	e.t.Helper()
	req := kmsg.NewPtrListGroupsRequest()
	req.StatesFilter, req.TypesFilter = states, types
	resp := e.do(req.Key(), -1, req).(*kmsg.ListGroupsResponse)
	line := fmt.Sprintf("%s: %s", label, codeName(resp.ErrorCode))
	for _, g := range resp.Groups {
		if g.Group == e.group {
			line += fmt.Sprintf(" listed state=%s type=%s protocol-type=%q", g.GroupState, g.GroupType, g.ProtocolType)
		}
	}
	e.see("%s", line)
}

// joinRequest is a classic JoinGroup of a consumer subscribed to the test
// topic with the range assignor: protocol type ptype, the member id and
// instance id given, session timeout session (0: 30 s).
func joinRequest(group, ptype, memberID string, instance *string, session int32) *kmsg.JoinGroupRequest {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version, meta.Topics = 3, []string{protoTopic}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = group, 30000, 30000
	if session != 0 {
		join.SessionTimeoutMillis = session
	}
	join.MemberID, join.InstanceID, join.ProtocolType = memberID, instance, ptype
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: meta.AppendTo(nil)}}
	return join
}

// joinAs sends join with send and, when it is answered MEMBER_ID_REQUIRED,
// again with the id given.
func joinAs(send func(kmsg.Request) (kmsg.Response, error), join *kmsg.JoinGroupRequest) (*kmsg.JoinGroupResponse, error) {
	resp, err := send(join)
	if err == nil && resp.(*kmsg.JoinGroupResponse).ErrorCode == kerr.MemberIDRequired.Code {
		join.MemberID = resp.(*kmsg.JoinGroupResponse).MemberID
		resp, err = send(join)
	}
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.JoinGroupResponse), nil
}

// cjoin is one classic JoinGroup at version v (-1: the newest), seen as
// its error, generation, whether it leads and the members it was told of.
func (e *protoEnv) cjoin(label string, v int16, join *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	e.t.Helper()
	resp, err := joinAs(func(r kmsg.Request) (kmsg.Response, error) { return e.do(r.Key(), v, r), nil }, join)
	if err != nil {
		e.t.Fatal(err)
	}
	e.see("%s: %s gen=%d leader=%v members=%d", label, codeName(resp.ErrorCode), resp.Generation,
		resp.LeaderID == resp.MemberID && resp.MemberID != "", len(resp.Members))
	return resp
}

// syncRequest is a SyncGroup of generation gen for member id, protocol
// type ptype and the range protocol; a leader's gives itself every
// partition.
func syncRequest(group, ptype, id string, gen int32, instance *string, leader bool) *kmsg.SyncGroupRequest {
	sreq := kmsg.NewPtrSyncGroupRequest()
	sreq.Group, sreq.Generation, sreq.MemberID, sreq.InstanceID = group, gen, id, instance
	sreq.ProtocolType, sreq.Protocol = &ptype, str("range")
	if leader {
		a := kmsg.NewConsumerMemberAssignment()
		a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: protoTopic, Partitions: []int32{0, 1, 2, 3}}}
		sreq.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: id, MemberAssignment: a.AppendTo(nil)}}
	}
	return sreq
}

func (e *protoEnv) csync(label, ptype, id string, gen int32, instance *string, leader bool) {
	e.t.Helper()
	sreq := syncRequest(e.group, ptype, id, gen, instance, leader)
	e.see("%s: %s", label, codeName(e.do(sreq.Key(), -1, sreq).(*kmsg.SyncGroupResponse).ErrorCode))
}

// classicHeartbeat is a classic Heartbeat's error code.
func (e *protoEnv) classicHeartbeat(id string, gen int32, instance *string) int16 {
	e.t.Helper()
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = e.group, id, gen, instance
	return e.do(hb.Key(), -1, hb).(*kmsg.HeartbeatResponse).ErrorCode
}

func (e *protoEnv) cbeat(label, id string, gen int32, instance *string) {
	e.t.Helper()
	e.see("%s: %s", label, codeName(e.classicHeartbeat(id, gen, instance)))
}

// cbeatUntilRefused heartbeats member id until an answer is an error (a
// rebalance it learns of at a heartbeat), at most 10 s, and sees that
// answer.
func (e *protoEnv) cbeatUntilRefused(label, id string, gen int32) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	code := e.classicHeartbeat(id, gen, nil)
	for code == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		code = e.classicHeartbeat(id, gen, nil)
	}
	e.see("%s: %s", label, codeName(code))
}

func (e *protoEnv) cleave(label string, members ...kmsg.LeaveGroupRequestMember) {
	e.t.Helper()
	lv := kmsg.NewPtrLeaveGroupRequest()
	lv.Group, lv.Members = e.group, members
	lr := e.do(lv.Key(), -1, lv).(*kmsg.LeaveGroupResponse)
	line := fmt.Sprintf("%s: %s", label, codeName(lr.ErrorCode))
	for _, m := range lr.Members {
		line += " " + codeName(m.ErrorCode)
	}
	e.see("%s", line)
}

func (e *protoEnv) txnCommit(label, txnID string, pid int64, pepoch int16, memberID string, gen int32) {
	e.t.Helper()
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txnID, e.group, pid, pepoch
	req.MemberID, req.Generation = memberID, gen
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: protoTopic, Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 7, LeaderEpoch: -1}}}}
	resp := e.do(req.Key(), 5, req).(*kmsg.TxnOffsetCommitResponse) // v6 names topics by id
	code := int16(-1)
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			code = p.ErrorCode
		}
	}
	e.see("%s: %s", label, codeName(code))
}

// stable is OffsetFetch v9 of partition 0 of the test topic with
// RequireStable.
func (e *protoEnv) stable() kmsg.OffsetFetchResponseGroup {
	e.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.RequireStable = true
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group, g.MemberEpoch = e.group, -1
	g.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: protoTopic, Partitions: []int32{0}}}
	req.Groups = []kmsg.OffsetFetchRequestGroup{g}
	return e.do(req.Key(), 9, req).(*kmsg.OffsetFetchResponse).Groups[0]
}

// fetchStable shows what stable reads.
func (e *protoEnv) fetchStable(label string) {
	e.t.Helper()
	g := e.stable()
	line := fmt.Sprintf("%s: %s", label, codeName(g.ErrorCode))
	for _, tp := range g.Topics {
		for _, p := range tp.Partitions {
			line += fmt.Sprintf(" %s offset=%d", codeName(p.ErrorCode), p.Offset)
		}
	}
	e.see("%s", line)
}

// deleteGroups is DeleteGroups of groups; each answer is shown by the
// group's name past the case's, in order of name (the client merges the
// answers of the groups' coordinators in an order of its own).
func (e *protoEnv) deleteGroups(label string, groups ...string) {
	e.t.Helper()
	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Groups = groups
	var out []string
	for _, g := range e.do(dg.Key(), -1, dg).(*kmsg.DeleteGroupsResponse).Groups {
		out = append(out, fmt.Sprintf("%q=%s", strings.TrimPrefix(g.Group, e.group), codeName(g.ErrorCode)))
	}
	slices.Sort(out)
	e.see("%s: %s", label, strings.Join(out, " "))
}

// txnState is a transactional producer as a case drives it: its id, and
// the producer id and epoch the last answer gave (epochs are shown
// relative to the first one given).
type txnState struct {
	id         string
	inited     bool
	pid        int64
	epoch      int16
	firstEpoch int16
}

// initPID is InitProducerId (v5) for the case's transactional id, again
// while its coordinator loads; its line shows the epoch relative to the
// first.
func (e *protoEnv) initPID(label string, x *txnState, timeoutMs int32) {
	e.t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = &x.id, timeoutMs, -1, -1
	var resp *kmsg.InitProducerIDResponse
	for range 100 {
		resp = e.do(req.Key(), 5, req).(*kmsg.InitProducerIDResponse)
		if resp.ErrorCode != kerr.CoordinatorLoadInProgress.Code && resp.ErrorCode != kerr.CoordinatorNotAvailable.Code && resp.ErrorCode != kerr.NotCoordinator.Code &&
			resp.ErrorCode != kerr.ConcurrentTransactions.Code {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	line := fmt.Sprintf("%s: %s", label, codeName(resp.ErrorCode))
	if resp.ErrorCode == 0 {
		if !x.inited {
			x.firstEpoch = resp.ProducerEpoch
		} else if resp.ProducerID != x.pid {
			line += " new producer id"
		}
		x.inited, x.pid, x.epoch = true, resp.ProducerID, resp.ProducerEpoch
		line += fmt.Sprintf(" epoch=first+%d", x.epoch-x.firstEpoch)
	}
	e.see("%s", line)
}

func (e *protoEnv) addOffsets(label string, x *txnState, pid int64, epoch int16) {
	e.t.Helper()
	req := kmsg.NewPtrAddOffsetsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = x.id, pid, epoch, e.group
	e.see("%s: %s", label, codeName(e.do(req.Key(), 4, req).(*kmsg.AddOffsetsToTxnResponse).ErrorCode))
}

func (e *protoEnv) addPartition(label string, x *txnState, pid int64, epoch int16) {
	e.t.Helper()
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = x.id, pid, epoch
	req.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: protoTopic, Partitions: []int32{0}}}
	resp := e.do(req.Key(), 3, req).(*kmsg.AddPartitionsToTxnResponse)
	line := fmt.Sprintf("%s: %s", label, codeName(resp.ErrorCode))
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			line += " " + codeName(p.ErrorCode)
		}
	}
	e.see("%s", line)
}

// end is EndTxn v4: the flow of transactions v1, which kaas serves (it
// advertises no transaction.version 2, docs/transactions.md; Kafka 4.4
// takes a v5 EndTxn as version 2 and bumps the epoch).
func (e *protoEnv) end(label string, x *txnState, pid int64, epoch int16, commit bool) {
	e.t.Helper()
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = x.id, pid, epoch, commit
	var resp *kmsg.EndTxnResponse
	for range 100 {
		resp = e.do(req.Key(), 4, req).(*kmsg.EndTxnResponse)
		if resp.ErrorCode != kerr.ConcurrentTransactions.Code {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.see("%s: %s", label, codeName(resp.ErrorCode))
}

func (e *protoEnv) describeTxn(label string, x *txnState) {
	e.t.Helper()
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{x.id}
	for _, st := range e.do(req.Key(), 0, req).(*kmsg.DescribeTransactionsResponse).TransactionStates {
		line := fmt.Sprintf("%s: %s", label, codeName(st.ErrorCode))
		if st.ErrorCode == 0 {
			line += fmt.Sprintf(" state=%s timeout=%d topics=%d", st.State, st.TimeoutMillis, len(st.Topics))
		}
		e.see("%s", line)
	}
}

type protoCase struct {
	name string
	run  func(e *protoEnv)
}

var protoCases = []protoCase{
	{"join-v0-member-id-from-server", func(e *protoEnv) {
		e.hb("join v0", 0, &cmember{}, nil)
	}},
	{"join-v1-needs-member-id", func(e *protoEnv) {
		e.hb("join v1 no id", 1, &cmember{}, nil)
	}},
	{"join-v1-and-heartbeat", func(e *protoEnv) {
		m := newMember(e, "a")
		e.hb("join", 1, m, nil)
		e.hb("heartbeat", 1, m, nil)
		e.describe("describe")
		e.describeClassic("describe classic")
		e.list("list consumer", nil, []string{"consumer"})
		e.list("list classic", nil, []string{"classic"})
		e.list("list stable", []string{"Stable"}, nil)
	}},
	{"join-invalid", func(e *protoEnv) {
		e.hb("no subscription", 1, newMember(e, "a"), func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil })
		e.hb("no rebalance timeout", 1, newMember(e, "b"), func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMillis = -1 })
		e.hb("owns at join", 1, newMember(e, "c"), func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: e.tg.topicID, Partitions: []int32{0}}}
		})
		e.hb("no topics field", 1, newMember(e, "d"), func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Topics = nil })
		e.hb("empty group", 1, newMember(e, "e"), func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Group = "" })
		e.hb("unknown assignor", 1, newMember(e, "f"), func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = str("nope") })
		e.hb("bad regex", 1, newMember(e, "g"), func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.SubscribedTopicNames, r.SubscribedTopicRegex = nil, str("(")
		})
		e.hb("negative epoch", 1, &cmember{id: "x", epoch: -3}, nil)
	}},
	{"oversized-subscription", func(e *protoEnv) {
		// A member's metadata is one record of __consumer_offsets on
		// Kafka, at most message.max.bytes (1 MiB); 50,000 names of 206
		// bytes are 10 MB (docs/operations.md, "Limits").
		names := make([]string, 50000)
		for i := range names {
			names[i] = fmt.Sprintf("%s-%05d", strings.Repeat("t", 200), i)
		}
		e.hb("10 MB of topic names", 1, newMember(e, "a"), func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = names })
		e.hb("another member, one topic", 1, newMember(e, "b"), nil)
		e.describe("describe")
	}},
	{"join-range-and-unknown-topic", func(e *protoEnv) {
		a, b := newMember(e, "a"), newMember(e, "b")
		e.hb("range", 1, a, func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = str("range") })
		e.settle(a)
		e.hb("no such topic", 1, b, func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.SubscribedTopicNames = []string{"proto-no-such-topic"}
		})
		e.settle(a, b)
		e.describe("describe")
	}},
	{"join-regex", func(e *protoEnv) {
		m := newMember(e, "a")
		// Kafka resolves a regex after it answers the join (epoch 1,
		// nothing assigned), kaas before (epoch 2, every partition):
		// compared once settled.
		e.hb("-join", 1, m, func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.SubscribedTopicNames, r.SubscribedTopicRegex = nil, str("proto-t")
		})
		e.settle(m)
		e.describe("describe")
	}},
	{"group-epochs", func(e *protoEnv) {
		a, b, c := newMember(e, "a"), newMember(e, "b"), newMember(e, "c")
		e.hb("join a", 1, a, nil)
		e.settle(a)
		e.hb("join b, same topic", 1, b, nil)
		e.settle(a, b)
		e.describe("describe")
		e.hb("join c, another topic", 1, c, func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = []string{protoOther} })
		e.settle(a, b, c)
		e.describe("describe")
		// Its answer's epoch is the target's timing again (Kafka's comes
		// at most a second later): compared once settled.
		e.hb("-a adds the other topic", 1, a, func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = []string{protoTopic, protoOther} })
		e.settle(a, b, c)
		e.describe("describe")
		e.hb("b heartbeats, nothing changed", 1, b, nil)
		e.hb("b sends the same subscription", 1, b, func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = []string{protoTopic} })
		e.describe("describe")
	}},
	{"sync-group-protocol-fields", func(e *protoEnv) {
		id, gen := e.classicJoin("classic consumer member", "consumer", true)
		for _, v := range []int16{5, 4} {
			sy := kmsg.NewPtrSyncGroupRequest()
			sy.Group, sy.MemberID, sy.Generation = e.group, id, gen
			e.see("sync v%d without protocol type and name: %s", v, codeName(e.do(sy.Key(), v, sy).(*kmsg.SyncGroupResponse).ErrorCode))
			sy.ProtocolType = str("consumer")
			e.see("sync v%d without protocol name: %s", v, codeName(e.do(sy.Key(), v, sy).(*kmsg.SyncGroupResponse).ErrorCode))
			sy.Group = e.group + "-none"
			sy.ProtocolType = nil
			e.see("sync v%d unknown group without them: %s", v, codeName(e.do(sy.Key(), v, sy).(*kmsg.SyncGroupResponse).ErrorCode))
		}
	}},
	{"empty-group-id", func(e *protoEnv) {
		e.group, e.direct = "", true
		e.hb("consumer group heartbeat", 1, newMember(e, "a"), nil)
		e.describe("consumer group describe")
		e.describeClassic("describe groups")
		e.commit("offset commit", 9, "", -1)
		e.fetch("offset fetch", nil, -1)
		e.classicJoin("classic join", "consumer", false)
	}},
	{"unknown-member-and-epochs", func(e *protoEnv) {
		e.hb("unknown group", 1, &cmember{id: "nobody", epoch: 1}, nil)
		m := newMember(e, "a")
		e.hb("join", 1, m, nil)
		e.hb("unknown member", 1, &cmember{id: "nobody", epoch: 1}, nil)
		e.hb("epoch ahead", 1, &cmember{id: m.id, epoch: m.epoch + 5}, nil)
		e.hb("epoch behind", 1, &cmember{id: m.id, epoch: m.epoch - 1}, nil)
		e.hb("rejoin known id", 1, &cmember{id: m.id}, nil)
	}},
	{"previous-epoch-tolerated", func(e *protoEnv) {
		a, b := newMember(e, "a"), newMember(e, "b")
		e.hb("join a", 1, a, nil)
		e.settle(a)
		old := *a
		e.hb("join b", 1, b, nil)
		e.settle(a, b)
		e.hb("a at its previous epoch, owning its old partitions", 1, &cmember{id: old.id, epoch: a.epoch - 1, owned: old.owned}, nil)
		e.hb("a at its previous epoch, owning its current ones", 1, &cmember{id: a.id, epoch: a.epoch - 1, owned: a.owned}, nil)
	}},
	{"leave", func(e *protoEnv) {
		m := newMember(e, "a")
		e.hb("join", 1, m, nil)
		e.hb("leave", 1, &cmember{id: m.id, epoch: -1}, nil)
		e.hb("after leave", 1, m, nil)
		e.describe("describe")
		e.hb("leave unknown", 1, &cmember{id: "nobody", epoch: -1}, nil)
	}},
	{"static-members", func(e *protoEnv) {
		a := newMember(e, "a")
		a.instance = str("inst-1")
		e.hb("join a", 1, a, nil)
		b := newMember(e, "b")
		b.instance = str("inst-1")
		e.hb("join b same instance", 1, b, nil)
		e.hb("a static leave", 1, &cmember{id: a.id, epoch: -2, instance: a.instance}, nil)
		e.describe("describe after static leave")
		e.hb("join b same instance", 1, b, nil)
		e.hb("a again", 1, a, nil)
		e.hb("b leaves", 1, &cmember{id: b.id, epoch: -1, instance: b.instance}, nil)
		e.hb("static leave without instance", 1, &cmember{id: "nobody", epoch: -2}, nil)
	}},
	{"offsets-with-member-epochs", func(e *protoEnv) {
		m := newMember(e, "a")
		e.hb("join", 1, m, nil)
		e.commit("commit v9 at epoch", 9, m.id, m.epoch)
		e.commit("commit v9 epoch behind", 9, m.id, m.epoch-1)
		e.commit("commit v9 epoch ahead", 9, m.id, m.epoch+1)
		e.commit("commit v9 unknown member", 9, "nobody", m.epoch)
		e.commit("commit v9 no member", 9, "", -1)
		e.commit("commit v8 from the member", 8, m.id, m.epoch)
		e.fetch("fetch at epoch", &m.id, m.epoch)
		e.fetch("fetch epoch behind", &m.id, m.epoch-1)
		e.fetch("fetch epoch ahead", &m.id, m.epoch+1)
		e.fetch("fetch unknown member", str("nobody"), m.epoch)
		e.fetch("fetch no member", nil, -1)
	}},
	{"delete-rules", func(e *protoEnv) {
		m := newMember(e, "a")
		e.hb("join", 1, m, nil)
		e.commit("commit", 9, m.id, m.epoch)
		od := kmsg.NewPtrOffsetDeleteRequest()
		od.Group = e.group
		od.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: protoTopic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
		odr := e.do(od.Key(), -1, od).(*kmsg.OffsetDeleteResponse)
		for _, tp := range odr.Topics {
			for _, p := range tp.Partitions {
				e.see("offset delete subscribed: %s %s", codeName(odr.ErrorCode), codeName(p.ErrorCode))
			}
		}
		e.deleteGroups("delete non-empty", e.group)
		e.hb("leave", 1, &cmember{id: m.id, epoch: -1}, nil)
		e.list("list empty", nil, nil)
		e.deleteGroups("delete empty", e.group)
		e.describe("describe deleted")
	}},
	{"classic-apis-on-a-consumer-group", func(e *protoEnv) {
		m := newMember(e, "a")
		e.hb("join", 1, m, nil)
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Group, hb.MemberID, hb.Generation = e.group, m.id, m.epoch
		e.see("classic heartbeat: %s", codeName(e.do(hb.Key(), -1, hb).(*kmsg.HeartbeatResponse).ErrorCode))
		sy := kmsg.NewPtrSyncGroupRequest()
		sy.Group, sy.MemberID, sy.Generation = e.group, m.id, m.epoch
		e.see("classic sync: %s", codeName(e.do(sy.Key(), -1, sy).(*kmsg.SyncGroupResponse).ErrorCode))
		lv := kmsg.NewPtrLeaveGroupRequest()
		lv.Group = e.group
		lv.Members = []kmsg.LeaveGroupRequestMember{{MemberID: m.id}}
		lr := e.do(lv.Key(), -1, lv).(*kmsg.LeaveGroupResponse)
		for _, mr := range lr.Members {
			e.see("classic leave: %s %s", codeName(lr.ErrorCode), codeName(mr.ErrorCode))
		}
		e.classicJoin("classic connect member", "connect", false)
		e.classicJoin("classic consumer member", "consumer", true)
		e.describe("describe")
	}},
	{"consumer-join-on-a-classic-group", func(e *protoEnv) {
		e.classicJoin("classic connect member", "connect", true)
		e.hb("consumer join", 1, newMember(e, "a"), nil)
		e.describe("describe")
		e.describeClassic("describe classic")
		e.list("list", nil, nil)
	}},
	{"consumer-join-upgrades-a-classic-group", func(e *protoEnv) {
		e.classicJoin("classic consumer member", "consumer", true)
		e.list("list before", nil, nil)
		e.hb("consumer join", 1, newMember(e, "a"), nil)
		e.list("list after", nil, nil)
		e.describe("describe")
	}},
	{"classic-join-errors", func(e *protoEnv) {
		e.cjoin("unknown member id", -1, joinRequest(e.group, "consumer", "nobody", nil, 0))
		e.cjoin("session timeout too short", -1, joinRequest(e.group, "consumer", "", nil, 1))
		e.cjoin("session timeout too long", -1, joinRequest(e.group, "consumer", "", nil, 3_600_000))
		j := e.cjoin("join", -1, joinRequest(e.group, "consumer", "", nil, 0))
		e.cjoin("join again, same id", -1, joinRequest(e.group, "consumer", j.MemberID, nil, 0))
		e.cjoin("v3 join without an id", 3, joinRequest(e.group, "consumer", "", nil, 0))
	}},
	{"classic-generations", func(e *protoEnv) {
		e.cbeat("heartbeat, unknown group", "nobody", 1, nil)
		j := e.cjoin("join", -1, joinRequest(e.group, "consumer", "", nil, 0))
		e.csync("sync", "consumer", j.MemberID, j.Generation, nil, true)
		e.cbeat("heartbeat", j.MemberID, j.Generation, nil)
		e.cbeat("heartbeat, old generation", j.MemberID, j.Generation-1, nil)
		e.cbeat("heartbeat, unknown member", "nobody", j.Generation, nil)
		e.commit("commit", 9, j.MemberID, j.Generation)
		e.commit("commit, old generation", 9, j.MemberID, j.Generation-1)
		e.commit("commit, unknown member", 9, "nobody", j.Generation)
		e.commit("commit, no member", 9, "", -1)
		e.fetch("fetch, no member", nil, -1)
		e.cleave("leave, one unknown", kmsg.LeaveGroupRequestMember{MemberID: j.MemberID}, kmsg.LeaveGroupRequestMember{MemberID: "nobody"})
		e.describeClassic("describe")
		e.commit("commit to the empty group, member id", 9, j.MemberID, j.Generation)
		e.commit("commit to the empty group, no member", 9, "", -1)
	}},
	{"classic-static-members", func(e *protoEnv) {
		a := e.cjoin("join a", -1, joinRequest(e.group, "consumer", "", str("ci-1"), 0))
		e.csync("sync a", "consumer", a.MemberID, a.Generation, str("ci-1"), true)
		b := e.cjoin("join b, same instance", -1, joinRequest(e.group, "consumer", "", str("ci-1"), 0))
		e.cbeat("a heartbeats", a.MemberID, a.Generation, str("ci-1"))
		e.cbeat("b heartbeats", b.MemberID, b.Generation, str("ci-1"))
		e.cleave("leave by instance, wrong member", kmsg.LeaveGroupRequestMember{MemberID: a.MemberID, InstanceID: str("ci-1")})
		e.cleave("leave by instance", kmsg.LeaveGroupRequestMember{InstanceID: str("ci-1")})
		e.describeClassic("describe")
	}},
	{"classic-delete-rules", func(e *protoEnv) {
		j := e.cjoin("join", -1, joinRequest(e.group, "consumer", "", nil, 0))
		e.csync("sync", "consumer", j.MemberID, j.Generation, nil, true)
		e.commit("commit", 9, j.MemberID, j.Generation)
		od := kmsg.NewPtrOffsetDeleteRequest()
		od.Group = e.group
		od.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: protoTopic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}},
			{Topic: protoOther, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
		odr := e.do(od.Key(), -1, od).(*kmsg.OffsetDeleteResponse)
		line := "offset delete: " + codeName(odr.ErrorCode)
		for _, tp := range odr.Topics {
			for _, p := range tp.Partitions {
				line += fmt.Sprintf(" %s/%d=%s", tp.Topic, p.Partition, codeName(p.ErrorCode))
			}
		}
		e.see("%s", line)
		e.deleteGroups("delete", e.group, e.group+"-none")
		e.describe("consumer group describe of a classic group")
		e.list("list stable, lower case", []string{"stable"}, nil)
		e.list("list empty", []string{"Empty"}, nil)
	}},
	{"transactional-offsets", func(e *protoEnv) {
		m := newMember(e, "a")
		e.hb("join", 1, m, nil)
		x := &txnState{id: e.group + "-txn"}
		e.initPID("init", x, 60000)
		e.addOffsets("add offsets", x, x.pid, x.epoch)
		e.txnCommit("txn commit at the member's epoch", x.id, x.pid, x.epoch, m.id, m.epoch)
		e.txnCommit("txn commit, epoch ahead", x.id, x.pid, x.epoch, m.id, m.epoch+1)
		e.txnCommit("txn commit, epoch behind", x.id, x.pid, x.epoch, m.id, m.epoch-1)
		e.txnCommit("txn commit, unknown member", x.id, x.pid, x.epoch, "nobody", m.epoch)
		e.txnCommit("txn commit, no member", x.id, x.pid, x.epoch, "", -1)
		e.fetchStable("fetch stable, transaction open")
		e.end("commit the transaction", x, x.pid, x.epoch, true)
		deadline := time.Now().Add(10 * time.Second)
		// The markers land after EndTxn is answered, on both.
		for g := e.stable(); (g.ErrorCode != 0 || g.Topics[0].Partitions[0].ErrorCode != 0) && time.Now().Before(deadline); g = e.stable() {
			time.Sleep(50 * time.Millisecond)
		}
		e.fetchStable("fetch stable, committed")
	}},
	{"downgrade-when-the-last-consumer-member-leaves", func(e *protoEnv) {
		j := e.cjoin("classic member", -1, joinRequest(e.group, "consumer", "", nil, 0))
		e.csync("classic sync", "consumer", j.MemberID, j.Generation, nil, true)
		m := newMember(e, "a")
		e.hb("consumer join", 1, m, nil)
		e.list("list", nil, nil)
		e.hb("consumer member leaves", 1, &cmember{id: m.id, epoch: -1}, nil)
		deadline := time.Now().Add(10 * time.Second)
		for {
			req := kmsg.NewPtrListGroupsRequest()
			req.TypesFilter = []string{"classic"}
			found := false
			for _, g := range e.do(req.Key(), -1, req).(*kmsg.ListGroupsResponse).Groups {
				found = found || g.Group == e.group
			}
			if found || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		e.list("list after", nil, nil)
		e.describeClassic("describe")
	}},
	{"heartbeat-field-edges", func(e *protoEnv) {
		m := newMember(e, "a")
		e.hb("join", 1, m, nil)
		e.hb("no member id, epoch 1", 1, &cmember{epoch: m.epoch, owned: m.owned}, nil)
		e.hb("owned partitions not sent", 1, m, func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Topics = nil })
		e.hb("an instance id on a dynamic member", 1, m, func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.InstanceID = str("not-mine") })
		e.hb("new rebalance timeout and rack", 1, m, func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.RebalanceTimeoutMillis, r.RackID = 5000, str("rack-1")
		})
		e.hb("-another assignor", 1, m, func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = str("range") })
		e.settle(m)
		e.describe("describe")
		e.hb("-unsubscribes from everything", 1, m, func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = []string{} })
		e.settle(m)
		e.describe("describe")
	}},
	{"list-filters", func(e *protoEnv) {
		m := newMember(e, "a")
		e.hb("join", 1, m, nil)
		e.list("type Consumer", nil, []string{"Consumer"})
		e.list("type CLASSIC", nil, []string{"CLASSIC"})
		e.list("state STABLE", []string{"STABLE"}, nil)
		e.list("state reconciling or empty", []string{"Reconciling", "Empty"}, nil)
		e.list("unknown type", nil, []string{"share"})
	}},
	{"transaction-errors", func(e *protoEnv) {
		x := &txnState{id: e.group + "-txn"}
		e.describeTxn("describe, unknown", x)
		e.initPID("timeout past the maximum", x, 3_600_000)
		e.initPID("init", x, 60000)
		e.describeTxn("describe, empty", x)
		e.addOffsets("add offsets, epoch ahead", x, x.pid, x.epoch+1)
		e.addOffsets("add offsets, unknown producer id", x, x.pid+1000, x.epoch)
		e.end("end, nothing added", x, x.pid, x.epoch, true)
		e.end("end, epoch ahead", x, x.pid, x.epoch+1, true)
		e.addOffsets("add offsets", x, x.pid, x.epoch)
		e.describeTxn("describe, ongoing", x)
		e.txnCommit("txn commit, no member", x.id, x.pid, x.epoch, "", -1)
		e.end("commit", x, x.pid, x.epoch, true)
		e.end("commit again", x, x.pid, x.epoch, true)
		e.end("abort after the commit", x, x.pid, x.epoch, false)
		e.addPartition("add a partition", x, x.pid, x.epoch)
		old := x.epoch
		e.initPID("init again (fences the open transaction)", x, 60000)
		e.addOffsets("add offsets, fenced epoch", x, x.pid, old)
		e.end("abort, fenced epoch", x, x.pid, old, false)
		e.describeTxn("describe, after the fence", x)
	}},
	{"offset-api-edges", func(e *protoEnv) {
		commit := func(label, topic string, partition int32, offset int64, meta *string) {
			req := kmsg.NewPtrOffsetCommitRequest()
			req.Group, req.Generation = e.group, -1
			req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: partition, Offset: offset, LeaderEpoch: -1, Metadata: meta}}}}
			resp := e.do(req.Key(), 9, req).(*kmsg.OffsetCommitResponse)
			e.see("%s: %s", label, codeName(resp.Topics[0].Partitions[0].ErrorCode))
		}
		commit("commit", protoTopic, 1, 42, str("m"))
		commit("commit, unknown topic", "proto-no-such-topic", 0, 1, nil)
		commit("commit, partition out of range", protoTopic, 99, 1, nil)
		commit("commit, metadata over 4 KiB", protoTopic, 2, 1, str(strings.Repeat("x", 5000)))
		commit("commit, negative offset", protoTopic, 3, -5, nil)
		fetch := func(label string, v int16, topics []kmsg.OffsetFetchRequestGroupTopic) {
			req := kmsg.NewPtrOffsetFetchRequest()
			g := kmsg.NewOffsetFetchRequestGroup()
			g.Group, g.MemberEpoch, g.Topics = e.group, -1, topics
			req.Groups = []kmsg.OffsetFetchRequestGroup{g}
			resp := e.do(req.Key(), v, req).(*kmsg.OffsetFetchResponse)
			var parts []string
			for _, rg := range resp.Groups {
				parts = append(parts, codeName(rg.ErrorCode))
				for _, tp := range rg.Topics {
					for _, p := range tp.Partitions {
						meta := "null"
						if p.Metadata != nil {
							meta = fmt.Sprintf("%q", *p.Metadata)
						}
						parts = append(parts, fmt.Sprintf("%s/%d=%s:%d:%s", tp.Topic, p.Partition, codeName(p.ErrorCode), p.Offset, meta))
					}
				}
			}
			slices.Sort(parts[1:])
			e.see("%s: %s", label, strings.Join(parts, " "))
		}
		fetch("fetch all", 9, nil)
		fetch("fetch some", 9, []kmsg.OffsetFetchRequestGroupTopic{{Topic: protoTopic, Partitions: []int32{1, 2, 99}}, {Topic: "proto-no-such-topic", Partitions: []int32{0}}})
		od := kmsg.NewPtrOffsetDeleteRequest()
		od.Group = e.group
		od.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: protoTopic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 1}, {Partition: 2}}}}
		odr := e.do(od.Key(), -1, od).(*kmsg.OffsetDeleteResponse)
		line := "offset delete, empty group: " + codeName(odr.ErrorCode)
		for _, tp := range odr.Topics {
			for _, p := range tp.Partitions {
				line += fmt.Sprintf(" %d=%s", p.Partition, codeName(p.ErrorCode))
			}
		}
		e.see("%s", line)
		fetch("fetch all after the delete", 9, nil)
		od.Group = e.group + "-none"
		e.see("offset delete, unknown group: %s", codeName(e.do(od.Key(), -1, od).(*kmsg.OffsetDeleteResponse).ErrorCode))
		e.deleteGroups("delete groups", e.group+"-none", e.group)
		fetch("fetch all after deleting the group", 9, nil)
	}},
	{"find-coordinator", func(e *protoEnv) {
		cl := e.tg.client(e.t, 10, -1)
		br := cl.Broker(0)
		for _, c := range []struct {
			label   string
			v       int16
			keyType int8
			keys    []string
		}{
			{"v3 group", 3, 0, []string{e.group}},
			{"v3 empty group id", 3, 0, []string{""}},
			{"v3 transaction", 3, 1, []string{e.group}},
			{"v3 key type 7", 3, 7, []string{e.group}},
			{"v4 two groups", 4, 0, []string{e.group, e.group + "-2"}},
			{"v4 empty group id", 4, 0, []string{""}},
			{"v4 key type 7", 4, 7, []string{e.group}},
		} {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.Version, req.CoordinatorType = c.v, c.keyType
			if c.v >= 4 {
				req.CoordinatorKeys = c.keys
			} else {
				req.CoordinatorKey = c.keys[0]
			}
			resp, err := br.RetriableRequest(e.ctx, req)
			if err != nil {
				e.see("%s: %v", c.label, err)
				continue
			}
			r := resp.(*kmsg.FindCoordinatorResponse)
			line := fmt.Sprintf("%s: %s", c.label, codeName(r.ErrorCode))
			for _, co := range r.Coordinators {
				line += " " + codeName(co.ErrorCode)
			}
			e.see("%s", line)
		}
	}},
	{"revocation-deadline", func(e *protoEnv) {
		// A member told to revoke that does not within its rebalance
		// timeout (1 s here) is removed from the group.
		a, b := newMember(e, "a"), newMember(e, "b")
		e.hb("join a, rebalance timeout 1 s", 1, a, func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMillis = 1000 })
		e.settle(a)
		e.hb("join b", 1, b, nil)
		deadline := time.Now().Add(5 * time.Second)
		for {
			// a heartbeats owning everything until it is told to revoke.
			req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			req.Group, req.MemberID, req.MemberEpoch, req.RebalanceTimeoutMillis = e.group, a.id, a.epoch, -1
			req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: e.tg.topicID, Partitions: slices.Clone(a.owned)}}
			resp := e.heartbeat(-1, req)
			if resp.ErrorCode != 0 || resp.Assignment != nil || time.Now().After(deadline) {
				e.see("a is told to revoke: %s assignment=%v", codeName(resp.ErrorCode), resp.Assignment != nil)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2500 * time.Millisecond)
		e.hb("a, past its rebalance timeout, still owning everything", 1, a, nil)
		e.settle(b)
		e.describe("describe")
	}},
	{"classic-rebalance", func(e *protoEnv) {
		a := e.cjoin("join a", -1, joinRequest(e.group, "consumer", "", nil, 0))
		e.csync("sync a", "consumer", a.MemberID, a.Generation, nil, true)
		// b joins from a client of its own, as a second consumer would
		// (Kafka reads a connection's next request only once it answered
		// the one before, and b's JoinGroup waits for the rebalance,
		// which waits for a's); it waits for a.
		bcl, err := kgo.NewClient(kgo.SeedBrokers(e.tg.addrs...), kgo.ClientID("proto-b"))
		if err != nil {
			e.t.Fatal(err)
		}
		defer bcl.Close()
		bDone := make(chan *kmsg.JoinGroupResponse, 1)
		go func() {
			resp, err := joinAs(func(r kmsg.Request) (kmsg.Response, error) { return bcl.Request(e.ctx, r) },
				joinRequest(e.group, "consumer", "", nil, 0))
			if err != nil {
				resp = nil
			}
			bDone <- resp
		}()
		e.cbeatUntilRefused("a heartbeats while b joins", a.MemberID, a.Generation)
		e.describeClassic("describe during the rebalance")
		a2 := e.cjoin("a rejoins", -1, joinRequest(e.group, "consumer", a.MemberID, nil, 0))
		b := <-bDone
		if b == nil {
			e.t.Fatalf("%s: b's join failed", e.tg.name)
		}
		e.see("b's join: %s gen=%d leader=%v members=%d", codeName(b.ErrorCode), b.Generation, b.LeaderID == b.MemberID, len(b.Members))
		// b, a follower, syncs first: its SyncGroup waits for the leader's.
		bSync := make(chan int16, 1)
		go func() {
			resp, err := bcl.Request(e.ctx, syncRequest(e.group, "consumer", b.MemberID, b.Generation, nil, false))
			if err != nil {
				bSync <- -1
				return
			}
			bSync <- resp.(*kmsg.SyncGroupResponse).ErrorCode
		}()
		time.Sleep(300 * time.Millisecond)
		e.describeClassic("describe while the follower waits")
		e.cbeat("a heartbeats before it syncs", a2.MemberID, a2.Generation, nil)
		e.csync("a syncs (leader)", "consumer", a2.MemberID, a2.Generation, nil, true)
		e.see("b's sync: %s", codeName(<-bSync))
		e.cbeat("b heartbeats", b.MemberID, b.Generation, nil)
		e.cbeat("b heartbeats with the old generation", b.MemberID, a.Generation, nil)
		e.describeClassic("describe")
		e.cleave("b leaves", kmsg.LeaveGroupRequestMember{MemberID: b.MemberID})
		e.cbeat("a heartbeats after b left", a2.MemberID, a2.Generation, nil)
		e.describeClassic("describe after the leave")
	}},
	{"classic-member-of-a-consumer-group", func(e *protoEnv) {
		j := e.cjoin("classic member joins", -1, joinRequest(e.group, "consumer", "", nil, 0))
		e.csync("classic member syncs", "consumer", j.MemberID, j.Generation, nil, true)
		m := newMember(e, "a")
		e.hb("a consumer member joins (the upgrade)", 1, m, nil)
		// The classic member learns of the new target at a heartbeat.
		e.cbeatUntilRefused("classic member heartbeats", j.MemberID, j.Generation)
		e.commit("classic member commits in its generation", 9, j.MemberID, j.Generation)
		j2 := e.cjoin("classic member rejoins", -1, joinRequest(e.group, "consumer", j.MemberID, nil, 0))
		e.cjoin("classic member joins again with the old generation's id", -1, joinRequest(e.group, "consumer", j.MemberID, nil, 0))
		e.csync("classic member syncs", "consumer", j2.MemberID, j2.Generation, nil, false)
		e.csync("classic member syncs an old generation", "consumer", j2.MemberID, j.Generation, nil, false)
		e.cbeat("classic member heartbeats", j2.MemberID, j2.Generation, nil)
		e.settle(m)
		e.describe("describe")
		e.cleave("classic member leaves", kmsg.LeaveGroupRequestMember{MemberID: j2.MemberID})
		// Kafka is Assigning until its next target (at most a second),
		// kaas Reconciling at once: compared once settled.
		e.settle(m)
		e.list("list", nil, nil)
	}},
	{"join-v0-with-a-member-id", func(e *protoEnv) {
		m := newMember(e, "a")
		e.hb("join v0 naming its own id", 0, m, nil)
		e.hb("heartbeat v0", 0, m, nil)
		e.hb("rejoin v0 under the same id", 0, &cmember{id: m.id}, nil)
	}},
	{"group-configs", func(e *protoEnv) {
		alter := func(label, name, value string) {
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			res := kmsg.NewIncrementalAlterConfigsRequestResource()
			res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, e.group
			res.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: name, Op: kmsg.IncrementalAlterConfigOpSet, Value: &value}}
			req.Resources = append(req.Resources, res)
			for _, r := range e.do(req.Key(), -1, req).(*kmsg.IncrementalAlterConfigsResponse).Resources {
				e.see("%s: %s", label, codeName(r.ErrorCode))
			}
		}
		alter("heartbeat interval 6000", "consumer.heartbeat.interval.ms", "6000")
		alter("heartbeat interval 10", "consumer.heartbeat.interval.ms", "10")
		alter("session timeout 50000", "consumer.session.timeout.ms", "50000")
		alter("unknown config", "consumer.no.such.config", "1")
		// A coordinator holds the configs it read up to a second
		// (docs/cgroup.md); Kafka's learns them from the metadata log,
		// usually within milliseconds. Both apply them past that.
		time.Sleep(1100 * time.Millisecond)
		m := newMember(e, "a")
		e.hb("join", 1, m, nil)
		req := kmsg.NewPtrDescribeConfigsRequest()
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, e.group
		res.ConfigNames = []string{"consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"}
		req.Resources = append(req.Resources, res)
		for _, r := range e.do(req.Key(), -1, req).(*kmsg.DescribeConfigsResponse).Resources {
			var cs []string
			for _, c := range r.Configs {
				v := "null"
				if c.Value != nil {
					v = *c.Value
				}
				cs = append(cs, fmt.Sprintf(" %s=%s(%s)", c.Name, v, c.Source))
			}
			slices.Sort(cs)
			e.see("describe configs: %s%s", codeName(r.ErrorCode), strings.Join(cs, ""))
		}
	}},
}
