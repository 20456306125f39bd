package cgroup

import (
	"slices"
	"sort"
)

// assign computes a target assignment: member id → partitions, with the
// named assignor, from each member's subscribed topic names, the previous
// target (for stickiness) and the topics. givers orders the members the
// uniform assignor takes a partition from first, when balance lets it
// choose (see assignUniform).
func assign(assignor string, subs map[string][]string, prev map[string]map[TP]struct{}, givers []string, im *Image) map[string]map[TP]struct{} {
	if assignor == AssignorRange {
		return assignRange(subs, im)
	}
	return assignUniform(subs, prev, givers, im)
}

// assignRange gives each topic's partitions to the members subscribed to
// it, in ranges: sorted by member id, the first (partitions mod members)
// members get one more.
func assignRange(subs map[string][]string, im *Image) map[string]map[TP]struct{} {
	out := map[string]map[TP]struct{}{}
	byTopic := map[string][]string{}
	for id, names := range subs {
		out[id] = map[TP]struct{}{}
		for _, n := range names {
			byTopic[n] = append(byTopic[n], id)
		}
	}
	for name, ids := range byTopic {
		t, ok := im.ByName(name)
		if !ok || t.Partitions <= 0 {
			continue
		}
		sort.Strings(ids)
		k := int32(len(ids))
		per, extra := t.Partitions/k, t.Partitions%k
		next := int32(0)
		for i, id := range ids {
			n := per
			if int32(i) < extra {
				n++
			}
			for p := next; p < next+n; p++ {
				out[id][TP{t.ID, p}] = struct{}{}
			}
			next += n
		}
	}
	return out
}

// assignUniform spreads every subscribed partition over the members
// subscribed to its topic as evenly as their subscriptions allow, keeping
// each partition where the previous target had it whenever balance
// permits (Kafka's uniform assignor has the same two goals).
//
// Where balance takes partitions from some of several members that own
// equally many (a member joining a balanced group), it takes them from the
// members listed first in givers, then from the others in id order. The
// group lists first the members whose next heartbeat is due soonest
// (Group.givers): a partition moves only once its owner has heard that it
// must give it up, at its next heartbeat, and said it has.
func assignUniform(subs map[string][]string, prev map[string]map[TP]struct{}, givers []string, im *Image) map[string]map[TP]struct{} {
	// Members are indices into the sorted ids, partitions indices into
	// all: the balancing below looks at every member for every partition
	// on each pass, and a 100-member group joining one by one computes
	// 100 targets.
	ids := make([]string, 0, len(subs))
	for id := range subs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	// The subscribed topics, in id order: all holds their partitions in
	// that order, each topic's as one run from its first index.
	type subscribed struct {
		t        Topic
		first    int
		eligible []bool // by member index
	}
	topicOf := map[TopicID]int{}
	var topics []subscribed
	for i, id := range ids {
		for _, n := range subs[id] {
			t, ok := im.ByName(n)
			if !ok {
				continue
			}
			ti, seen := topicOf[t.ID]
			if !seen {
				ti = len(topics)
				topicOf[t.ID] = ti
				topics = append(topics, subscribed{t: t, eligible: make([]bool, len(ids))})
			}
			topics[ti].eligible[i] = true
		}
	}
	slices.SortFunc(topics, func(a, b subscribed) int { return compareID(a.t.ID, b.t.ID) })
	var all []TP
	var eligible [][]bool // by topic index, then member index
	for ti := range topics {
		t := &topics[ti]
		topicOf[t.t.ID], t.first = ti, len(all)
		eligible = append(eligible, t.eligible)
		for p := int32(0); p < t.t.Partitions; p++ {
			all = append(all, TP{t.t.ID, p})
		}
	}
	topic := make([]int, len(all)) // each partition's topic index
	owner := make([]int, len(all)) // each partition's member index, -1: none
	for ti, t := range topics {
		for k := t.first; k < t.first+int(t.t.Partitions); k++ {
			topic[k], owner[k] = ti, -1
		}
	}
	count := make([]int, len(ids))
	// Sticky: keep what the previous target gave, where still valid. The
	// order within a member does not matter: its partitions are distinct.
	for i, id := range ids {
		for tp := range prev[id] {
			ti, ok := topicOf[tp.Topic] // a topic some member subscribes to, in the image
			if !ok || !eligible[ti][i] || tp.Partition < 0 || tp.Partition >= topics[ti].t.Partitions {
				continue
			}
			k := topics[ti].first + int(tp.Partition)
			if owner[k] >= 0 {
				continue
			}
			owner[k] = i
			count[i]++
		}
	}
	// least is the eligible member with the fewest partitions, fewer than
	// than; the first in id order on a tie; -1 when none.
	least := func(k, than int) int {
		best := -1
		for i, ok := range eligible[topic[k]] {
			if ok && count[i] < than && (best < 0 || count[i] < count[best]) {
				best = i
			}
		}
		return best
	}
	// New partitions go to the least loaded eligible member.
	for k := range all {
		if owner[k] >= 0 {
			continue
		}
		if i := least(k, int(^uint(0)>>1)); i >= 0 {
			owner[k] = i
			count[i]++
		}
	}
	// The order the balancing below visits partitions in: by their owner's
	// place in givers, then by index.
	rank := make([]int, len(ids))
	for i := range rank {
		rank[i] = len(givers)
	}
	for r, id := range givers {
		if i, ok := slices.BinarySearch(ids, id); ok && rank[i] == len(givers) {
			rank[i] = r
		}
	}
	visit := make([]int, len(all))
	for k := range visit {
		visit[k] = k
	}
	if len(givers) > 0 {
		slices.SortStableFunc(visit, func(a, b int) int {
			ra, rb := len(givers), len(givers)
			if owner[a] >= 0 {
				ra = rank[owner[a]]
			}
			if owner[b] >= 0 {
				rb = rank[owner[b]]
			}
			return ra - rb
		})
	}
	// Balance: move a partition from a member to an eligible one with at
	// least two fewer, until none can move (each move lowers the sum of
	// squares, so this ends). A partition whose owner has at most one more
	// than the fewest any member has cannot move: the scan of the members
	// is skipped for it (the common case once balanced).
	fewest := func() int {
		m := int(^uint(0) >> 1)
		for _, c := range count {
			m = min(m, c)
		}
		return m
	}
	for range len(all) * (len(ids) + 1) {
		moved := false
		floor := fewest()
		for _, k := range visit {
			from := owner[k]
			if from < 0 || count[from]-1 <= floor {
				continue
			}
			if to := least(k, count[from]-1); to >= 0 && to != from {
				owner[k] = to
				count[from]--
				count[to]++
				moved = true
				floor = fewest()
			}
		}
		if !moved {
			break
		}
	}
	out := make(map[string]map[TP]struct{}, len(ids))
	for i, id := range ids {
		out[id] = make(map[TP]struct{}, count[i])
	}
	for k, tp := range all {
		if owner[k] >= 0 {
			out[ids[owner[k]]][tp] = struct{}{}
		}
	}
	return out
}
