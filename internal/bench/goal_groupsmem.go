package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { Register(groupsMemGoal{}) }

// groupsMemGoal compares the in-memory group paths of kaas (data dir on
// tmpfs, the same code with fsync costing nothing) with kfake (spec goal 5):
// throughput of 1-partition commits, commits to 64 groups in parallel,
// 1000-partition commits, 1000-partition OffsetFetch, and Heartbeat from the
// 64 members of one group. The same driver and versions run on both.
type groupsMemGoal struct{}

func (groupsMemGoal) Name() string { return "groups-mem" }
func (groupsMemGoal) Describe() string {
	return "in-memory group paths, kaas-tmpfs vs kfake: 1-partition commit, 64-group commit, 1000-partition commit, 1000-partition OffsetFetch, Heartbeat of 64 members (throughput)"
}

const heartbeatMembers = 64

func (groupsMemGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	const g = "groups-mem"
	window := groupWindow(env)
	mem, err := env.GroupTarget(ctx)
	if err != nil {
		return nil, err
	}
	where := "kaas-tmpfs"
	if mem.Durable {
		where = "kaas (no tmpfs: durable)"
	}
	targets := []Target{env.Kfake, mem}
	for _, t := range targets {
		if err := CreateTopic(ctx, t, commitTopic, commitPartitions); err != nil {
			return nil, err
		}
		defer dropTopic(ctx, env, t, commitTopic)
	}
	type load struct {
		what, unit string
		run        func(t Target) (rate float64, note string, err error)
		kafka      bool // measured on Kafka too
	}
	commits := func(workers, groups, parts int, prefix string) func(t Target) (float64, string, error) {
		return func(t Target) (float64, string, error) {
			lat, rate, err := commitLoop(ctx, t, workers, groups, parts, window, prefix)
			if err != nil {
				return 0, "", err
			}
			return rate, fmt.Sprintf("p50 %s", fmtDur(percentile(lat, 0.5))), nil
		}
	}
	loads := []load{
		{"OffsetCommit, 1 partition, 1 committer", "commits/s", commits(1, 1, 1, "bench-m1"), false},
		{"OffsetCommit, 64 groups in parallel", "commits/s", commits(parallelGroups, parallelGroups, 1, "bench-m64"), false},
		{"OffsetCommit, 1000 partitions, 1 committer", "commits/s", commits(1, 1, commitPartitions, "bench-m1000"), false},
		{"OffsetFetch, 1000 partitions, 1 fetcher", "fetches/s", func(t Target) (float64, string, error) {
			return fetchLoop(ctx, t, window)
		}, true},
		{fmt.Sprintf("Heartbeat, %d members of one group", heartbeatMembers), "heartbeats/s", func(t Target) (float64, string, error) {
			return heartbeatLoop(ctx, t, heartbeatMembers, window)
		}, true},
	}
	var rows []Row
	for _, l := range loads {
		peer, pnote, err := l.run(env.Kfake)
		if err != nil {
			return rows, fmt.Errorf("%s on kfake: %w", l.what, err)
		}
		ours, note, err := l.run(mem)
		if err != nil {
			return rows, fmt.Errorf("%s on %s: %w", l.what, mem.Name, err)
		}
		rows = append(rows, AtLeast(g, fmt.Sprintf("%s, %s vs kfake", l.what, where), l.unit,
			ours, peer, RefKfake, 1.0, fmt.Sprintf("in memory both; %s vs %s", note, pnote)))
	}
	// Kafka takes the loads that stay in memory there too (OffsetFetch is
	// answered from the coordinator's cache, heartbeats touch no log), after
	// kaas (see withKafkaCommitTopic); its commits are acknowledged after
	// replication and stand on the commit goal's durable rows instead.
	if env.Kafka != nil {
		withKafkaCommitTopic(ctx, env, func(k Target, err error) {
			for i, l := range loads {
				if !l.kafka {
					continue
				}
				v, note, lerr := 0.0, "", err // the topic's error, else the load's
				if err == nil {
					v, note, lerr = l.run(k)
				}
				rows[i] = rows[i].WithKafka(v, note, lerr)
			}
		})
	}
	return rows, nil
}

// fetchLoop commits 1000 partitions for one group, then fetches them
// sequentially on one client for window.
func fetchLoop(ctx context.Context, t Target, window time.Duration) (float64, string, error) {
	cls, err := openClients(t, 1)
	if err != nil {
		return 0, "", err
	}
	defer closeClients(cls)
	const group = "bench-fetch1000"
	c := simpleCommit(group, commitTopic, 0, commitPartitions)
	setOffsets(c, 42)
	if err := doCommit(ctx, cls[0], c); err != nil {
		return 0, "", err
	}
	req := fetchReq(group, commitTopic, commitPartitions)
	lat, rate, err := hammer(ctx, 1, window, func(ctx context.Context, _, _ int) error {
		n, err := doFetch(ctx, cls[0], req)
		if err == nil && n != commitPartitions {
			err = fmt.Errorf("fetched %d offsets, want %d", n, commitPartitions)
		}
		return err
	})
	if err != nil {
		return 0, "", err
	}
	return rate, fmt.Sprintf("p50 %s", fmtDur(percentile(lat, 0.5))), nil
}

// heartbeatLoop forms a group of n members (one client each, the rebalance
// driver), stops their 10 ms heartbeats, then has every member heartbeat as
// fast as it is answered for window.
func heartbeatLoop(ctx context.Context, t Target, n int, window time.Duration) (float64, string, error) {
	cls, err := openClients(t, n)
	if err != nil {
		return 0, "", err
	}
	defer closeClients(cls)
	r := newGroupRun("bench-heartbeat", cls)
	if err := r.warm(ctx); err != nil {
		r.stop()
		return 0, "", err
	}
	r.start(ctx, n)
	_, err = r.wait(ctx, n, 30*time.Second)
	st := r.state(n)
	r.stop()
	if err != nil {
		return 0, "", err
	}
	gen := st[0].gen
	for _, m := range st {
		if m.gen != gen {
			return 0, "", fmt.Errorf("members synced in generations %d and %d", gen, m.gen)
		}
	}
	reqs := make([]*kmsg.HeartbeatRequest, n)
	for i, m := range st {
		reqs[i] = kmsg.NewPtrHeartbeatRequest()
		reqs[i].Group, reqs[i].Generation, reqs[i].MemberID = "bench-heartbeat", m.gen, m.id
	}
	lat, rate, err := hammer(ctx, n, window, func(ctx context.Context, w, _ int) error {
		resp, err := reqs[w].RequestWith(ctx, cls[w])
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
	if err != nil {
		return 0, "", err
	}
	return rate, fmt.Sprintf("p50 %s", fmtDur(percentile(lat, 0.5))), nil
}
