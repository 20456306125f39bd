package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func init() { Register(failoverGroupsGoal{}) }

// failoverGroupsGoal measures how long the groups of a killed coordinator
// stay unserved: a 3-broker kaas cluster in this process on the data dir
// (default liveness: reports every 1 s, dead after 3 s), 10,000 groups
// coordinated by one broker (not the controller), each with a committed
// offset; that broker is killed (node.Kill) and the clock runs until every
// one of the groups answers OffsetFetch with its offset at its new
// coordinator (batched OffsetFetch v8 through kadm, every 100 ms, from a
// client seeded with the live brokers, made afresh each round). Bound:
// --dead-after + 1 s.
type failoverGroupsGoal struct{}

func (failoverGroupsGoal) Name() string { return "failover-groups" }
func (failoverGroupsGoal) Describe() string {
	return "failover-groups: after kill -9 of a coordinator of 10,000 groups, all answer OffsetFetch again within --dead-after (3 s) + 1 s"
}

func (failoverGroupsGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	const (
		g         = "failover-groups"
		deadAfter = 3 * time.Second
		topic     = "bench-failover-groups"
	)
	groups := 10000
	if env.Duration < time.Second {
		groups = 300 // a quick run (the suite's well-formedness test)
	}
	dir, err := env.ScratchDir(false, "kaas-failover-groups-")
	if err != nil {
		return nil, err
	}
	nodes, err := startThree(env, dir, deadAfter, nil)
	defer killAll(nodes)
	if err != nil {
		return nil, fmt.Errorf("bench: failover-groups cluster: %w", err)
	}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		return nil, err
	}
	// The groups of one broker that is not the controller.
	victim := -1
	for i, n := range nodes {
		if !n.Runtime.IsController() {
			victim = i
			break
		}
	}
	var ids []string
	for i := 0; len(ids) < groups; i++ {
		id := fmt.Sprintf("bench-fg-%d", i)
		if b, err := nodes[0].Broker.Coordinator().FindGroup(id); err == nil && int(b.NodeID) == victim {
			ids = append(ids, id)
		}
	}
	// One committed offset each (its offset is its index + 1), 32 at a time.
	want := make(map[string]int64, len(ids))
	work := make(chan int)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				o := kadm.Offsets{}
				o.AddOffset(topic, 0, int64(i+1), -1)
				r, err := adm.CommitOffsets(ctx, ids[i], o)
				if err == nil {
					err = r.Error()
				}
				if err != nil {
					mu.Lock()
					first = errors.Join(first, fmt.Errorf("commit %s: %w", ids[i], err))
					mu.Unlock()
				}
			}
		})
	}
	for i, id := range ids {
		want[id] = int64(i + 1)
		work <- i
	}
	close(work)
	wg.Wait()
	if first != nil {
		return nil, fmt.Errorf("bench: failover-groups: %w", first)
	}
	// Every broker knows them active (a report interval) before the kill.
	time.Sleep(2 * time.Second)

	var live []string
	for i, a := range addrs {
		if i != victim {
			live = append(live, a)
		}
	}
	killed := time.Now()
	nodes[victim].Kill()
	nodes[victim] = nil
	pending := ids
	var last error
	for len(pending) > 0 {
		if time.Since(killed) > 60*time.Second {
			return nil, fmt.Errorf("bench: failover-groups: %d of %d groups not served 60 s after the kill (%v)", len(pending), len(ids), last)
		}
		// A fresh client each round, seeded with the live brokers: the
		// server side is measured, not a client's cache of coordinators
		// (franz-go keeps dialing a dead one until its retry timeout).
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fresh, err := kgo.NewClient(kgo.SeedBrokers(live...), kgo.RetryTimeout(time.Second))
		if err != nil {
			cancel()
			return nil, err
		}
		got := kadm.NewClient(fresh).FetchManyOffsets(fctx, pending...)
		fresh.Close()
		cancel()
		var left []string
		var why error
		for _, id := range pending {
			r, ok := got[id]
			if !ok || r.Err != nil {
				left = append(left, id)
				if why == nil {
					why = fmt.Errorf("%s: answered %v (%v)", id, ok, r.Err)
				}
				continue
			}
			if o, ok := r.Fetched.Lookup(topic, 0); !ok || o.Err != nil || o.At != want[id] {
				left = append(left, id)
				if why == nil {
					why = fmt.Errorf("%s: offset %v %v %d, want %d", id, ok, o.Err, o.At, want[id])
				}
			}
		}
		if why != nil {
			env.Log.Debug("failover-groups: not served yet", "left", len(left), "first", why)
			last = why
		}
		pending = left
		if len(pending) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	took := time.Since(killed)
	bound := deadAfter + time.Second
	return []Row{AtMost(g, fmt.Sprintf("failover: all %d groups of a killed coordinator answer OffsetFetch again, vs --dead-after + 1 s", len(ids)),
		"ms", float64(took.Milliseconds()), float64(bound.Milliseconds()), RefSpec, 1.0,
		fmt.Sprintf("3 in-process brokers on the data dir, dead after %v; coordinator %d killed (not the controller); batched OffsetFetch every 100 ms", deadAfter, victim))}, nil
}
