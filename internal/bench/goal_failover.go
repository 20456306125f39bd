package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/broker"
	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/node"
)

func init() { Register(failoverGoal{}) }

// failoverGoal measures spec goal 11: after kill -9 of a group's
// coordinator (a 3-broker kaas cluster in this process, default liveness
// timings: reports every 1 s, dead after 3 s), how long until the group's
// member commits again, against detection + one heartbeat + 1 s. The member
// is a franz-go consumer with its default 3 s heartbeat; it commits offsets
// with its own generation, so a success means the group re-formed on the new
// coordinator. The kill is as abrupt as one process can make it for a part
// of itself (node.Kill: no drain, no stopped report, connections cut).
type failoverGoal struct{}

func (failoverGoal) Name() string { return "failover" }
func (failoverGoal) Describe() string {
	return "failover: after kill -9 of a group's coordinator, the group commits again within detection (3 s) + one heartbeat (3 s) + 1 s"
}

func (failoverGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	const (
		g         = "failover"
		deadAfter = 3 * time.Second
		heartbeat = 3 * time.Second // franz-go's default
	)
	dir, err := env.ScratchDir(false, "kaas-failover-")
	if err != nil {
		return nil, err
	}
	gc := group.DefaultConfig()
	gc.InitialRebalanceDelay = 0
	nodes, err := startThree(env, dir, deadAfter, &gc)
	defer killAll(nodes)
	if err != nil {
		return nil, fmt.Errorf("bench: failover cluster: %w", err)
	}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	if _, err := kadm.NewClient(admCl).CreateTopic(ctx, 3, 1, nil, "bench-failover"); err != nil {
		return nil, err
	}
	// A group whose coordinator is not the controller: the measurement is the
	// coordinator's failure, not the controller's.
	ctrl := -1
	for i, n := range nodes {
		if n.Runtime.IsController() {
			ctrl = i
		}
	}
	var groupID string
	victim := -1
	for i := 0; victim < 0; i++ {
		id := fmt.Sprintf("bench-failover-%d", i)
		b, err := nodes[0].Broker.Coordinator().FindGroup(id)
		if err == nil && int(b.NodeID) != ctrl {
			groupID, victim = id, int(b.NodeID)
		}
	}
	member, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics("bench-failover"),
		kgo.DisableAutoCommit())
	if err != nil {
		return nil, err
	}
	defer member.Close()
	commit := func(off int64) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var cerr error
		member.CommitOffsetsSync(cctx, map[string]map[int32]kgo.EpochOffset{"bench-failover": {0: {Epoch: -1, Offset: off}}},
			func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				cerr = err
				if err == nil {
					for _, t := range resp.Topics {
						for _, p := range t.Partitions {
							if p.ErrorCode != 0 {
								cerr = fmt.Errorf("commit error code %d", p.ErrorCode)
							}
						}
					}
				}
			})
		return cerr
	}
	// Join, then commit once so the group is live on its coordinator.
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	member.PollFetches(pctx)
	cancel()
	joined := time.Now()
	for off := int64(1); commit(off) != nil; off++ {
		if time.Since(joined) > 30*time.Second {
			return nil, fmt.Errorf("bench: failover group never committed before the kill")
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		member.PollFetches(pctx)
		cancel()
	}
	killed := time.Now()
	nodes[victim].Kill()
	nodes[victim] = nil
	off := int64(1000)
	for commit(off) != nil {
		off++
		if time.Since(killed) > 60*time.Second {
			return nil, fmt.Errorf("bench: failover group did not commit again within 60 s")
		}
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		member.PollFetches(pctx) // keeps the client's group management running
		cancel()
	}
	took := time.Since(killed)
	bound := deadAfter + heartbeat + time.Second
	return []Row{AtMost(g, "failover: group commits again after kill -9 of its coordinator, vs detection + heartbeat + 1 s",
		"ms", float64(took.Milliseconds()), float64(bound.Milliseconds()), RefSpec, 1.0,
		fmt.Sprintf("3 in-process brokers, dead after %v, franz-go heartbeat %v; coordinator %d killed (not the controller)", deadAfter, heartbeat, victim))}, nil
}

// startThree starts a three-broker kaas cluster in this process over dir
// (dead after deadAfter; gc nil: Kafka's group defaults), the way the
// failover goals need it; killAll stops what it started, also on error.
func startThree(env *Env, dir string, deadAfter time.Duration, gc *group.Config) ([]*node.Node, error) {
	nodes := make([]*node.Node, 3)
	errs := make(chan error, len(nodes))
	for i := range nodes {
		go func() {
			n, err := node.Start(node.Config{Broker: broker.Config{ID: int32(i), DataDir: dir, Listen: "127.0.0.1:0",
				Logger: env.Log.With("target", fmt.Sprintf("kaas-cluster-%d", i))},
				DeadAfter: deadAfter, Group: gc, ReadyTimeout: 30 * time.Second})
			nodes[i] = n
			errs <- err
		}()
	}
	var first error
	for range nodes {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return nodes, first
}

// killAll stops the nodes still running (node.Kill).
func killAll(nodes []*node.Node) {
	for _, n := range nodes {
		if n != nil {
			n.Kill()
		}
	}
}
