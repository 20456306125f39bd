package bench

import (
	"context"
	"time"
)

func init() { Register(limitsGoal{}) }

// limitsGoal reports the raw limits next to the orientation figures of
// docs/performance. It has no target of its own: the other goals compare
// with these figures.
type limitsGoal struct{}

func (limitsGoal) Name() string { return "limits" }
func (limitsGoal) Describe() string {
	return "raw limits of this machine: durable small-file pattern, fsynced append, loopback round trip"
}

// Orientation figures from docs/performance (one of these machines).
const (
	specFileP50  = 2 * time.Millisecond
	specFileP99  = 35 * time.Millisecond // "20–50 ms"
	specFiles1   = 200.0
	specFiles8   = 1150.0 // "1,100–1,200"
	specLoopP50  = 19 * time.Microsecond
	specLoopRPS  = 45000.0
	limitsFSNote = "data dir is tmpfs: not a disk"
)

func (limitsGoal) Run(ctx context.Context, env *Env) ([]Row, error) {
	l, err := env.Limits(ctx)
	if err != nil {
		return nil, err
	}
	note := ""
	if l.Tmpfs {
		note = limitsFSNote
	}
	const g = "limits"
	return []Row{
		Info(g, "file pattern p50, 1 writer", "ms", ms(l.FileP50), ms(specFileP50), RefSpec, note),
		Info(g, "file pattern p99, 1 writer", "ms", ms(l.FileP99), ms(specFileP99), RefSpec, note),
		Info(g, "file pattern, 1 writer", "files/s", l.Files1, specFiles1, RefSpec, note),
		Info(g, "file pattern, 8 writers (volume ceiling)", "files/s", l.Files8, specFiles8, RefSpec, note),
		Info(g, "append 1 KiB + fsync, 1 writer vs file pattern", "ops/s", l.Appends1, l.Files1, RefL,
			"p50 "+fmtDur(l.AppendP50)),
		Info(g, "append 1 KiB + fsync, 8 writers vs file pattern", "ops/s", l.Appends8, l.Files8, RefL, ""),
		Info(g, "loopback round trip p50", "µs", us(l.LoopP50), us(specLoopP50), RefSpec, ""),
		Info(g, "loopback, 1 connection", "req/s", l.LoopRPS, specLoopRPS, RefSpec, ""),
	}, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(100 * time.Nanosecond).String()
	}
}
