package broker

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// movable is a Cluster whose leaders a test moves: every partition is led
// by leader at epoch (this broker, node 0, at first); the other broker is
// listed with an address clients can be told.
type movable struct {
	b *Broker

	mu     sync.Mutex // guards leader, epoch
	leader int32
	epoch  int32
}

const otherNode = 7

func (m *movable) Brokers() []BrokerInfo {
	return []BrokerInfo{m.b.self(), {NodeID: otherNode, Host: "127.0.0.1", Port: 1}}
}
func (m *movable) ControllerID() int32 { return 0 }
func (m *movable) Leader(string, int32) (int32, int32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leader, m.epoch, true
}

// moveAway hands every partition to the other broker and tells the broker.
func (m *movable) moveAway() { m.moveTo(otherNode) }

// moveTo hands every partition to node at the next epoch.
func (m *movable) moveTo(node int32) {
	m.mu.Lock()
	m.leader, m.epoch = node, m.epoch+1
	m.mu.Unlock()
	m.b.AssignmentChanged()
}

// fetchOne is a Fetch of partition 0 of topic (by id, at the newest
// version) from offset, waiting up to maxWaitMs for one byte.
func fetchOne(t *testing.T, cl *kgo.Client, topic string, offset int64, maxWaitMs int32) *kmsg.FetchRequest {
	t.Helper()
	td, err := kadm.NewClient(cl).ListTopics(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = maxWaitMs, 1, 1<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, td[topic].ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 0, offset, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func startMovable(t *testing.T) (*Broker, *movable) {
	t.Helper()
	m := &movable{}
	b := startBroker(t, t.TempDir(), func(c *Config) { c.Cluster = m })
	m.b = b
	return b, m
}

// TestLongPollFetchOutlivesTheLeadershipItWaitsOn: a Fetch parked at the
// end of a partition (max wait 60 s) must answer NOT_LEADER_OR_FOLLOWER as
// soon as the partition's leadership moves away, as Kafka completes a
// delayed fetch when its broker stops leading a partition. It used to
// wait out the whole max wait (franz-go's default is 5 s: every drain
// stalled the consumers of the drained broker's partitions for 5 s).
func TestLongPollFetchOutlivesTheLeadershipItWaitsOn(t *testing.T) {
	b, m := startMovable(t)
	cl := client(t, b)
	createTopic(t, cl, "lp", 1, nil)
	produceN(t, cl, "lp", 3)

	req := fetchOne(t, cl, "lp", 3, 60_000)

	raw, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	type answer struct {
		resp *kmsg.FetchResponse
		err  error
	}
	done := make(chan answer, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	go func() {
		r, err := req.RequestWith(ctx, raw.Broker(0))
		done <- answer{r, err}
	}()
	time.Sleep(300 * time.Millisecond) // let the fetch park
	select {
	case a := <-done:
		t.Fatalf("the fetch answered before the move: %+v %v", a.resp, a.err)
	default:
	}
	m.moveAway()
	select {
	case a := <-done:
		if a.err != nil {
			t.Fatal(a.err)
		}
		p := a.resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != kerr.NotLeaderForPartition {
			t.Fatalf("after the move: %v, want NOT_LEADER_OR_FOLLOWER", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the parked fetch still waits 20 s after its partition moved away (its max wait is 60 s)")
	}
}

// TestNotLeaderAnswersNameTheNewLeader (KIP-951): after a partition moves
// away, Produce and Fetch refuse it with NOT_LEADER_OR_FOLLOWER naming the
// new leader and its epoch, and list the new leader's endpoint, so clients
// (franz-go, librdkafka, the Java client) go there without first asking for
// metadata.
func TestNotLeaderAnswersNameTheNewLeader(t *testing.T) {
	b, m := startMovable(t)
	cl := client(t, b)
	createTopic(t, cl, "nl", 1, nil)
	produceN(t, cl, "nl", 1)
	m.moveAway()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := func(what string, code int16, leader, epoch int32, nodes []int32) {
		t.Helper()
		if err := kerr.ErrorForCode(code); err != kerr.NotLeaderForPartition {
			t.Fatalf("%s: %v, want NOT_LEADER_OR_FOLLOWER", what, err)
		}
		if leader != otherNode || epoch != 1 {
			t.Fatalf("%s: current leader %d epoch %d, want %d epoch 1", what, leader, epoch, otherNode)
		}
		if len(nodes) != 1 || nodes[0] != otherNode {
			t.Fatalf("%s: endpoints of nodes %v, want [%d]", what, nodes, otherNode)
		}
	}

	fr, err := fetchOne(t, cl, "nl", 0, 100).RequestWith(ctx, cl.Broker(0))
	if err != nil {
		t.Fatal(err)
	}
	if fr.Version < 16 {
		t.Fatalf("fetch answered at v%d, the test needs v16", fr.Version)
	}
	fpr := fr.Topics[0].Partitions[0]
	var fnodes []int32
	for _, e := range fr.Brokers {
		fnodes = append(fnodes, e.NodeID)
		if e.Host != "127.0.0.1" || e.Port != 1 {
			t.Fatalf("fetch: endpoint %+v, want 127.0.0.1:1", e)
		}
	}
	want("fetch", fpr.ErrorCode, fpr.CurrentLeader.LeaderID, fpr.CurrentLeader.LeaderEpoch, fnodes)

	p := kmsg.NewPtrProduceRequest()
	p.Acks, p.TimeoutMillis = -1, 5000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "nl"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Partition = 0
	pp.Records = []byte{1, 2, 3} // refused before the records are read
	pt.Partitions = append(pt.Partitions, pp)
	p.Topics = append(p.Topics, pt)
	pr, err := p.RequestWith(ctx, cl.Broker(0))
	if err != nil {
		t.Fatal(err)
	}
	ppr := pr.Topics[0].Partitions[0]
	var pnodes []int32
	for _, e := range pr.Brokers {
		pnodes = append(pnodes, e.NodeID)
	}
	want("produce", ppr.ErrorCode, ppr.CurrentLeader.LeaderID, ppr.CurrentLeader.LeaderEpoch, pnodes)
}

// TestOffsetForLeaderEpochAnswersFromTheEpochHistory: a partition led here
// at epoch 0 (offsets 0..2), then away, then here again at epoch 2 (3..4):
// epoch 0 ends at 3, epoch 1 (never led) is answered as epoch 0, the
// current epoch ends at the log end; an old current epoch is fenced.
func TestOffsetForLeaderEpochAnswersFromTheEpochHistory(t *testing.T) {
	b, m := startMovable(t)
	cl := client(t, b)
	createTopic(t, cl, "oe", 1, nil)
	produceN(t, cl, "oe", 3)
	m.moveAway()
	m.moveTo(0)
	fresh := client(t, b) // the first client still believes epoch 0
	produceN(t, fresh, "oe", 2)

	ask := func(current, epoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.ReplicaID = -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "oe"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, current, epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, fresh.Broker(0))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	for _, c := range []struct {
		current, epoch, wantEpoch int32
		wantEnd                   int64
	}{
		{-1, 0, 0, 3},
		{2, 1, 0, 3},
		{2, 2, 2, 5},
		{-1, 3, -1, -1},
	} {
		p := ask(c.current, c.epoch)
		if p.ErrorCode != 0 || p.LeaderEpoch != c.wantEpoch || p.EndOffset != c.wantEnd {
			t.Errorf("epoch %d: error %v, (%d, %d), want (%d, %d)", c.epoch, kerr.ErrorForCode(p.ErrorCode), p.LeaderEpoch, p.EndOffset, c.wantEpoch, c.wantEnd)
		}
	}
	if p := ask(1, 0); kerr.ErrorForCode(p.ErrorCode) != kerr.FencedLeaderEpoch {
		t.Errorf("current epoch 1 at a leader of epoch 2: %v, want FENCED_LEADER_EPOCH", kerr.ErrorForCode(p.ErrorCode))
	}
	m.moveAway()
	if p := ask(-1, 0); kerr.ErrorForCode(p.ErrorCode) != kerr.NotLeaderForPartition {
		t.Errorf("after moving away: %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(p.ErrorCode))
	}
}

// TestCloseWaitsOutParkedFetches: a broker stopping (the end of a drain,
// or a single broker's SIGTERM) answers the fetches parked on it at once
// with what it has; it used to wait for each one's max wait, so a stop
// with a consumer attached took up to that long (and longer than the
// stop's own deadline with a long max wait).
func TestCloseWaitsOutParkedFetches(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{ID: 0, DataDir: dir, Listen: "127.0.0.1:0", Logger: testLogger(t)}
	b := newBroker(t, cfg, nil)
	if err := b.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- b.Serve() }()
	cl := client(t, b)
	createTopic(t, cl, "cw", 1, nil)
	req := fetchOne(t, cl, "cw", 0, 60_000)
	answered := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		_, err := req.RequestWith(ctx, cl.Broker(0))
		answered <- err
	}()
	time.Sleep(300 * time.Millisecond) // let the fetch park
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("close with a fetch parked for 60 s: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("the parked fetch got no answer: %v", err)
	}
}

// TestNewLeaderBehindTheClientCatchesUpBeforeAnswering: a client that
// learnt of a move (a KIP-951 hint, newer metadata) may reach the new
// leader before that broker has applied the assignment naming it. A request
// carrying a current leader epoch newer than the broker knows waits for
// the assignment to catch up (briefly) instead of answering
// NOT_LEADER_OR_FOLLOWER: franz-go waits a whole second before retrying a
// failed OffsetForLeaderEpoch, which stalled every drain's consumers.
// An epoch that never arrives is answered UNKNOWN_LEADER_EPOCH.
func TestNewLeaderBehindTheClientCatchesUpBeforeAnswering(t *testing.T) {
	b, m := startMovable(t)
	cl := client(t, b)
	createTopic(t, cl, "cu", 1, nil)
	produceN(t, cl, "cu", 3)
	m.moveAway() // epoch 1 elsewhere; the client will know of epoch 2 here

	ask := func(current int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.ReplicaID = -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "cu"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, current, 0
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl.Broker(0))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	go func() {
		time.Sleep(150 * time.Millisecond)
		m.moveTo(0) // epoch 2, here: the broker applies it while the request waits
	}()
	if p := ask(2); p.ErrorCode != 0 || p.LeaderEpoch != 0 || p.EndOffset != 3 {
		t.Fatalf("asked with the newer epoch before the broker applied it: %v, (%d, %d), want (0, 3)",
			kerr.ErrorForCode(p.ErrorCode), p.LeaderEpoch, p.EndOffset)
	}
	if p := ask(99); kerr.ErrorForCode(p.ErrorCode) != kerr.UnknownLeaderEpoch {
		t.Fatalf("an epoch that never comes: %v, want UNKNOWN_LEADER_EPOCH", kerr.ErrorForCode(p.ErrorCode))
	}
}

// awayAt is a movable Cluster whose other broker is listed at addr.
type awayAt struct {
	movable
	port      int32
	removed   atomic.Bool // the other broker is no longer listed
	unsettled atomic.Bool // not every broker acts on the assignment yet
}

func (a *awayAt) Settled() bool { return !a.unsettled.Load() }

func (a *awayAt) Brokers() []BrokerInfo {
	if a.removed.Load() {
		return []BrokerInfo{a.b.self()}
	}
	return []BrokerInfo{a.b.self(), {NodeID: otherNode, Host: "127.0.0.1", Port: a.port}}
}

// refusedPort is a loopback port nothing listens on (it did a moment ago).
func refusedPort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	return port
}

// startAway starts a broker whose other broker is listed at a port nothing
// listens on, with GoneLeaderWait wait, and moves topic (one partition,
// created here) to the other broker.
func startAway(t *testing.T, wait time.Duration, topic string) (*awayAt, *Broker) {
	t.Helper()
	a := &awayAt{port: refusedPort(t)}
	b := startBroker(t, t.TempDir(), func(c *Config) { c.Cluster = a; c.GoneLeaderWait = wait })
	a.b = b
	createTopic(t, client(t, b), topic, 1, nil)
	a.moveAway() // led by the other broker, whose address refuses
	return a, b
}

// metadataLeader asks b (at the exact version, on a fresh connection) for
// topic's metadata and returns partition 0's leader.
func metadataLeader(t *testing.T, b *Broker, topic string) int32 {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	resp := roundTrip(t, b, req).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("metadata of %s: %+v", topic, resp.Topics)
	}
	return resp.Topics[0].Partitions[0].Leader
}

// TestMetadataRightAfterALeaderIsKilledNamesItsSuccessor: a client whose
// connection to a broker killed with -9 reads EOF asks for metadata at
// once, before the cluster has declared the broker dead (about a report
// interval) and moved its partitions. The answer named the dead broker, and
// franz-go asks again only after its metadata min age (5 s): a KIP-848
// member did not consume for about 5 s after the kill of its coordinator.
// Now an answer that names a leader whose address refuses connections
// waits for the partitions to move and names the new leader; a leader that
// still accepts connections (frozen, or alive) is answered at once, and a
// move that never comes is waited for GoneLeaderWait.
func TestMetadataRightAfterALeaderIsKilledNamesItsSuccessor(t *testing.T) {
	a, b := startAway(t, 20*time.Second, "gl")

	moved := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		a.moveTo(0) // the cluster declared it dead and moved its partition here
		close(moved)
	}()
	if l := metadataLeader(t, b, "gl"); l != 0 {
		t.Fatalf("metadata while the leader's address refuses connections named leader %d, want 0 (its successor)", l)
	}
	<-moved

	// A leader that accepts connections is named at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a.port = int32(ln.Addr().(*net.TCPAddr).Port)
	a.moveAway()
	if l := metadataLeader(t, b, "gl"); l != otherNode {
		t.Fatalf("a live leader: metadata named %d, want %d", l, otherNode)
	}
}

// TestMetadataHeldForAKilledLeaderNamesItsSuccessorOnceItServes: a
// Metadata answer held for a killed leader went out as soon as this broker
// applied the move, naming a successor that had not applied it yet; kafkajs
// fetched there, was refused NOT_LEADER_OR_FOLLOWER, and rejoined its group
// (controller-kill9: 2 rebalances and an ILLEGAL_GENERATION, where it has
// none). The answer now waits until every live broker acts on the move.
func TestMetadataHeldForAKilledLeaderNamesItsSuccessorOnceItServes(t *testing.T) {
	a, b := startAway(t, 20*time.Second, "gs")
	a.unsettled.Store(true)
	start := time.Now()
	go func() {
		time.Sleep(200 * time.Millisecond)
		a.moveTo(0) // moved here; the other brokers have not applied it yet
		time.Sleep(400 * time.Millisecond)
		a.unsettled.Store(false)
	}()
	if l := metadataLeader(t, b, "gs"); l != 0 {
		t.Fatalf("metadata named %d, want 0 (the successor)", l)
	}
	if waited := time.Since(start); waited < 600*time.Millisecond {
		t.Fatalf("answered after %v, before every broker acted on the move (600ms)", waited)
	}
}

// TestMetadataWaitsForAGoneLeaderOnlyGoneLeaderWait: a partition whose gone
// leader never moves is answered, naming it, once GoneLeaderWait passed.
func TestMetadataWaitsForAGoneLeaderOnlyGoneLeaderWait(t *testing.T) {
	_, b := startAway(t, 300*time.Millisecond, "gw")
	start := time.Now()
	if l := metadataLeader(t, b, "gw"); l != otherNode {
		t.Fatalf("metadata named %d, want %d (nothing moved)", l, otherNode)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("answered after %v, before GoneLeaderWait (300ms): the gone leader was not waited for", waited)
	}
}

// TestProbeOfARemovedBrokerIsClosed: the connection a broker keeps open to
// probe another (gone_leaders.go) is closed once that broker is no longer
// listed. Before, it stayed open for good: nothing checks the address of a
// broker no answer names, so each broker removed (or back at a new address)
// left a connection behind.
func TestProbeOfARemovedBrokerIsClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a := &awayAt{port: int32(ln.Addr().(*net.TCPAddr).Port)}
	b := startBroker(t, t.TempDir(), func(c *Config) { c.Cluster = a })
	a.b = b
	createTopic(t, client(t, b), "pr", 1, nil)
	a.moveAway() // led by the other broker, which accepts connections

	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	if l := metadataLeader(t, b, "pr"); l != otherNode {
		t.Fatalf("metadata named %d, want %d", l, otherNode)
	}
	var probe net.Conn
	select {
	case probe = <-accepted:
		defer probe.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the broker never probed the other broker's address")
	}

	a.removed.Store(true)
	a.moveTo(0)
	metadataLeader(t, b, "pr")
	_ = probe.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := probe.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the probe of a broker no longer listed is still open: read %d, %v", n, err)
	}
}
