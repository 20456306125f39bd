package bench

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/kaas-dev/kaas/internal/route"
	"github.com/kaas-dev/kaas/internal/volume"
)

func init() { Register(routingGoal{}) }

// routingGoal measures routing stability (spec goal 12), a pure computation
// of internal/route: with N brokers all alive, then each one in turn dead
// (its row stays in the broker set, as in assignment.json), the share of
// 100k random group ids whose coordinator changes. The worst broker is
// reported against 1/N + 1%.
type routingGoal struct{}

func (routingGoal) Name() string { return "routing" }
func (routingGoal) Describe() string {
	return "routing stability: one of N brokers leaving moves ≤ 1/N + 1% of 100k random groups (route.Coordinator, worst broker)"
}

const routingKeys = 100_000

func (routingGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	const g = "routing"
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]string, routingKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("group-%016x", rng.Uint64())
	}
	var rows []Row
	for _, n := range []int{3, 5, 12} {
		brokers := make([]string, n)
		for i := range brokers {
			brokers[i] = volume.BrokerName(int32(i))
		}
		before := make([]string, len(keys))
		for i, k := range keys {
			before[i], _ = route.Coordinator(k, brokers, func(string) bool { return true })
		}
		worst, worstID := 0, ""
		for _, dead := range brokers {
			if err := ctx.Err(); err != nil {
				return rows, err
			}
			alive := func(id string) bool { return id != dead }
			moved := 0
			for i, k := range keys {
				if c, ok := route.Coordinator(k, brokers, alive); !ok || c != before[i] {
					moved++
				}
			}
			if moved > worst {
				worst, worstID = moved, dead
			}
		}
		share := 100 * float64(worst) / routingKeys
		bound := 100 * (1/float64(n) + 0.01)
		rows = append(rows, AtMost(g, fmt.Sprintf("routing: 1 of %d brokers leaves, groups moved", n), "%",
			share, bound, RefSpec, 1.0,
			fmt.Sprintf("worst broker %s; bound 1/N + 1%% = %.2f%% of %d random groups; pure route computation", worstID, bound, routingKeys)))
	}
	return rows, nil
}
