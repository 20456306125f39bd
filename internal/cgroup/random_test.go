package cgroup

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// client is a model consumer: it owns what the coordinator last told it,
// gives up revoked partitions at once, and takes new ones only when told.
type client struct {
	id       string
	instance string
	topics   []string
	epoch    int32
	in       bool // joined and not left
	owned    map[TP]struct{}
	lost     bool            // the last answer was lost: the next heartbeat is a full one
	sent     map[TP]struct{} // the owned partitions it last reported
}

func (c *client) ownedList() []TopicPartitions { return grouped(c.owned) }

// TestRandomSequencesKeepTheInvariants drives a group with random joins,
// heartbeats (some answers lost), leaves, static leaves and returns,
// session expiries, topics growing and coordinator moves (snapshot, then
// restore in a new group), and checks after every input: no partition is
// owned by two clients (by what each was told) nor by two members on the
// coordinator; member epochs and the group epoch never go back; a timer
// kept as the shell keeps it (re-armed only when SoonestSet is earlier)
// never fires after a deadline; and once
// the clients just heartbeat for a while, every subscribed partition is
// assigned and the group is Stable.
func TestRandomSequencesKeepTheInvariants(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomRun(t, seed) })
	}
}

func randomRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	f := newFixture(t)
	parts := map[string]int32{"a": 6, "b": 3, "c": 4}
	ids := map[string]TopicID{"a": topicA, "b": topicB, "c": topicC}
	image := func() *Image {
		var ts []Topic
		for n, p := range parts {
			ts = append(ts, Topic{n, ids[n], p})
		}
		return NewImage(ts...)
	}
	f.im = image()
	var clients []*client
	for i := range 2 + rng.IntN(5) {
		c := &client{id: fmt.Sprintf("c%d", i), owned: map[TP]struct{}{}}
		if rng.IntN(3) == 0 {
			c.instance = fmt.Sprintf("i%d", i)
		}
		switch rng.IntN(3) {
		case 0:
			c.topics = []string{"a"}
		case 1:
			c.topics = []string{"a", "b"}
		default:
			c.topics = []string{"a", "b", "c"}
		}
		clients = append(clients, c)
	}
	quiet := false
	lastGroupEpoch := int32(0)
	memberEpochs := map[string]int32{}
	var armed time.Time // the shell's timer (zero: none armed)
	check := func(step string) {
		t.Helper()
		f.checkDisjoint()
		f.checkEncoding()
		if soonest := f.g.SoonestSet(); armed.IsZero() || (!soonest.IsZero() && soonest.Before(armed)) {
			armed = f.g.NextDeadline()
		}
		if next := f.g.NextDeadline(); !next.IsZero() && (armed.IsZero() || armed.After(next)) {
			t.Fatalf("%s: timer armed for %v, after the next deadline %v", step, armed, next)
		}
		seen := map[TP]string{}
		for _, c := range clients {
			for tp := range c.owned {
				if o, dup := seen[tp]; dup {
					t.Fatalf("%s: clients %s and %s both own %v", step, o, c.id, tp)
				}
				seen[tp] = c.id
			}
		}
		if f.g.Epoch() < lastGroupEpoch {
			t.Fatalf("%s: group epoch went back %d -> %d", step, lastGroupEpoch, f.g.Epoch())
		}
		lastGroupEpoch = f.g.Epoch()
		for id, m := range f.g.members {
			if m.epoch >= 0 && m.epoch < memberEpochs[id] {
				t.Fatalf("%s: member %s epoch went back %d -> %d", step, id, memberEpochs[id], m.epoch)
			}
			if m.epoch >= 0 {
				memberEpochs[id] = m.epoch
			}
		}
	}
	heartbeat := func(c *client, join bool) {
		in := HeartbeatInput{Version: 1, MemberID: c.id, MemberEpoch: c.epoch, RebalanceTimeoutMs: -1}
		if c.instance != "" {
			in.InstanceID = ptr(c.instance)
		}
		if join || c.lost {
			in.RebalanceTimeoutMs = 30_000
			in.SubscribedTopicNames = c.topics
		}
		if join {
			in.MemberEpoch, in.OwnedSent, in.OwnedTopicPartitions = 0, true, []TopicPartitions{}
		} else if c.lost || !maps.Equal(c.owned, c.sent) || rng.IntN(2) == 0 {
			// Like the real clients, it reports what it owns whenever that
			// changed (after a revocation), and sometimes anyway.
			in.OwnedSent, in.OwnedTopicPartitions = true, c.ownedList()
			c.sent = maps.Clone(c.owned)
		}
		res, _ := f.g.Heartbeat(f.now, f.im, in)
		switch res.Err {
		case ErrNone:
		case ErrUnknownMemberID, ErrFencedMemberEpoch:
			// Fenced: give everything up and rejoin next time.
			c.in, c.owned, c.epoch = false, map[TP]struct{}{}, 0
			return
		case ErrUnreleasedInstanceID:
			return // the instance's previous member is still in; try later
		default:
			t.Fatalf("heartbeat of %s: %v %s", c.id, res.Err, res.ErrMessage)
		}
		if !join && !quiet && rng.IntN(8) == 0 {
			c.lost = true // the answer never arrives
			return
		}
		c.lost, c.in, c.epoch = false, true, res.MemberEpoch
		if res.HasAssignment {
			c.owned = flat(res.Assignment)
		}
	}
	for step := range 400 {
		c := clients[rng.IntN(len(clients))]
		f.now = f.now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		var what string
		switch r := rng.IntN(100); {
		case !c.in:
			what = "join " + c.id
			heartbeat(c, true)
		case r < 70:
			what = "heartbeat " + c.id
			heartbeat(c, false)
		case r < 76:
			what = "leave " + c.id
			epoch := LeaveEpoch
			if c.instance != "" && rng.IntN(2) == 0 {
				epoch = StaticLeaveEpoch
			}
			in := HeartbeatInput{Version: 1, MemberID: c.id, MemberEpoch: epoch, RebalanceTimeoutMs: -1}
			if c.instance != "" {
				in.InstanceID = ptr(c.instance)
			}
			f.g.Heartbeat(f.now, f.im, in)
			c.in, c.owned, c.epoch, c.lost = false, map[TP]struct{}{}, 0, false
			if epoch == StaticLeaveEpoch {
				c.id += "'" // comes back under a new member id
			}
		case r < 82:
			what = "expire"
			f.now = f.now.Add(time.Duration(rng.IntN(50)) * time.Second)
			armed = time.Time{} // it fired
			f.g.Expire(f.now, f.im)
			for _, c := range clients {
				if m := f.g.members[c.id]; c.in && m == nil {
					c.in, c.owned, c.epoch = false, map[TP]struct{}{}, 0 // its next heartbeat is refused
				}
			}
		case r < 86:
			what = "grow a topic"
			n := []string{"a", "b", "c"}[rng.IntN(3)]
			parts[n]++
			f.im = image()
		default:
			what = "move"
			snap := f.g.Snapshot()
			data, err := json.Marshal(snap) // as the group's file holds it
			if err != nil {
				t.Fatal(err)
			}
			var read Snapshot
			if err := json.Unmarshal(data, &read); err != nil {
				t.Fatal(err)
			}
			g2 := New("g", f.g.cfg)
			if err := g2.Restore(f.now, read); err != nil {
				t.Fatal(err)
			}
			if got := g2.Snapshot(); !sameSnapshot(got, snap) {
				t.Fatalf("step %d: snapshot after restore differs:\n%+v\n%+v", step, got, snap)
			}
			f.g, armed = g2, time.Time{} // a new shell, no timer yet
		}
		check(fmt.Sprintf("step %d (%s)", step, what))
	}
	// Quiet: everyone (re)joins and heartbeats (a client whose last answer
	// was lost sends a full request), and no answer is lost.
	quiet = true
	for round := range 12 {
		for _, c := range clients {
			heartbeat(c, !c.in)
			check(fmt.Sprintf("quiet round %d", round))
		}
	}
	f.g.Expire(f.now, f.im)
	if st := f.g.State(); st != "Stable" {
		for _, c := range clients {
			t.Logf("client %s in=%v epoch=%d lost=%v owned=%v", c.id, c.in, c.epoch, c.lost, c.ownedList())
		}
		t.Fatalf("group %s after quiet rounds: %+v", st, f.g.Describe())
	}
	want := map[TP]bool{}
	for _, c := range clients {
		for _, n := range c.topics {
			for p := range parts[n] {
				want[TP{ids[n], p}] = true
			}
		}
	}
	got := map[TP]bool{}
	for _, c := range clients {
		for tp := range c.owned {
			got[tp] = true
		}
	}
	if !maps.Equal(want, got) {
		t.Fatalf("after quiet rounds %d subscribed partitions, %d owned", len(want), len(got))
	}
}

func sameSnapshot(a, b Snapshot) bool {
	ga, gb := New("x", Config{}), New("x", Config{})
	now := time.Unix(0, 0)
	if a.Epoch != b.Epoch || a.TargetEpoch != b.TargetEpoch || a.MetaHash != b.MetaHash ||
		ga.Restore(now, a) != nil || gb.Restore(now, b) != nil || len(ga.members) != len(gb.members) {
		return false
	}
	for id, ma := range ga.members {
		mb := gb.members[id]
		if mb == nil || ma.epoch != mb.epoch || ma.prevEpoch != mb.prevEpoch || ma.state != mb.state ||
			!maps.Equal(ma.assigned, mb.assigned) || !maps.Equal(ma.revoking, mb.revoking) ||
			!maps.Equal(ga.target[id], gb.target[id]) || ma.instanceID != mb.instanceID ||
			!slices.Equal(ma.names, mb.names) || ma.regex != mb.regex || ma.assignor != mb.assignor ||
			ma.rebalanceTimeout != mb.rebalanceTimeout || ma.rackID != mb.rackID ||
			ma.clientID != mb.clientID || ma.clientHost != mb.clientHost {
			return false
		}
	}
	return true
}
