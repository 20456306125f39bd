package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

func init() { Register(memoryGoal{}) }

// memoryGoal measures what kaas keeps in memory per group (spec goal 9),
// from runtime.MemStats in this process: HeapAlloc after GC before and
// after creating idle groups (one simple commit of one offset each) on a
// fresh in-process kaas broker, and before and after committing 1000
// offsets in each of a few groups. The clients are closed before each
// reading so that only the broker's memory remains.
type memoryGoal struct{}

func (memoryGoal) Name() string { return "memory" }
func (memoryGoal) Describe() string {
	return "memory: HeapAlloc after GC per idle group (≤ 1 KB) and per committed offset at 1000 offsets/group (≤ 100 B), fresh in-process kaas broker"
}

const (
	idleGroupBytes = 1024
	offsetBytes    = 100
)

func (memoryGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	const g = "memory"
	idle, big := 10_000, 20
	if env.Duration < time.Second { // the quick test
		idle, big = 1000, 4
	}
	dir, err := env.ScratchDir(true, "kaas-memory-")
	if err != nil {
		return nil, err
	}
	t, err := env.StartKaas(ctx, "kaas-memory", dir, nil)
	if err != nil {
		return nil, err
	}
	if err := CreateTopic(ctx, t, commitTopic, commitPartitions); err != nil {
		return nil, err
	}
	// grow runs n commits (parts partitions each, group prefix-i) on fresh
	// clients and returns the HeapAlloc growth once they are closed.
	grow := func(prefix string, n, parts int) (int64, error) {
		before := heapAfterGC()
		cls, err := openClients(t, clientsPerLoad)
		if err != nil {
			return 0, err
		}
		workers := min(n, 64)
		errs := make(chan error, workers)
		for w := range workers {
			go func() {
				var err error
				for i := w; i < n && err == nil; i += workers {
					req := simpleCommit(fmt.Sprintf("%s-%d", prefix, i), commitTopic, 0, parts)
					setOffsets(req, int64(i))
					err = doCommit(ctx, cls[w%len(cls)], req)
				}
				errs <- err
			}()
		}
		var first error
		for range workers {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		closeClients(cls)
		if first != nil {
			return 0, first
		}
		time.Sleep(200 * time.Millisecond) // the broker's connection goroutines end
		return heapAfterGC() - before, nil
	}
	dIdle, err := grow("bench-idle", idle, 1)
	if err != nil {
		return nil, err
	}
	dBig, err := grow("bench-big", big, commitPartitions)
	if err != nil {
		return nil, err
	}
	perGroup := float64(dIdle) / float64(idle)
	perOffset := float64(dBig) / float64(big*commitPartitions)
	where := "kaas-tmpfs"
	if !IsTmpfs(dir) {
		where = "kaas"
	}
	return []Row{
		AtMost(g, fmt.Sprintf("memory per idle group, %s", where), "B", max(perGroup, 1), idleGroupBytes, RefSpec, 1.0,
			fmt.Sprintf("HeapAlloc after GC grew %d KB for %d groups with 1 committed offset each (resident)", dIdle>>10, idle)),
		AtMost(g, fmt.Sprintf("memory per committed offset at 1000 offsets, %s", where), "B", max(perOffset, 1), offsetBytes, RefSpec, 1.0,
			fmt.Sprintf("HeapAlloc after GC grew %d KB for %d groups × 1000 offsets (group overhead included)", dBig>>10, big)),
	}, nil
}

// heapAfterGC is HeapAlloc after two full collections.
func heapAfterGC() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
