package cgroup

import (
	"sort"
)

// assign computes a target assignment: member id → partitions, with the
// named assignor, from each member's subscribed topic names, the previous
// target (for stickiness) and the topics.
func assign(assignor string, subs map[string][]string, prev map[string]map[TP]struct{}, im *Image) map[string]map[TP]struct{} {
	if assignor == AssignorRange {
		return assignRange(subs, im)
	}
	return assignUniform(subs, prev, im)
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
func assignUniform(subs map[string][]string, prev map[string]map[TP]struct{}, im *Image) map[string]map[TP]struct{} {
	ids := make([]string, 0, len(subs))
	for id := range subs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	eligible := map[TopicID]map[string]bool{}
	var all []TP
	names := map[string]bool{}
	for _, id := range ids {
		for _, n := range subs[id] {
			t, ok := im.ByName(n)
			if !ok {
				continue
			}
			if eligible[t.ID] == nil {
				eligible[t.ID] = map[string]bool{}
			}
			eligible[t.ID][id] = true
			if !names[n] {
				names[n] = true
				for p := int32(0); p < t.Partitions; p++ {
					all = append(all, TP{t.ID, p})
				}
			}
		}
	}
	sortTPs(all)
	out := map[string]map[TP]struct{}{}
	for _, id := range ids {
		out[id] = map[TP]struct{}{}
	}
	owner := map[TP]string{}
	// Sticky: keep what the previous target gave, where still valid.
	for _, id := range ids {
		kept := make([]TP, 0, len(prev[id]))
		for tp := range prev[id] {
			kept = append(kept, tp)
		}
		sortTPs(kept)
		for _, tp := range kept {
			t, ok := im.ByID(tp.Topic)
			if !ok || tp.Partition >= t.Partitions || !eligible[tp.Topic][id] || owner[tp] != "" {
				continue
			}
			owner[tp] = id
			out[id][tp] = struct{}{}
		}
	}
	least := func(tp TP, than int) string {
		best := ""
		for _, id := range ids {
			if !eligible[tp.Topic][id] {
				continue
			}
			if n := len(out[id]); n < than && (best == "" || n < len(out[best])) {
				best = id
			}
		}
		return best
	}
	// New partitions go to the least loaded eligible member.
	for _, tp := range all {
		if owner[tp] != "" {
			continue
		}
		if id := least(tp, int(^uint(0)>>1)); id != "" {
			owner[tp] = id
			out[id][tp] = struct{}{}
		}
	}
	// Balance: move a partition from a member to an eligible one with at
	// least two fewer, until none can move (each move lowers the sum of
	// squares, so this ends).
	for range len(all) * (len(ids) + 1) {
		moved := false
		for _, tp := range all {
			from := owner[tp]
			if from == "" {
				continue
			}
			if to := least(tp, len(out[from])-1); to != "" && to != from {
				delete(out[from], tp)
				out[to][tp] = struct{}{}
				owner[tp] = to
				moved = true
			}
		}
		if !moved {
			break
		}
	}
	return out
}

func sortTPs(tps []TP) {
	sort.Slice(tps, func(i, j int) bool { return tps[i].less(tps[j]) })
}
