package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { Register(findCoordGoal{}) }

// findCoordGoal measures FindCoordinator for groups (spec goal 6): one
// client sending one request at a time to the seed broker (kgo's own
// coordinator cache is bypassed), each for a different group id.
//
// It runs against durable kaas: the answer comes from the applied
// assignment table in memory (the standalone source answers "this broker"),
// so the path has no disk I/O by construction (internal/broker
// 10_find_coordinator.go, coord.FindGroup), and a durable target that keeps
// up with kfake shows it.
type findCoordGoal struct{}

func (findCoordGoal) Name() string { return "find-coordinator" }
func (findCoordGoal) Describe() string {
	return "FindCoordinator (group) p50 vs kfake and p99 vs 250 µs; no disk I/O on that path (answered from the in-memory assignment)"
}

const (
	findCoordP50Bound = 1.1
	findCoordP99Max   = 250 // µs, absolute (spec)
)

func (findCoordGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	const g = "find-coordinator"
	window := groupWindow(env)
	measure := func(t Target) ([]time.Duration, error) {
		cls, err := openClients(t, 1)
		if err != nil {
			return nil, err
		}
		defer closeClients(cls)
		seed := cls[0].SeedBrokers()[0]
		lat, _, err := hammer(ctx, 1, window, func(ctx context.Context, _, i int) error {
			req := kmsg.NewPtrFindCoordinatorRequest()
			key := fmt.Sprintf("bench-find-%d", i)
			req.CoordinatorKey, req.CoordinatorKeys = key, []string{key}
			kr, err := seed.Request(ctx, req)
			if err != nil {
				return err
			}
			resp := kr.(*kmsg.FindCoordinatorResponse)
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				return err
			}
			for _, c := range resp.Coordinators {
				if err := kerr.ErrorForCode(c.ErrorCode); err != nil {
					return err
				}
			}
			return nil
		})
		return lat, err
	}
	peer, err := measure(env.Kfake)
	if err != nil {
		return nil, err
	}
	ours, err := measure(env.Kaas)
	if err != nil {
		return nil, err
	}
	kind := "durable"
	if !env.Kaas.Durable {
		kind = "data dir on tmpfs"
	}
	p50, p99 := percentile(ours, 0.5), percentile(ours, 0.99)
	pp50, pp99 := percentile(peer, 0.5), percentile(peer, 0.99)
	rows := []Row{
		AtMost(g, fmt.Sprintf("FindCoordinator p50, kaas %s vs kfake", kind), "µs", us(p50), us(pp50), RefKfake, findCoordP50Bound,
			fmt.Sprintf("no disk I/O by construction (in-memory assignment table); kfake p99 %s; %d requests", fmtDur(pp99), len(ours))),
		AtMost(g, fmt.Sprintf("FindCoordinator p99, kaas %s vs 250 µs", kind), "µs", us(p99), findCoordP99Max, RefSpec, 1.0,
			fmt.Sprintf("absolute bound of the spec; kfake p99 %s", fmtDur(pp99))),
	}
	if env.Kafka != nil {
		k, err := measure(*env.Kafka)
		note := fmt.Sprintf("%d requests to the seed broker", len(k))
		env.Settle()
		rows[0] = rows[0].WithKafka(us(percentile(k, 0.5)), note, err)
		rows[1] = rows[1].WithKafka(us(percentile(k, 0.99)), note, err)
	}
	return rows, nil
}
